"""Training data construction (PAPER.md section 2, Appendix A.1).

    judgments = collect_rollouts(pairs, backend, DataConfig())     # N = 8 samples at T = 1.0 per pair
    built = build_training_set(judgments, config=DataConfig(), extra=read_examples(path), eval_pairs=held_out)
    snapshot = write_snapshot(built, Path("data"), name="demo")      # data/demo-<hash>/ (HF dataset)

From the rollouts on labelled pairs: items every sample gets right are dropped (no signal); every
remaining item gives a preference example (the response-preference prompt, Eq. 2, and the pair's
label); every mixed-outcome item gives exactly one reflection pair (the analyses of one correct and
one incorrect sample in seeded random order, Eq. 3, labelled with the correct one's position). The
two kinds are mixed at `DataConfig.mix` (paper: 4:1). Examples from elsewhere (the store's
human-correction-derived examples, as exported rows) join after the mix, deduplicated with
priority over generated ones. A set that shares a conversation with the chosen evaluation set is
refused.

Rows are TRL's conversational prompt format: `prompt` (a list of {role, content}), `label` (1 or 2)
and `task` ("response" / "analysis"), which `reflectrm.training.rewards` reads, plus `origin` and
`pair_id` for provenance. Everything here but `collect_rollouts` and the snapshot I/O is pure.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from reflectrm.core.prompts import DEFAULT_CONTROL_SUFFIX, Task, format_critique, reflection_prompt, response_prompt
from reflectrm.core.types import ChatMessage, Choice, Judgment, PreferencePair, Rollout, messages_to_dicts
from reflectrm.errors import ConfigError, InputError, require

log = logging.getLogger(__name__)

SNAPSHOT_MANIFEST = "snapshot.json"
ROW_FIELDS = ("prompt", "label", "task", "origin", "pair_id")


@dataclass(frozen=True, slots=True, kw_only=True)
class DataConfig:
    """How training data is built. Defaults follow the paper; PAPER.md 10 lists what it leaves open."""

    n: int = 8  # rollouts per pair (paper: 8)
    temperature: float = 1.0  # rollout sampling temperature (paper: 1.0)
    max_new_tokens: int = 1024  # per rollout (paper: 1024)
    mix: tuple[int, int] = (4, 1)  # preference : reflection (paper: 4:1); (1, 0) = preference only (RFT baseline)
    seed: int = 0  # seeds rollouts, the correct/incorrect choice, critique order and subsampling
    keep_all_wrong: bool = True  # all-wrong items give preference examples (the paper only drops all-correct)
    critique_includes_verdict: bool = False  # show each critique's verdict (Eq. 3 lists analyses only)
    control_suffix: str = DEFAULT_CONTROL_SUFFIX  # as in JudgeConfig: the prompts the judge is used with

    def __post_init__(self) -> None:
        if not isinstance(self.n, int) or self.n < 2:
            raise ConfigError(f"n must be an integer >= 2 (mixed outcomes need two samples), got {self.n!r}")
        if not self.temperature > 0:
            raise ConfigError(f"temperature must be > 0 (rollouts must differ; paper: 1.0), got {self.temperature!r}")
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be a positive integer, got {self.max_new_tokens!r}")
        mix = tuple(self.mix)
        if len(mix) != 2 or any(not isinstance(x, int) or x < 0 for x in mix) or mix == (0, 0):
            raise ConfigError(f"mix must be two integers >= 0, not both 0 (paper: (4, 1)), got {self.mix!r}")
        object.__setattr__(self, "mix", mix)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "mix": list(self.mix)}


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingExample:
    """One GRPO prompt with the verdict the reward checks.

    Attributes:
        prompt: the chat prompt (one user turn for either task).
        label: the candidate the reward expects (1 or 2).
        task: response preference (Eq. 2) or analysis preference (Eq. 3).
        origin: "preference", "reflection", or the name given to rows from elsewhere ("corrections").
        pair_id: the pair it was built from ("" when unknown).
    """

    prompt: tuple[ChatMessage, ...]
    label: Choice
    task: Task
    origin: str
    pair_id: str = ""

    @property
    def key(self) -> str:
        """Identity for deduplication: the task and the prompt's content (not the label)."""
        payload = json.dumps([self.task.value, messages_to_dicts(self.prompt)], ensure_ascii=False)
        return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()

    def to_row(self) -> dict[str, Any]:
        return {"prompt": messages_to_dicts(self.prompt), "label": self.label, "task": self.task.value,
                "origin": self.origin, "pair_id": self.pair_id}


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildReport:
    """What happened to every item and example (the counts Table 6 reports, and the filters')."""

    items: int = 0  # judged pairs with a label
    easy_dropped: int = 0  # all N samples right
    mixed: int = 0  # at least one right and one parseable wrong sample
    all_wrong: int = 0  # no sample right
    no_distinct_analyses: int = 0  # mixed, but every wrong sample wrote a right sample's analysis
    preference_pool: int = 0
    reflection_pool: int = 0
    preference: int = 0  # kept after mixing
    reflection: int = 0
    extra: int = 0  # kept rows from elsewhere
    duplicates_dropped: int = 0
    conflicts_dropped: int = 0  # same prompt, other label: the higher-priority example was kept


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingSet:
    """Built examples (in training order) and how they were built."""

    examples: tuple[TrainingExample, ...]
    report: BuildReport
    config: DataConfig = field(default_factory=DataConfig)

    def rows(self) -> list[dict[str, Any]]:
        return [e.to_row() for e in self.examples]

    @property
    def content_hash(self) -> str:
        return rows_hash(self.rows())


