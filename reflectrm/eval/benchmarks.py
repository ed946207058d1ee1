"""Benchmark loaders: each reads local files (or, where a machine reaches the Hub, the official data set)
into labelled pairs plus the grouping its official score needs.

    bench = load_benchmark("judgebench", Path("data/judgebench"))
    bench.pairs, bench.meta[pair_id]["group"], bench.partial

The chosen response is placed first or second by a hash of the pair's id (about half each way), so a
judge that always answers "Response 1" scores near chance; sources that give an order (JudgeBench,
LLMBar) keep it. Rows that are not valid pairs (an empty response, say) are dropped and counted.
"""

from __future__ import annotations

import hashlib
import logging
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from reflectrm.core.types import ChatMessage, PreferencePair
from reflectrm.errors import InputError, require
from reflectrm.files.labels import read_label
from reflectrm.files.readers import read_rows
from reflectrm.files.inputs import loads, read_text

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class Benchmark:
    """Labelled pairs of one benchmark, as read.

    Attributes:
        name: the registry name (`BENCHMARKS`).
        pairs: the pairs, label = the chosen response's position (ties have no label).
        meta: per pair id, what the official score groups by: `group` (a best-of-N prompt, an RM-Bench
            prompt), `level` (RM-Bench hard / normal / easy), `part` (RMB pairwise / bon).
        scoring: the aggregation rule (`reflectrm.eval.scoring.AGGREGATIONS`).
        partial: why this copy is not the whole benchmark; "" when it is. A partial copy's score is
            never reported as the benchmark's score.
        dropped: rows that were not valid pairs, with the first reason.
        source: the path or Hub id read.
    """

    name: str
    pairs: tuple[PreferencePair, ...]
    meta: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    scoring: str = "micro"
    partial: str = ""
    dropped: int = 0
    dropped_reason: str = ""
    source: str = ""


@dataclass(frozen=True, slots=True)
class _Spec:
    loader: Callable[[Path | None], Benchmark]
    hub: str  # the official Hub data set ("" = local files only)
    about: str


class _Builder:
    """Collects pairs and meta, dropping invalid rows with a count."""

    def __init__(self, name: str) -> None:
        self.name, self.pairs, self.meta, self.dropped, self.reason = name, [], {}, 0, ""

    def add(self, *, id: str, prompt: Any, chosen: Any, rejected: Any, subset: str, chosen_first: bool | None = None,
            tie: bool = False, **meta: Any) -> None:
        """One pair; `chosen_first` keeps a source's order (None: placed by a hash of the id)."""
        try:
            conversation = _conversation(prompt)
            first_is_chosen = _chosen_first(id) if chosen_first is None else chosen_first
            r1, r2 = (chosen, rejected) if first_is_chosen else (rejected, chosen)
            pair = PreferencePair(conversation=conversation, response_1=_text(r1), response_2=_text(r2),
                                  label=None if tie else (1 if first_is_chosen else 2), tie=tie,
                                  id=id, source=self.name, subset=subset)
        except InputError as exc:
            self.dropped += 1
            self.reason = self.reason or f"{id}: {exc}"
            return
        self.pairs.append(pair)
        if meta:
            self.meta[pair.id] = meta

    def build(self, *, scoring: str = "micro", partial: str = "", source: str = "") -> Benchmark:
        if self.dropped:
            log.warning("%s: dropped %d row(s) that are not valid pairs (first: %s)", self.name, self.dropped, self.reason)
        return Benchmark(name=self.name, pairs=tuple(self.pairs), meta=self.meta, scoring=scoring, partial=partial,
                         dropped=self.dropped, dropped_reason=self.reason, source=source)


def _chosen_first(pair_id: str) -> bool:
    return hashlib.sha256(pair_id.encode()).digest()[0] % 2 == 0


def _text(value: Any) -> str:
    if isinstance(value, Mapping) and "answer" in value:  # RMB's {llm_name, answer}
        value = value["answer"]
    if not isinstance(value, str):
        raise InputError(f"a response must be text, got {type(value).__name__}")
    return value


def _conversation(prompt: Any) -> tuple[Any, ...]:
    if isinstance(prompt, str):
        return (ChatMessage("user", prompt),)
    if isinstance(prompt, (list, tuple)):
        return tuple(prompt)  # ChatMessages or {role, content} dicts: PreferencePair validates them
    raise InputError(f"a prompt must be text or a message list, got {type(prompt).__name__}")


