"""Domain values named after the paper: pairs, rollouts, reflections, judgments.

All frozen dataclasses; all JSON round-trippable through `to_dict` / `from_dict`.
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from reflectrm.errors import InputError

Choice = Literal[1, 2]
"""Index of the preferred candidate: 1 = the first (Response 1 / Critique 1), 2 = the second."""

ROLES = ("system", "user", "assistant")

MAX_PAIR_CHARS = 2_000_000
"""Characters in a pair's conversation and both responses together, at most: about 500k tokens, past the
context of any judge this runs, so a larger pair is refused at once instead of after minutes of tokenising
(each backend then checks the exact prompt against its own model's context)."""


def value_kind(value: Any) -> str:
    """What a cell holds, said without its value ("a number", "text"): messages never quote a file's data."""
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "text"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, (list, tuple)):
        return "a list"
    return f"a {type(value).__name__}"


def id_text(value: Any) -> str:
    """A pair id as written: a string as is, a JSON number or boolean as JSON writes it ("0", "false", "0.0").

    None (no id) is "", which the pair replaces by a content hash; a falsy id is never "no id".

    Raises:
        InputError: the id is a list, an object or another type that names no row.
    """
    if value is None or isinstance(value, str):
        return value or ""
    if isinstance(value, (bool, int, float)):
        return json.dumps(value)
    raise InputError(f"id must be a string or a number, got {type(value).__name__}: give each pair a scalar id")