# --- rollouts (the one impure step) -----------------------------------------------------------------


def collect_rollouts(
    pairs: Sequence[PreferencePair],
    backend: Any,
    config: DataConfig,
    *,
    batch_size: int = 8,
    progress: Callable[[Any], None] | None = None,  # receives `reflectrm.pipeline.Progress` events
) -> list[Judgment]:
    """Sample `config.n` analyses per labelled pair at `config.temperature` (stage 1 only)."""
    from reflectrm.core.config import JudgeConfig
    from reflectrm.pipeline import judge_many

    unlabelled = [p.id for p in pairs if p.label is None]
    if unlabelled:
        raise InputError(f"pair {unlabelled[0]!r} has no label: training data needs labelled pairs")
    judge_config = JudgeConfig(strategy="majority", n=config.n, temperature=config.temperature,
                               max_new_tokens=config.max_new_tokens, seed=config.seed,
                               control_suffix=config.control_suffix)
    return list(judge_many(unique_pairs(pairs), backend, judge_config, batch_size=batch_size, progress=progress))


def unique_pairs(pairs: Iterable[PreferencePair]) -> list[PreferencePair]:
    """Pairs with identical content once (the first of each)."""
    seen: set[str] = set()
    out = []
    for p in pairs:
        if (fp := p.fingerprint()) not in seen:
            seen.add(fp)
            out.append(p)
    return out


# --- examples from rollouts (pure) ------------------------------------------------------------------


def _sampled(j: Judgment) -> list[Rollout]:
    return [r for r in j.rollouts if not r.greedy]


def preference_example(pair: PreferencePair, *, config: DataConfig) -> TrainingExample:
    """The response-preference example of a labelled pair (Eq. 2)."""
    return TrainingExample(prompt=tuple(response_prompt(pair, control_suffix=config.control_suffix)),
                           label=pair.label, task=Task.RESPONSE, origin="preference", pair_id=pair.id)


def reflection_example(j: Judgment, *, config: DataConfig) -> TrainingExample | None:
    """One correct against one incorrect analysis of `j`, in seeded random order (Eq. 3); None if none.

    Incorrect means a parseable wrong verdict: an unparseable output has no verdict to be wrong about.
    A wrong sample whose analysis text equals the chosen right one's is skipped (the pair would
    contradict itself when critiques show the analysis only).
    """
    rng = random.Random(_derive_seed(config.seed, j.pair.fingerprint(), "reflection"))
    right = [r for r in _sampled(j) if r.prediction == j.pair.label]
    wrong = [r for r in _sampled(j) if r.prediction is not None and r.prediction != j.pair.label]
    if not right or not wrong:
        return None
    cor = rng.choice(right)
    wrong = [r for r in wrong if _shown(r, config) != _shown(cor, config)]
    if not wrong:
        return None
    inc = rng.choice(wrong)
    first, second = (cor, inc) if rng.random() < 0.5 else (inc, cor)
    prompt = reflection_prompt(j.pair, _shown(first, config), _shown(second, config),
                               control_suffix=config.control_suffix)
    return TrainingExample(prompt=tuple(prompt), label=1 if first is cor else 2, task=Task.ANALYSIS,
                           origin="reflection", pair_id=j.pair.id)