def _json(path: Path) -> Any:
    return loads(read_text(path), where=str(path))  # bounded, and a FIFO or device is refused unread


@dataclass(frozen=True, slots=True)
class DataWords:
    """How a message names where a benchmark's data is given: the CLI's flags here; the app names its form's fields."""

    data: str = "--data"  # the option (or field) that gives the data
    drop_data: str = "drop --data"  # how to give none
    file_benchmark: str = "--benchmark file"  # how to evaluate any labelled file
    pairs_file: str = "drop --benchmark"  # how to judge a file of pairs instead


CLI_WORDS = DataWords()


class DataError(InputError):
    """A benchmark's data is missing, unreachable or of another kind: `said` words it for a front end.

    `template` names the data's place as `{data}` (and `{drop_data}`, ...) and the path as `{path}`; str() is the
    CLI's wording with the path as given."""

    def __init__(self, template: str, *, path: Path | None = None) -> None:
        self.template, self.path = template, path
        super().__init__(self.said(CLI_WORDS))

    def __reduce__(self):  # noqa: ANN204  (pickled by its template, not by the message it made)
        return _data_error, (self.template, self.path)

    def said(self, words: DataWords, *, path: str | None = None) -> str:
        """The message in `words`, with `path` (default: the path as given, quoted) in place of the path."""
        shown = path if path is not None else repr(str(self.path))
        return self.template.format(**asdict(words), path=shown)


def _data_error(template: str, path: Path | None) -> DataError:
    return DataError(template, path=path)


def _literal(text: object) -> str:
    """Text placed in a `DataError` template as it is (its braces are not placeholders)."""
    return str(text).replace("{", "{{").replace("}", "}}")


def _need(path: Path | None, what: str) -> Path:
    if path is None:
        raise DataError(f"{_literal(what)} has no Hub copy here: pass {{data}} with the local file or folder")
    if not path.exists():
        raise DataError(f"{{path}} does not exist: pass {{data}} with the {_literal(what)} file or folder", path=path)
    return path


# --- local benchmarks ------------------------------------------------------------------------------

JUDGEBENCH_SPLITS = {"gpt": "dataset=judgebench,response_model=gpt-4o-2024-05-13.jsonl",
                     "claude": "dataset=judgebench,response_model=claude-3-5-sonnet-20240620.jsonl"}


def _judgebench_category(source: str) -> str:
    if source.startswith("mmlu-pro"):
        return "knowledge"
    return {"livebench-reasoning": "reasoning", "livebench-math": "math", "livecodebench": "coding"}.get(source, source)


def load_judgebench(path: Path | None) -> Benchmark:
    """JudgeBench: a folder (the GPT-4o split, the headline) or one split's JSONL file. Source order kept."""
    path = _need(path, "JudgeBench")
    file = path / JUDGEBENCH_SPLITS["gpt"] if path.is_dir() else path
    b = _Builder("judgebench")
    for _, row in read_rows(file):
        label, _tie = read_label(row["label"])
        chosen, rejected = (row["response_A"], row["response_B"]) if label == 1 else (row["response_B"], row["response_A"])
        b.add(id=row["pair_id"], prompt=row["question"], chosen=chosen, rejected=rejected, chosen_first=label == 1,
              subset=_judgebench_category(row["source"]), source=row["source"])
    return b.build(scoring="judgebench", source=str(file))


RM_BENCH_DOMAINS = {"chat": "chat", "code": "code", "math": "math", "safety-refuse": "safety",
                    "safety-response": "safety"}
RM_BENCH_LEVEL = {True: "hard", False: "easy"}


def load_rm_bench(path: Path | None) -> Benchmark:
    """RM-Bench: a folder of `<domain>_filtered.json` files (or `total_dataset.json`), 3x3 comparisons per prompt."""
    path = _need(path, "RM-Bench")
    files = sorted(path.glob("*_filtered.json")) if path.is_dir() else [path]
    b = _Builder("rm-bench")
    found = set()
    for file in files:
        domain_file = file.name.removesuffix("_filtered.json")
        for _, item in read_rows(file):
            domain = RM_BENCH_DOMAINS.get(item.get("domain", domain_file), domain_file)
            found.add(domain_file)
            for i in range(3):
                for j in range(3):
                    level = "normal" if i == j else RM_BENCH_LEVEL[i < j]
                    b.add(id=f"{domain}:{item['id']}:{i}{j}", prompt=item["prompt"], chosen=item["chosen"][i],
                          rejected=item["rejected"][j], subset=domain, group=f"{domain}:{item['id']}",
                          level=level, cell=f"{i}{j}")
    missing = sorted(set(RM_BENCH_DOMAINS) - found)
    partial = f"domain files missing: {', '.join(missing)}" if missing and path.is_dir() else ""
    return b.build(scoring="rm-bench", partial=partial, source=str(path))


