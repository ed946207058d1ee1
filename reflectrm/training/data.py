"""Training data construction (PAPER.md section 2, Appendix A.1).

    judgments = collect_rollouts(pairs, backend, DataConfig())     # N = 8 samples at T = 1.0 per pair
    built = build_training_set(judgments, config=DataConfig(), extra=read_examples(path), eval_pairs=held_out)
    snapshot = write_snapshot(built, Path("data"), name="demo")      # data/demo-<hash>/ (HF dataset)

From the rollouts on labelled pairs: items every sample gets right are dropped (no signal); every
remaining item gives a preference example (the response-preference prompt, Eq. 2, and the pair's
label); every mixed-outcome item gives exactly one reflection pair (the analyses of one correct and
one incorrect sample in seeded random order, Eq. 3, labelled with the correct one's position). The
examples are built and rendered by `reflectrm.training.recipe`, the same recipe the store uses for
corrections. The two kinds are mixed at `DataConfig.mix` (paper: 4:1). Examples from elsewhere (the
store's human-correction-derived examples, as exported rows) are deduplicated with priority over
generated ones. A set that shares a conversation with the chosen evaluation set is refused.

Three choices the paper leaves open are `DataConfig` fields, and `BuildReport` counts each:
`subsample` (which kind may be cut to reach the mix; the paper cut reflection pairs, 13,692 :
3,420), `extra_in_mix` (whether rows from elsewhere count toward the ratio) and
`unparseable_is_incorrect` (whether an unparseable sample can be the incorrect side of a pair).

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

from reflectrm.core.config import JudgeConfig
from reflectrm.core.prompts import DEFAULT_CONTROL_SUFFIX, Task, response_prompt
from reflectrm.core.types import ChatMessage, Judgment, PreferencePair
from reflectrm.errors import ConfigError, InputError, require
import reflectrm.training.recipe as recipe
from reflectrm.training.recipe import ROW_FIELDS, Analysis, Rendering, TrainingExample, rows_hash

log = logging.getLogger(__name__)

SNAPSHOT_MANIFEST = "snapshot.json"
SUBSAMPLE = ("reflection", "either")
__all__ = ["ROW_FIELDS", "TrainingExample", "rows_hash"]  # re-exported from the recipe (old import paths)


@dataclass(frozen=True, slots=True, kw_only=True)
class DataConfig:
    """How training data is built. Defaults follow the paper; PAPER.md 10 lists what it leaves open."""

    # The judge that rolls out and the prompts the examples are rendered in: its `n` samples per pair at its
    # `temperature`, `max_new_tokens` per sample, `seed` (also the correct/incorrect choice, critique order and
    # subsampling), `control_suffix` and `critique_includes_verdict`. `JudgeConfig` itself, so each is defined once
    # (paper: N = 8 at T = 1.0, 1024 tokens); stage 2's fields play no part here.
    judge: JudgeConfig = field(default_factory=JudgeConfig)
    mix: tuple[int, int] = (4, 1)  # preference : reflection (paper: 4:1); (1, 0) = preference only (RFT baseline)
    keep_all_wrong: bool = True  # all-wrong items give preference examples (the paper only drops all-correct)
    # Which kind is cut to reach `mix` (paper: reflection pairs, 13,692 : 3,420). "reflection": only reflection
    # pairs are subsampled; when they are scarce every preference example is kept and the ratio falls short.
    # "either": the kind that is plentiful relative to the ratio is cut, preference examples included.
    subsample: str = "reflection"
    # Rows from elsewhere (`extra`, e.g. the store's corrections) count toward the ratio: generated examples of
    # each kind are cut so that generated + extra reach `mix`. False: extra rows are added after the mix (the
    # ratio holds among generated examples; the report gives the final counts).
    extra_in_mix: bool = False
    # An unparseable sample with an analysis may be the incorrect side of a reflection pair. False (default):
    # incorrect means a parseable wrong verdict, so an item with only right and unparseable samples gives none.
    unparseable_is_incorrect: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.judge, JudgeConfig):
            raise ConfigError(f"judge must be a JudgeConfig, got {type(self.judge).__name__}")
        if self.judge.n < 2:
            raise ConfigError(f"n must be an integer >= 2 (mixed outcomes need two samples), got {self.judge.n!r}")
        if not self.judge.temperature > 0:
            raise ConfigError(f"temperature must be > 0 (rollouts must differ; paper: 1.0), got "
                              f"{self.judge.temperature!r}")
        mix = tuple(self.mix)
        if len(mix) != 2 or any(not isinstance(x, int) or x < 0 for x in mix) or mix == (0, 0):
            raise ConfigError(f"mix must be two integers >= 0, not both 0 (paper: (4, 1)), got {self.mix!r}")
        object.__setattr__(self, "mix", mix)
        if self.subsample not in SUBSAMPLE:
            raise ConfigError(f"subsample must be one of {', '.join(SUBSAMPLE)} (paper: reflection), "
                              f"got {self.subsample!r}")

    @property
    def rendering(self) -> Rendering:
        return Rendering(control_suffix=self.judge.control_suffix,
                         critique_includes_verdict=self.judge.critique_includes_verdict)

    def rollout_config(self) -> JudgeConfig:
        """The judge as it rolls out: stage 1 only (majority over its `n` samples)."""
        return self.judge.with_(strategy="majority")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "judge": self.judge.to_dict(), "mix": list(self.mix)}


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildReport:
    """What happened to every item and example (the counts Table 6 reports, and the filters')."""

    items: int = 0  # judged pairs with a label
    easy_dropped: int = 0  # all N samples right
    mixed: int = 0  # at least one right and one wrong sample (wrong: parseable, or any if unparseable_is_incorrect)
    right_or_unparseable: int = 0  # some right, none wrong, some unparseable: no pair unless unparseable_is_incorrect
    all_wrong: int = 0  # no sample right
    no_distinct_analyses: int = 0  # mixed, but every wrong sample wrote a right sample's analysis
    preference_pool: int = 0
    reflection_pool: int = 0
    preference: int = 0  # kept after mixing
    reflection: int = 0
    preference_cut: int = 0  # dropped by subsampling to reach the mix
    reflection_cut: int = 0
    extra: int = 0  # kept rows from elsewhere
    extra_preference: int = 0
    extra_reflection: int = 0
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
    """Sample `config.judge.n` analyses per labelled pair at its temperature (stage 1 only)."""
    from reflectrm.pipeline import judge_many

    unlabelled = [p.id for p in pairs if p.label is None]
    if unlabelled:
        raise InputError(f"pair {unlabelled[0]!r} has no label: training data needs labelled pairs")
    return list(judge_many(unique_pairs(pairs), backend, config.rollout_config(), batch_size=batch_size,
                           progress=progress))


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


def preference_example(pair: PreferencePair, *, config: DataConfig) -> TrainingExample:
    """The response-preference example of a labelled pair (Eq. 2)."""
    return recipe.preference_example(pair, label=pair.label, rendering=config.rendering)


def derive(j: Judgment, *, config: DataConfig,
           origins: tuple[str, str] = ("preference", "reflection")) -> recipe.DerivedExamples:
    """The recipe on one judged pair (`recipe.labelled_examples` under `config`)."""
    return recipe.labelled_examples(j, seed=config.judge.seed, rendering=config.rendering,
                                    unparseable_is_wrong=config.unparseable_is_incorrect, origins=origins)


def dropped(j: Judgment, *, config: DataConfig) -> str | None:
    """Why the recipe takes nothing from `j` under `config` (`recipe.labelled_dropped`), or None."""
    return recipe.labelled_dropped(j, keep_all_wrong=config.keep_all_wrong)


def reflection_example(j: Judgment, *, config: DataConfig) -> TrainingExample | None:
    """One correct against one incorrect analysis of `j`, in seeded random order (Eq. 3); None if none."""
    derived = derive(j, config=config)
    return derived.reflection[0][1] if derived.reflection else None


def examples_from_rollouts(
    judgments: Sequence[Judgment], *, config: DataConfig
) -> tuple[list[TrainingExample], list[TrainingExample], BuildReport]:
    """(preference pool, reflection pool, counts): the easy-item filter and one reflection per mixed item."""
    pref, refl = [], []
    counts = dict.fromkeys(("items", "easy_dropped", "mixed", "all_wrong", "no_distinct_analyses",
                            "right_or_unparseable"), 0)
    for j in judgments:
        if j.pair.label is None:
            raise InputError(f"pair {j.pair.id!r} has no label: training data needs labelled pairs")
        samples = recipe.sampled(j)
        right = sum(r.prediction == j.pair.label for r in samples)
        unparseable = sum(r.prediction is None for r in samples)
        wrong = len(samples) - right - (0 if config.unparseable_is_incorrect else unparseable)
        counts["items"] += 1
        reason = dropped(j, config=config)
        if reason == "easy":
            counts["easy_dropped"] += 1
            continue
        counts["all_wrong"] += right == 0
        if reason is not None:
            continue
        derived = derive(j, config=config)
        pref.append(derived.preference)
        refl += [example for _, example in derived.reflection]
        counts["right_or_unparseable"] += bool(right and not wrong and unparseable)
        counts["mixed"] += bool(right and wrong)
        counts["no_distinct_analyses"] += bool(right and wrong and not derived.reflection)
    report = BuildReport(**counts, preference_pool=len(pref), reflection_pool=len(refl))
    return pref, refl, report


def mix_counts(preference: int, reflection: int, mix: tuple[int, int], *,
               subsample: str = "reflection") -> tuple[int, int]:
    """How many of each kind to keep for the ratio `mix` (`DataConfig.subsample` says which kind may be cut).

    The kind that is plentiful relative to the ratio is cut to the nearest whole number that makes
    the ratio. Under "reflection" only reflection pairs are ever cut (the paper's 13,692 : 3,420):
    when they are scarce, every preference example is kept and the ratio falls short. Under
    "either", scarce reflection pairs cut the preference examples instead.
    """
    p_part, r_part = mix
    if r_part == 0:  # (1, 0), (0, 1): one kind only, whatever `subsample` says
        return preference, 0
    if p_part == 0:
        return 0, reflection
    if reflection * p_part >= preference * r_part:  # reflection pairs are plentiful
        return preference, min(reflection, (2 * preference * r_part + p_part) // (2 * p_part))
    if subsample == "reflection":
        return preference, reflection
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
    rng = random.Random(recipe.derive_seed(config.judge.seed, "mix", "subsample"))
    keep_p, keep_r = _kept_generated(len(pref), len(refl), extra, config)
    generated = _sample(pref, keep_p, rng) + _sample(refl, keep_r, rng)
    kept, duplicates, conflicts = deduplicate([*extra, *generated])
    check_no_overlap(kept, eval_pairs)
    rng.shuffle(kept)
    ours = {id(e) for e in generated}
    kinds = [e.task for e in kept if id(e) in ours]
    extra_kinds = [e.task for e in kept if id(e) not in ours]
    report = BuildReport(**{**asdict(report), "preference": kinds.count(Task.RESPONSE),
                            "reflection": kinds.count(Task.ANALYSIS), "extra": len(extra_kinds),
                            "preference_cut": len(pref) - keep_p, "reflection_cut": len(refl) - keep_r,
                            "extra_preference": extra_kinds.count(Task.RESPONSE),
                            "extra_reflection": extra_kinds.count(Task.ANALYSIS),
                            "duplicates_dropped": duplicates, "conflicts_dropped": conflicts})
    return TrainingSet(examples=tuple(kept), report=report, config=config)


def _kept_generated(pref: int, refl: int, extra: Sequence[TrainingExample], config: DataConfig) -> tuple[int, int]:
    """Generated examples of each kind to keep; with `extra_in_mix`, extra rows count toward the ratio."""
    if not config.extra_in_mix:
        return mix_counts(pref, refl, config.mix, subsample=config.subsample)
    extra_p = sum(e.task is Task.RESPONSE for e in extra)
    extra_r = len(extra) - extra_p
    want_p, want_r = mix_counts(pref + extra_p, refl + extra_r, config.mix, subsample=config.subsample)
    # extra rows (a person's corrections) are never cut: the generated ones make up the rest of the ratio
    return min(pref, max(0, want_p - extra_p)), min(refl, max(0, want_r - extra_r))


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