def _shown(r: Rollout, config: DataConfig) -> str:
    return format_critique(r.analysis, r.prediction, include_verdict=config.critique_includes_verdict)


def _derive_seed(seed: int, key: str, purpose: str) -> int:
    digest = hashlib.sha256(f"{seed}\x00{key}\x00{purpose}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def examples_from_rollouts(
    judgments: Sequence[Judgment], *, config: DataConfig
) -> tuple[list[TrainingExample], list[TrainingExample], BuildReport]:
    """(preference pool, reflection pool, counts): the easy-item filter and one reflection per mixed item."""
    pref, refl = [], []
    counts = dict.fromkeys(("items", "easy_dropped", "mixed", "all_wrong", "no_distinct_analyses"), 0)
    for j in judgments:
        if j.pair.label is None:
            raise InputError(f"pair {j.pair.id!r} has no label: training data needs labelled pairs")
        samples = _sampled(j)
        right = sum(r.prediction == j.pair.label for r in samples)
        wrong = sum(r.prediction is not None and r.prediction != j.pair.label for r in samples)
        counts["items"] += 1
        if samples and right == len(samples):
            counts["easy_dropped"] += 1
            continue
        counts["all_wrong"] += right == 0
        if right == 0 and not config.keep_all_wrong:
            continue
        pref.append(preference_example(j.pair, config=config))
        if right and wrong:
            counts["mixed"] += 1
            example = reflection_example(j, config=config)
            if example is None:
                counts["no_distinct_analyses"] += 1
            else:
                refl.append(example)
    report = BuildReport(**counts, preference_pool=len(pref), reflection_pool=len(refl))
    return pref, refl, report