RMB_FILES = {"Pairwise_set": 49, "BoN_set": 49}
"""Files in the complete RMB release per part (12 harmlessness + 37 helpfulness)."""


def load_rmb(path: Path | None) -> Benchmark:
    """RMB: the `RMB_dataset` folder (or its parent); pairwise items and best-of-N groups (best vs each loser)."""
    path = _need(path, "RMB")
    root = path / "RMB_dataset" if (path / "RMB_dataset").is_dir() else path
    b = _Builder("rmb")
    counts = {}
    for part, expected in RMB_FILES.items():
        files = sorted((root / part).rglob("*.json"))
        counts[part] = (len(files), expected)
        for file in files:
            for _, item in read_rows(file):
                category = "/".join(item["category_path"].split("/")[1:])
                if part == "Pairwise_set":
                    b.add(id=item["pair_uid"], prompt=item["conversation_input"], chosen=item["chosen"],
                          rejected=item["reject"], subset=f"pairwise/{category}", part="pairwise")
                    continue
                for k, loser in enumerate(item["loser_list"]):
                    b.add(id=f"{item['bon_uid']}:{k}", prompt=item["conversation_input"], chosen=item["bon_best"],
                          rejected=loser, subset=f"bon/{category}", part="bon", group=item["bon_uid"])
    short = [f"{part} {n} of {e} files" for part, (n, e) in counts.items() if n < e]
    return b.build(scoring="rmb", partial="; ".join(short), source=str(root))


LLMBAR_SUBSETS = {"Natural": "llmbar-natural", "Adversarial/Neighbor": "llmbar-adver-neighbor",
                  "Adversarial/GPTInst": "llmbar-adver-GPTInst", "Adversarial/GPTOut": "llmbar-adver-GPTOut",
                  "Adversarial/Manual": "llmbar-adver-manual"}


def _llmbar_root(path: Path) -> Path:
    for candidate in (path, path / "Dataset", path / "llmbar" / "Dataset"):
        if (candidate / "LLMBar").is_dir() or (candidate / "Processed").is_dir():
            return candidate
    return path


def _add_output_pairs(b: _Builder, file: Path, *, subset: str, prefix: str) -> None:
    for k, item in read_rows(file):
        label, _ = read_label(item["label"])
        chosen, rejected = (item["output_1"], item["output_2"]) if label == 1 else (item["output_2"], item["output_1"])
        b.add(id=f"{prefix}:{k}", prompt=item["input"], chosen=chosen, rejected=rejected, subset=subset,
              chosen_first=label == 1)


def load_llmbar(path: Path | None) -> Benchmark:
    """LLMBar Natural + Adversarial (RewardBench's llmbar-* subsets); the source's output_1/output_2 order kept."""
    root = _llmbar_root(_need(path, "LLMBar"))
    b = _Builder("llmbar")
    for folder, subset in LLMBAR_SUBSETS.items():
        _add_output_pairs(b, root / "LLMBar" / folder / "dataset.json", subset=subset, prefix=subset)
    return b.build(source=str(root))


def load_mt_bench_human(path: Path | None) -> Benchmark:
    """MT-Bench human judgments: LLMBar's processed 200-item sample locally (partial), or the Hub's full set."""
    if path is None:
        rows = _hub_rows("lmsys/mt_bench_human_judgments", split="human")
        return _mt_bench_from_hub(rows, source="lmsys/mt_bench_human_judgments")
    path = _need(path, "MT-Bench human")
    if path.is_file() and "conversation_a" in next(iter(read_rows(path)), (0, {}))[1]:  # the Hub's fields
        return _mt_bench_from_hub((row for _, row in read_rows(path)), source=str(path))
    root = _llmbar_root(path)
    file = root / "Processed" / "MT-Bench" / "dataset.json" if path.is_dir() else path
    b = _Builder("mt-bench-human")
    _add_output_pairs(b, file, subset="mt-bench-human", prefix="mtbench")
    return b.build(partial="LLMBar's processed sample: 200 items, ties removed, not the full human judgments",
                   source=str(file))