def _text(d: Mapping[str, Any], name: str, *, optional: bool = False) -> str:
    """A text field of a pair, as written: a number, boolean, list or object is refused, never stored as its
    Python repr ({"a": 1} as "{'a': 1}") or a guessed spelling (1.0 as "1.0"); an optional field may be absent.
    """
    value = d.get(name)
    if optional and value is None:
        return ""
    if not isinstance(value, str):
        raise InputError(f"{name!r} must be a string, got {value_kind(value)}: write it as a JSON string")
    return value


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One turn of a conversation."""

    role: str
    content: str

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise InputError(f"a message role is not one of {', '.join(ROLES)}: fix the role")  # not quoted: data
        if not isinstance(self.content, str):
            raise InputError(f"message content must be a string, got {type(self.content).__name__}")


def _as_messages(raw: Iterable[ChatMessage | Mapping[str, Any]]) -> tuple[ChatMessage, ...]:
    out = []
    for k, m in enumerate(raw):
        if isinstance(m, ChatMessage):
            out.append(m)
        elif isinstance(m, Mapping) and "role" in m and "content" in m:
            for name in ("role", "content"):
                if not isinstance(m[name], str):
                    raise InputError(f"message {k}'s {name} must be a string, got {value_kind(m[name])}: "
                                     "write it as a JSON string")
            out.append(ChatMessage(m["role"], m["content"]))
        else:
            raise InputError(f"message {k} must be an object with 'role' and 'content', got {type(m).__name__}")
    return tuple(out)


@dataclass(frozen=True, slots=True, kw_only=True)
class PreferencePair:
    """A condition (conversation ending in a user turn) and two candidate responses.

    Attributes:
        conversation: the condition phi of Eq. 2; the last message is the user query.
        response_1: the first candidate.
        response_2: the second candidate.
        label: the better response when known (1 or 2), else None.
        tie: True when the source judges the two responses equally good (then `label` is None); a tie is
            kept and shown, but left out of pairwise accuracy and counted on its own.
        id: an identifier, stable across runs (data sets give one; else a content hash).
        source: where the pair came from (a data set name, "manual", ...).
        subset: a finer grouping for per-subset reports.
    """

    conversation: tuple[ChatMessage, ...]
    response_1: str
    response_2: str
    label: Choice | None = None
    id: str = ""
    source: str = ""
    subset: str = ""
    tie: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "conversation", _as_messages(self.conversation))
        if not self.conversation:
            raise InputError("the pair has no query: give a 'query' or a non-empty 'messages' list")
        last = self.conversation[-1]
        if last.role != "user":
            raise InputError(f"the conversation must end with a user turn, not {last.role!r}: drop trailing turns")
        if not last.content.strip():
            raise InputError("the query is empty: give the question the two responses answer")
        for name in ("response_1", "response_2"):
            value = getattr(self, name)
            if not isinstance(value, str):
                raise InputError(f"{name} must be a string, got {type(value).__name__}")
            if not value.strip():
                raise InputError(f"{name} is empty: give both responses some text")
        if self.label not in (None, 1, 2):
            raise InputError(f"label must be 1 or 2 (or absent), got {value_kind(self.label)}")
        size = len(self.response_1) + len(self.response_2) + sum(len(m.content) for m in self.conversation)
        if size > MAX_PAIR_CHARS:
            raise InputError(
                f"the pair is {size:,} characters, over the limit of {MAX_PAIR_CHARS:,} (more than any judge's "
                "context holds): shorten the conversation or the responses"
            )
        if self.tie is not False and self.tie is not True:
            raise InputError(f"tie must be true or false, got {value_kind(self.tie)}")
        if self.tie and self.label is not None:
            raise InputError("a tie has no better response, but a label is given: drop the label or the tie")
        if not self.id:
            object.__setattr__(self, "id", self.fingerprint()[:16])

    @classmethod
    def from_query(cls, query: str, response_1: str, response_2: str, **kw: Any) -> PreferencePair:
        """A single-turn pair."""
        if not isinstance(query, str):
            raise InputError(f"query must be a string, got {type(query).__name__}")
        return cls(conversation=(ChatMessage("user", query),), response_1=response_1, response_2=response_2, **kw)

    @property
    def query(self) -> str:
        """The last user turn."""
        return self.conversation[-1].content

    @property
    def history(self) -> tuple[ChatMessage, ...]:
        """The turns before the query."""
        return self.conversation[:-1]

    def swapped(self) -> PreferencePair:
        """The same pair with the responses in the other order (label follows its response)."""
        label = None if self.label is None else 3 - self.label
        return PreferencePair(
            conversation=self.conversation,
            response_1=self.response_2,
            response_2=self.response_1,
            label=label,  # type: ignore[arg-type]
            id=f"{self.id}:swapped",
            source=self.source,
            subset=self.subset,
            tie=self.tie,
        )

    def fingerprint(self) -> str:
        """A sha256 of the content (conversation and both responses, in order)."""
        payload = json.dumps(
            [[[m.role, m.content] for m in self.conversation], self.response_1, self.response_2],
            ensure_ascii=False,
        )
        return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()

    def to_dict(self) -> dict[str, Any]:
        d = {
            "id": self.id,
            "messages": [{"role": m.role, "content": m.content} for m in self.conversation],
            "response_1": self.response_1,
            "response_2": self.response_2,
            "label": self.label,
            "source": self.source,
            "subset": self.subset,
        }
        if self.tie:  # only when set, so the dicts (and content hashes) of untied pairs are as before
            d["tie"] = True
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> PreferencePair:
        """Build from `{"query" | "messages", "response_1", "response_2", "label"?, "id"?, ...}`."""
        if not isinstance(d, Mapping):
            raise InputError(f"a pair must be a JSON object, got {type(d).__name__}")
        missing = [k for k in ("response_1", "response_2") if k not in d]
        if missing:
            raise InputError(f"missing field {missing[0]!r}: every pair needs response_1 and response_2")
        if "messages" in d and d["messages"] is not None:
            if not isinstance(d["messages"], list):
                raise InputError("'messages' must be a list of {role, content} objects")
            conversation = _as_messages(d["messages"])
        elif "query" in d:
            conversation = (ChatMessage("user", _text(d, "query")),)
        else:
            raise InputError("missing field 'query': give a 'query' string or a 'messages' list")
        label = d.get("label")
        tie = d.get("tie", False)
        if isinstance(label, str) and label.strip() in ("1", "2"):
            label = int(label)
        if isinstance(label, str) and label.strip().lower() == "tie":
            label, tie = None, True
        if label not in (None, 1, 2) or isinstance(label, bool):
            raise InputError(f"label must be 1 or 2 (or 'tie', or absent), got {value_kind(label)}")
        if tie not in (True, False):
            raise InputError(f"'tie' must be true or false, got {value_kind(tie)}")
        return cls(
            conversation=conversation,
            response_1=_text(d, "response_1"),
            response_2=_text(d, "response_2"),
            label=label,
            id=id_text(d.get("id")),
            source=_text(d, "source", optional=True),
            subset=_text(d, "subset", optional=True),
            tie=bool(tie),
        )


class ParseStatus(str, enum.Enum):
    """How a model output parsed. Only `OK` and `REPAIRED` outputs carry a choice."""

    OK = "ok"  # well-formed <Analysis> and <Result> with a recognised statement
    REPAIRED = "repaired"  # a choice was recovered from a malformed output (missing tag, bare "Response 2")
    NO_RESULT = "no_result"  # no <Result> and no statement after the analysis
    INVALID_RESULT = "invalid_result"  # a result that names no valid candidate, or contradicts itself
    EMPTY = "empty"  # nothing was generated

    @property
    def parseable(self) -> bool:
        return self in (ParseStatus.OK, ParseStatus.REPAIRED)


@dataclass(frozen=True, slots=True, kw_only=True)
class Rollout:
    """One stage-1 output O_i = (a_i, p_i) with its confidence (Eq. 5).

    Attributes:
        index: position among the judgment's samples (0-based).
        text: the raw generated text.
        analysis: the parsed analysis a_i ("" when absent).
        prediction: p_i, 1 or 2; None when the output is unparseable.
        status: how the output parsed.
        confidence: Eq. 5, mean log-prob of the lowest-log-prob tokens; -inf with no tokens.
        num_tokens: generated tokens, the end-of-sequence token excluded.
        greedy: True for a greedy decode (the `greedy` strategy), False for a sample.
        finish_reason: "stop" or "length" (hit max_new_tokens).
    """

    index: int
    text: str
    analysis: str
    prediction: Choice | None
    status: ParseStatus
    confidence: float
    num_tokens: int
    greedy: bool = False
    finish_reason: str = "stop"

    @property
    def parseable(self) -> bool:
        return self.prediction is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class Reflection:
    """One stage-2 comparison (Eq. 7): sample `sample` against the anchor.

    Attributes:
        sample: index i of the compared rollout.
        anchor: index of the anchor rollout.
        order: the rollout indices shown as (Critique 1, Critique 2).
        text: the raw generated reflection.
        analysis: its parsed analysis.
        choice: the critique it prefers (1 or 2), None when unparseable.
        status: how it parsed.
        num_tokens: generated tokens.
    """

    sample: int
    anchor: int
    order: tuple[int, int]
    text: str
    analysis: str
    choice: Choice | None
    status: ParseStatus
    num_tokens: int = 0

    @property
    def prefers_sample(self) -> bool:
        """Eq. 8 membership. An unparseable reflection counts as preferring the anchor."""
        if self.choice is None:
            return False
        return self.order[self.choice - 1] == self.sample


@dataclass(frozen=True, slots=True, kw_only=True)
class Vote:
    """The tally behind a verdict.

    Attributes:
        counts: votes for response 1 and response 2 (weights for weighted strategies).
        voters: the rollout indices that voted.
        anchor_added: True when the anchor joined the vote (empty group or tie, Eq. 9).
    """

    counts: tuple[float, float]
    voters: tuple[int, ...]
    anchor_added: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Judgment:
    """The full anatomy of one judgment of one pair.

    `verdict` is None when the judge abstained (no parseable output); `abstain_reason` says why.
    """

    pair: PreferencePair
    strategy: str
    rollouts: tuple[Rollout, ...]
    verdict: Choice | None
    anchor: int | None = None
    reflections: tuple[Reflection, ...] = ()
    winners: tuple[int, ...] = ()
    vote: Vote | None = None
    stage2_skipped: bool = False
    abstain_reason: str = ""
    config: Mapping[str, Any] = field(default_factory=dict)
    model: str = ""
    model_revision: str = ""
    backend: str = ""
    seed: int = 0
    timings: Mapping[str, float] = field(default_factory=dict)

    @property
    def abstained(self) -> bool:
        return self.verdict is None

    @property
    def correct(self) -> bool | None:
        """Whether the verdict matches the pair's label; None without a label."""
        if self.pair.label is None:
            return None
        return self.verdict == self.pair.label

    @property
    def anchor_rollout(self) -> Rollout | None:
        """The sample chosen as the anchor (Eq. 6); None when there is none (no anchor, or a greedy decode)."""
        return next((r for r in self.rollouts if r.index == self.anchor and not r.greedy), None)

    @property
    def tokens_generated(self) -> int:
        return sum(r.num_tokens for r in self.rollouts) + sum(r.num_tokens for r in self.reflections)

    @property
    def reflection_failures(self) -> int:
        """Stage-2 outputs that did not parse (each counted for the anchor, Eq. 8)."""
        return sum(1 for r in self.reflections if r.choice is None)

    @property
    def reflections_all_failed(self) -> bool:
        """Stage 2 ran and no reflection parsed: the verdict is the anchor's alone, whatever the strategy says."""
        return bool(self.reflections) and self.reflection_failures == len(self.reflections)

    @property
    def reflections_first_chosen(self) -> tuple[int, int]:
        """(parseable reflections that chose the first-presented critique, parseable reflections): stage 2's
        own position bias. Unbiased, the first is chosen half the time (the order is drawn at random)."""
        chosen = [r.choice for r in self.reflections if r.choice is not None]
        return sum(1 for c in chosen if c == 1), len(chosen)

    @property
    def decisive_first_chosen(self) -> tuple[int, int]:
        """`reflections_first_chosen` over the reflections whose two critiques reach different verdicts (both
        parsed): where the choice decides something. Between critiques that agree either choice is right, and a
        judge's habit there (Critique 1 on a tie) is no bias; here an unbiased stage 2 chooses the first half
        the time."""
        verdicts = {r.index: r.prediction for r in self.rollouts if not r.greedy and r.prediction is not None}
        chosen = [r.choice for r in self.reflections if r.choice is not None
                  and verdicts.get(r.order[0]) is not None and verdicts.get(r.order[1]) is not None
                  and verdicts[r.order[0]] != verdicts[r.order[1]]]
        return sum(1 for c in chosen if c == 1), len(chosen)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        d["pair"] = self.pair.to_dict()
        d["rollouts"] = [_rollout_dict(r) for r in self.rollouts]
        d["reflections"] = [_reflection_dict(r) for r in self.reflections]
        d["winners"] = list(self.winners)
        d["vote"] = None if self.vote is None else {**asdict(self.vote), "counts": list(self.vote.counts)}
        d["config"] = dict(self.config)
        d["timings"] = dict(self.timings)
        d["tokens_generated"] = self.tokens_generated
        d["correct"] = self.correct
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Judgment:
        vote = d.get("vote")
        return cls(
            pair=PreferencePair.from_dict(d["pair"]),
            strategy=d["strategy"],
            rollouts=tuple(
                Rollout(**{**r, "status": ParseStatus(r["status"]), "confidence": float(r["confidence"])})
                for r in d["rollouts"]
            ),
            verdict=d["verdict"],
            anchor=d.get("anchor"),
            reflections=tuple(reflection_from_dict(r) for r in d.get("reflections", ())),
            winners=tuple(d.get("winners", ())),
            vote=None
            if vote is None
            else Vote(counts=tuple(vote["counts"]), voters=tuple(vote["voters"]), anchor_added=vote["anchor_added"]),
            stage2_skipped=d.get("stage2_skipped", False),
            abstain_reason=d.get("abstain_reason", ""),
            config=d.get("config", {}),
            model=d.get("model", ""),
            model_revision=d.get("model_revision", ""),
            backend=d.get("backend", ""),
            seed=d.get("seed", 0),
            timings=d.get("timings", {}),
        )