def mix_counts(preference: int, reflection: int, mix: tuple[int, int]) -> tuple[int, int]:
    """How many of each kind to keep for the ratio `mix`: all of the scarcer kind, the other subsampled.

    The scarcer kind (relative to the ratio) is kept whole and the other is cut to the nearest
    whole number that makes the ratio: plentiful reflection pairs are subsampled, as the paper's
    13,692 : 3,420 suggests; when reflection pairs are scarce, preference examples are.
    """
    p_part, r_part = mix
    if r_part == 0:
        return preference, 0
    if p_part == 0:
        return 0, reflection
    if reflection * p_part >= preference * r_part:  # reflection pairs are plentiful
        return preference, min(reflection, (2 * preference * r_part + p_part) // (2 * p_part))
    return min(preference, (2 * reflection * p_part + r_part) // (2 * r_part)), reflection


def build_training_set(
    judgments: Sequence[Judgment],
    *,
    config: DataConfig,
    extra: Sequence[TrainingExample] = (),
    eval_pairs: Sequence[PreferencePair] = (),
) -> TrainingSet:
    """Filter, mix (`config.mix`), add `extra`, deduplicate, refuse eval overlap, and shuffle (seeded)."""
    pref, refl, report = examples_from_rollouts(judgments, config=config)
    rng = random.Random(_derive_seed(config.seed, "mix", "subsample"))
    keep_p, keep_r = mix_counts(len(pref), len(refl), config.mix)
    generated = _sample(pref, keep_p, rng) + _sample(refl, keep_r, rng)
    kept, duplicates, conflicts = deduplicate([*extra, *generated])
    check_no_overlap(kept, eval_pairs)
    rng.shuffle(kept)
    ours = {id(e) for e in generated}
    kinds = [e.task for e in kept if id(e) in ours]
    report = BuildReport(**{**asdict(report), "preference": kinds.count(Task.RESPONSE),
                            "reflection": kinds.count(Task.ANALYSIS), "extra": len(kept) - len(kinds),
                            "duplicates_dropped": duplicates, "conflicts_dropped": conflicts})
    return TrainingSet(examples=tuple(kept), report=report, config=config)


def _sample(examples: list[TrainingExample], k: int, rng: random.Random) -> list[TrainingExample]:
    if k >= len(examples):
        return list(examples)
    chosen = sorted(rng.sample(range(len(examples)), k))  # keep the input order among the chosen
    return [examples[i] for i in chosen]


def deduplicate(examples: Iterable[TrainingExample]) -> tuple[list[TrainingExample], int, int]:
    """(examples, duplicates dropped, conflicts dropped): the first example of each prompt wins.

    Pass higher-priority examples (human corrections) first: on the same prompt with another
    label, theirs is kept and the conflict is counted.
    """
    first: dict[str, TrainingExample] = {}
    duplicates = conflicts = 0
    for e in examples:
        seen = first.get(e.key)
        if seen is None:
            first[e.key] = e
        elif seen.label == e.label:
            duplicates += 1
        else:
            conflicts += 1
    return list(first.values()), duplicates, conflicts


# --- evaluation-set overlap -------------------------------------------------------------------------

_CONTEXT = "## Context\n"
_CONTEXT_ENDS = ("\n\n[Response 1]\n", "\n\n## Responses for Judgment\n")  # reflection, response prompt


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _prompt_text(prompt: Sequence[ChatMessage] | Sequence[Mapping[str, Any]]) -> str:
    return "\n".join(m.content if isinstance(m, ChatMessage) else str(m.get("content", "")) for m in prompt)


def context_key(pair: PreferencePair) -> str:
    """A hash of the Context block (the rendered conversation) that the judge prompts of `pair` show.

    Found exactly: the block ends where the responses section that holds this pair's own responses
    begins, searched from the end, so a conversation quoting the prompt's section markers is still
    cut in the right place.
    """
    text = _prompt_text(response_prompt(pair))
    start = text.index(_CONTEXT) + len(_CONTEXT)  # the instructions before it hold no user text
    tail = f"{_CONTEXT_ENDS[1]}[Response 1]\n{pair.response_1}\n[Response 2]\n{pair.response_2}\n\n## Output format"
    return _digest(text[start : text.rindex(tail)])


def candidate_context_keys(prompt: Sequence[ChatMessage] | Sequence[Mapping[str, Any]]) -> set[str]:
    """Hashes of every place the Context block of a judge prompt (either task) could end.

    A training row carries a prompt, not its pair (the store exports prompts), so every cut at a
    section marker is a candidate; the true block is always among them.
    """
    text = _prompt_text(prompt)
    start = text.find(_CONTEXT)
    if start < 0:
        return {_digest(text)}
    start += len(_CONTEXT)
    cuts = {i for marker in _CONTEXT_ENDS for i in _find_all(text, marker, start)}
    return {_digest(text[start:i]) for i in cuts} or {_digest(text[start:])}


def _find_all(text: str, needle: str, start: int) -> list[int]:
    found = []
    while (i := text.find(needle, start)) >= 0:
        found.append(i)
        start = i + 1
    return found


def eval_keys(eval_pairs: Iterable[PreferencePair]) -> set[str]:
    return {context_key(p) for p in eval_pairs}


def check_no_overlap(examples: Sequence[TrainingExample], eval_pairs: Sequence[PreferencePair]) -> None:
    """Raise `InputError` when a training example shows a conversation of the evaluation set."""
    keys = eval_keys(eval_pairs)
    if not keys:
        return
    hits = [e for e in examples if candidate_context_keys(e.prompt) & keys]
    if hits:
        raise InputError(
            f"{len(hits)} training example(s) share a conversation with the evaluation set (first: pair "
            f"{hits[0].pair_id or '?'!r}, {hits[0].origin}): drop those pairs from the training pairs "
            "(reflectrm.training.data.drop_overlapping) or choose another evaluation set"
        )


def drop_overlapping(pairs: Sequence[PreferencePair], eval_pairs: Sequence[PreferencePair]) -> list[PreferencePair]:
    """The pairs whose conversation is not in the evaluation set."""
    keys = eval_keys(eval_pairs)
    return [p for p in pairs if context_key(p) not in keys]


# --- rows in and out --------------------------------------------------------------------------------


def example_from_row(row: Mapping[str, Any], *, origin: str = "") -> TrainingExample:
    """A `TrainingExample` from a TRL conversational row (ours, or the store's `training` export)."""
    prompt = row.get("prompt")
    if not isinstance(prompt, (list, tuple)) or not prompt:
        raise InputError(f"a training row needs 'prompt', a non-empty list of {{role, content}}, got {prompt!r:.80}")
    label = row.get("label")
    if label not in (1, 2) or isinstance(label, bool):
        raise InputError(f"a training row's label must be 1 or 2, got {label!r}")
    try:
        task = Task(row.get("task"))
    except ValueError:
        raise InputError(f"a training row's task must be 'response' or 'analysis', got {row.get('task')!r}") from None
    if not all(isinstance(m, Mapping) and "role" in m and "content" in m for m in prompt):
        raise InputError(f"a training row's prompt must be {{role, content}} messages, got {prompt!r:.80}")
    messages = tuple(ChatMessage(str(m["role"]), m["content"]) for m in prompt)
    pair_id = row.get("pair_id")
    return TrainingExample(prompt=messages, label=label, task=task, origin=origin or str(row.get("origin") or "extra"),
                           pair_id="" if pair_id is None else str(pair_id))


def read_examples(source: str | Path | Iterable[Mapping[str, Any]], *, origin: str = "") -> list[TrainingExample]:
    """Examples from a saved dataset folder, a JSONL file, or rows; `origin` names them (default: theirs)."""
    if isinstance(source, (str, Path)):
        path = Path(source)
        if path.is_dir():
            datasets = require("datasets", extra="train")
            rows: Iterable[Mapping[str, Any]] = datasets.load_from_disk(str(path))
        elif path.is_file():
            rows = list(_jsonl_rows(path))
        else:
            raise InputError(f"{path} does not exist: pass a dataset folder (an export with --format hf) or a JSONL file")
    else:
        rows = source
    return [example_from_row(r, origin=origin) for r in rows]


def _jsonl_rows(path: Path) -> Iterable[Mapping[str, Any]]:
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                yield json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}:{lineno}: not valid JSON ({exc.msg}): fix or remove the line") from None


def rows_hash(rows: Iterable[Mapping[str, Any]]) -> str:
    """sha256 of the rows' canonical JSON, in order (order is part of a snapshot's content)."""
    h = hashlib.sha256()
    for row in rows:
        h.update(json.dumps({k: row[k] for k in ROW_FIELDS}, ensure_ascii=False, sort_keys=True)
                 .encode("utf-8", "surrogatepass"))
        h.update(b"\n")
    return h.hexdigest()


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A dataset snapshot on disk: a `datasets.save_to_disk` folder plus its manifest."""

    path: Path
    content_hash: str
    rows: int
    manifest: Mapping[str, Any]


def write_snapshot(built: TrainingSet, root: str | Path, *, name: str = "train", extra_manifest: Mapping[str, Any] | None = None) -> Snapshot:
    """Write `built` to `root/<name>-<hash12>/`; an identical snapshot already there is reused."""
    datasets = require("datasets", extra="train")
    rows = built.rows()
    if not rows:
        raise InputError("the training set is empty (every item was easy, or nothing was given): add pairs")
    digest = rows_hash(rows)
    path = Path(root) / f"{name}-{digest[:12]}"
    manifest = {"name": name, "content_hash": digest, "rows": len(rows),
                "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "config": built.config.to_dict(), "report": asdict(built.report), **(extra_manifest or {})}
    if (path / SNAPSHOT_MANIFEST).is_file():
        old = json.loads((path / SNAPSHOT_MANIFEST).read_text(encoding="utf-8"))
        if old.get("content_hash") == digest:
            return Snapshot(path, digest, len(rows), old)
    tmp = path.with_name(f".{path.name}.partial")
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp))
    (tmp / SNAPSHOT_MANIFEST).write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.rename(path)
    log.info("wrote %d examples to %s", len(rows), path)
    return Snapshot(path, digest, len(rows), manifest)


def load_snapshot(path: str | Path) -> Any:
    """The `datasets.Dataset` of a snapshot (ours, or the store's hf export), its columns checked."""
    datasets = require("datasets", extra="train")
    path = Path(path)
    if not path.is_dir():
        raise InputError(f"dataset {str(path)!r} does not exist: pass a folder written by `reflectrm build-data` "
                         "or an export with --format hf")
    ds = datasets.load_from_disk(str(path))
    missing = [c for c in ("prompt", "label", "task") if c not in ds.column_names]
    if missing:
        raise InputError(f"dataset {path} lacks column {missing[0]!r}: training rows need prompt, label and task")
    if len(ds) == 0:
        raise InputError(f"dataset {path} has no rows: build data first")
    return ds


def snapshot_hash(path: str | Path) -> str:
    """The content hash of a snapshot folder: its manifest's, else computed from its rows."""
    manifest = Path(path) / SNAPSHOT_MANIFEST
    if manifest.is_file():
        return str(json.loads(manifest.read_text(encoding="utf-8"))["content_hash"])
    ds = load_snapshot(path)
    return rows_hash({**r, "origin": r.get("origin", ""), "pair_id": str(r.get("pair_id", ""))} for r in ds)