def _mt_bench_from_hub(rows: Iterable[Mapping[str, Any]], *, source: str) -> Benchmark:
    b = _Builder("mt-bench-human")
    for k, row in enumerate(rows):
        conv_a, conv_b = list(row["conversation_a"]), list(row["conversation_b"])
        label, tie = read_label(row["winner"])
        chosen, rejected = (conv_a, conv_b) if label != 2 else (conv_b, conv_a)
        b.add(id=f"mtbench:{row['question_id']}:{row.get('judge', '')}:{row['model_a']}:{row['model_b']}:"
                 f"{row.get('turn', 1)}:{k}",
              prompt=chosen[:-1], chosen=chosen[-1]["content"], rejected=rejected[-1]["content"],
              subset=f"turn-{row.get('turn', 1)}", tie=tie, chosen_first=label != 2)
    return b.build(source=source)


def _split_transcript(text: str) -> list[ChatMessage]:
    """HH-RLHF's "\\n\\nHuman: ...\\n\\nAssistant: ..." as chat messages."""
    turns = []
    for chunk in text.split("\n\nHuman:")[1:]:
        human, _, assistant = chunk.partition("\n\nAssistant:")
        turns.append(ChatMessage("user", human.strip()))
        if assistant.strip():
            turns.append(ChatMessage("assistant", assistant.strip()))
    return turns


def load_hh_rlhf(path: Path | None) -> Benchmark:
    """Anthropic HH-RLHF: a `test.jsonl.gz` (or a folder holding `harmless-base/test.jsonl.gz`)."""
    path = _need(path, "HH-RLHF")
    file = path / "harmless-base" / "test.jsonl.gz" if path.is_dir() else path
    subset = file.parent.name if file.parent.name != "." else "hh-rlhf"
    b = _Builder("hh-rlhf")
    for line, row in read_rows(file):
        prompt, _, chosen = row["chosen"].rpartition("\n\nAssistant:")
        _, _, rejected = row["rejected"].rpartition("\n\nAssistant:")
        b.add(id=f"{subset}-test:{line}", prompt=_split_transcript(prompt), chosen=chosen.strip(),
              rejected=rejected.strip(), subset=subset)
    return b.build(partial="" if subset != "harmless-base" else "harmless-base test split only", source=str(file))


def load_evalbiasbench(path: Path | None) -> Benchmark:
    """EvalBiasBench: `biasbench.json` ({bias: [items]}); response1 is always the better one, so the order is hashed."""
    path = _need(path, "EvalBiasBench")
    file = path / "biasbench.json" if path.is_dir() else path
    b = _Builder("evalbiasbench")
    for bias, items in _json(file).items():
        for k, item in enumerate(items):
            label, _ = read_label(item["label"])
            chosen, rejected = (item["response1"], item["response2"]) if label == 1 else (item["response2"], item["response1"])
            b.add(id=f"{bias}:{k}", prompt=item["instruction"], chosen=chosen, rejected=rejected, subset=bias)
    return b.build(source=str(file))


# --- Hub benchmarks (or a local copy with the same fields) -----------------------------------------


def _hub_rows(dataset: str, *, split: str, config: str | None = None) -> Iterable[Mapping[str, Any]]:
    datasets = require("datasets", extra="train")
    try:
        return datasets.load_dataset(dataset, config, split=split)
    except Exception as exc:
        raise DataError(f"could not load {_literal(dataset)} from the Hub ({type(exc).__name__}): download it and "
                        "pass {data}") from exc


def _rows(path: Path | None, hub: str, *, split: str, config: str | None = None) -> tuple[Iterable[Mapping], str]:
    if path is None:
        return _hub_rows(hub, split=split, config=config), hub
    return (row for _, row in read_rows(_need(path, hub), split=split)), str(path)


def load_rewardbench(path: Path | None) -> Benchmark:
    """RewardBench v1 (`allenai/reward-bench`, split filtered): id, prompt, chosen, rejected, subset."""
    rows, source = _rows(path, "allenai/reward-bench", split="filtered")
    b = _Builder("rewardbench")
    for row in rows:
        b.add(id=str(row["id"]), prompt=row["prompt"], chosen=row["chosen"], rejected=row["rejected"],
              subset=row["subset"])
    return b.build(scoring="rewardbench", source=source)