def _float_out(x: float) -> float | str:
    # JSON has no infinities; keep them readable and round-trippable.
    return x if math.isfinite(x) else ("-inf" if x < 0 else "inf")


def _rollout_dict(r: Rollout) -> dict[str, Any]:
    d = {f.name: getattr(r, f.name) for f in fields(r)}
    d["status"] = r.status.value
    d["confidence"] = _float_out(r.confidence)
    return d


def _reflection_dict(r: Reflection) -> dict[str, Any]:
    d = {f.name: getattr(r, f.name) for f in fields(r)}
    d["status"] = r.status.value
    d["order"] = list(r.order)
    d["prefers_sample"] = r.prefers_sample
    return d


def reflection_from_dict(d: Mapping[str, Any]) -> Reflection:
    """Inverse of the reflection part of `Judgment.to_dict` (drops derived fields)."""
    keep = {f.name for f in fields(Reflection)} - {"status", "order"}
    return Reflection(
        **{k: v for k, v in d.items() if k in keep}, status=ParseStatus(d["status"]), order=tuple(d["order"])
    )


def messages_to_dicts(messages: Sequence[ChatMessage]) -> list[dict[str, str]]:
    """Chat messages as plain dicts (the format chat templates and HTTP APIs take)."""
    return [{"role": m.role, "content": m.content} for m in messages]