def load_rewardbench2(path: Path | None) -> Benchmark:
    """RewardBench 2 (`allenai/reward-bench-2`): each chosen against each rejected, grouped per prompt (best-of-4)."""
    rows, source = _rows(path, "allenai/reward-bench-2", split="test")
    b = _Builder("rewardbench2")
    for row in rows:
        chosen, rejected = list(row["chosen"]), list(row["rejected"])
        for c, good in enumerate(chosen):
            for k, bad in enumerate(rejected):
                suffix = f"{k}" if len(chosen) == 1 else f"{c}:{k}"
                b.add(id=f"{row['id']}:{suffix}", prompt=row["prompt"], chosen=good, rejected=bad,
                      subset=row["subset"], group=str(row["id"]))
    return b.build(scoring="rewardbench2", source=source)


def load_ppe(path: Path | None) -> Benchmark:
    """PPE human preference (`lmarena-ai/PPE-Human-Preference-V1`): winner model_a / model_b; ties kept as ties."""
    rows, source = _rows(path, "lmarena-ai/PPE-Human-Preference-V1", split="test")
    b = _Builder("ppe-preference")
    for k, row in enumerate(rows):
        label, tie = read_label(row["winner"])
        first = label != 2
        b.add(id=str(row.get("question_id", k)), prompt=row["prompt"],
              chosen=row["response_1"] if first else row["response_2"],
              rejected=row["response_2"] if first else row["response_1"], chosen_first=first, tie=tie,
              subset=str(row.get("language") or row.get("category") or "all"))
    return b.build(source=source)


def load_helpsteer3(path: Path | None) -> Benchmark:
    """HelpSteer3-Preference (`nvidia/HelpSteer3`, validation): overall_preference < 0 prefers response1; 0 is a tie."""
    rows, source = _rows(path, "nvidia/HelpSteer3", split="validation", config="preference")
    b = _Builder("helpsteer3")
    for k, row in enumerate(rows):
        label, tie = read_label(row["overall_preference"], "score")
        first = label != 2
        b.add(id=f"helpsteer3:{k}", prompt=list(row["context"]),
              chosen=row["response1"] if first else row["response2"],
              rejected=row["response2"] if first else row["response1"], chosen_first=first, tie=tie,
              subset=f"{row.get('domain', '')}/{row.get('language') or 'english'}",
              margin=abs(row["overall_preference"]))
    return b.build(source=source)


DEMO_HELDOUT_PAIRS = 500


def load_demo(path: Path | None) -> Benchmark:
    """The shipped demo judge's synthetic held-out pairs, on its own domain (its card's), from the stream
    `reflectrm.demo.heldout` names: pairs whose problems the judge's build never trained on (the domain
    knows how: a running-sum judge's card names its training stages; arithmetic trains on another stream)."""
    from reflectrm.demo import DEMO_MODEL_DIR, demo_domain, read_card
    from reflectrm.demo.heldout import EVAL_SEED

    if path is not None:
        raise DataError("the demo benchmark is generated, not read: {drop_data} (or use {file_benchmark})")
    domain = demo_domain()
    pairs = domain.heldout_pairs(read_card(DEMO_MODEL_DIR), DEMO_HELDOUT_PAIRS, seed=EVAL_SEED, source="demo-heldout")
    return Benchmark(name="demo", pairs=tuple(pairs), source=f"demo {domain.key} seed {EVAL_SEED}")


BENCHMARKS: dict[str, _Spec] = {
    "demo": _Spec(load_demo, "", "the demo judge's synthetic held-out pairs (its own task domain)"),
    "rewardbench": _Spec(load_rewardbench, "allenai/reward-bench", "RewardBench v1; section-weighted score"),
    "rewardbench2": _Spec(load_rewardbench2, "allenai/reward-bench-2", "RewardBench 2; best-of-4 per prompt"),
    "rm-bench": _Spec(load_rm_bench, "", "RM-Bench 3x3 style matrix; easy / normal / hard"),
    "rmb": _Spec(load_rmb, "", "RMB pairwise and best-of-N"),
    "ppe-preference": _Spec(load_ppe, "lmarena-ai/PPE-Human-Preference-V1", "PPE human preference"),
    "judgebench": _Spec(load_judgebench, "", "JudgeBench (GPT-4o split); both orders"),
    "helpsteer3": _Spec(load_helpsteer3, "nvidia/HelpSteer3", "HelpSteer3-Preference validation"),
    "mt-bench-human": _Spec(load_mt_bench_human, "lmsys/mt_bench_human_judgments", "MT-Bench human judgments"),
    "llmbar": _Spec(load_llmbar, "", "LLMBar Natural + Adversarial"),
    "hh-rlhf": _Spec(load_hh_rlhf, "", "Anthropic HH-RLHF"),
    "evalbiasbench": _Spec(load_evalbiasbench, "", "EvalBiasBench (6 bias types)"),
}

DEFAULT_PATHS = {"judgebench": "judgebench", "rm-bench": "rm-bench", "rmb": "rmb", "llmbar": "llmbar",
                 "mt-bench-human": "llmbar", "hh-rlhf": "hh-rlhf", "evalbiasbench": "evalbiasbench"}
"""Where each local benchmark lies under a data folder like the project's `shared/data`."""


def load_benchmark(name: str, path: Path | None = None) -> Benchmark:
    """Read a benchmark from `path` (a file or folder), or from the Hub when `path` is None and it has a Hub copy.

    Raises:
        InputError: unknown name, a missing path, or an unreachable Hub.
    """
    spec = BENCHMARKS.get(name)
    if spec is None:
        raise InputError(f"benchmark {name!r} is unknown: use one of {', '.join(BENCHMARKS)} (or --data FILE alone)")
    if path is not None and path.is_dir() and name in DEFAULT_PATHS and (path / DEFAULT_PATHS[name]).is_dir():
        path = path / DEFAULT_PATHS[name]  # a data root holding every benchmark's folder
    try:
        return spec.loader(path)
    except (KeyError, TypeError, AttributeError, IndexError) as exc:  # rows of another shape (a pairs file, say)
        what = f"its rows lack the field {exc.args[0]!r}" if isinstance(exc, KeyError) and exc.args else \
            f"a row is not shaped like one ({type(exc).__name__})"
        raise DataError(f"{{path}} is not a {_literal(name)} file: {_literal(what)}: pass {_literal(name)}'s own data "
                        "to {data}, or {pairs_file} to judge a file of pairs", path=path) from None


BOTH_ORDERS_BY_DEFAULT = ("judgebench",)
"""Benchmarks whose official protocol judges every pair in both orders (JudgeBench: right only if right in both)."""


def limit_units(bench: Benchmark) -> tuple[int, str]:
    """(units, what a unit is) for `--limit`: a best-of-N or RM-Bench group where pairs are grouped, else a pair."""
    groups = {str(bench.meta.get(p.id, {}).get("group", p.id)) for p in bench.pairs}
    if len(groups) == len(bench.pairs):
        return len(groups), "pairs"
    return len(groups), "groups (a best-of-N prompt or RM-Bench prompt: all its pairs)"


def select(bench: Benchmark, *, subset: str | None = None, limit: int | None = None, seed: int = 0) -> Benchmark:
    """Keep a subset (exact name or a prefix ending in '/') and at most `limit` units, drawn with `seed`.

    A unit is a best-of-N group or RM-Bench prompt where the score needs the whole group, else a pair.
    """
    pairs = list(bench.pairs)
    if subset:
        pairs = [p for p in pairs if p.subset == subset or p.subset.startswith(subset.rstrip("/") + "/")]
        if not pairs:
            names = sorted({p.subset for p in bench.pairs})
            raise InputError(f"{bench.name} has no subset {subset!r}: pick one of {', '.join(names[:20])}")
    if limit is not None:
        units: dict[str, list[PreferencePair]] = {}
        for p in pairs:
            units.setdefault(str(bench.meta.get(p.id, {}).get("group", p.id)), []).append(p)
        keys = list(units)
        chosen = set(random.Random(seed).sample(keys, min(limit, len(keys))))
        pairs = [p for k in keys if k in chosen for p in units[k]]
    return Benchmark(name=bench.name, pairs=tuple(pairs), meta=bench.meta, scoring=bench.scoring,
                     partial=bench.partial, dropped=bench.dropped, dropped_reason=bench.dropped_reason,
                     source=bench.source)
