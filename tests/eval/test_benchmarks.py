"""Benchmark loaders: the real files in shared/data (counts as its README gives them) and the Hub-only
benchmarks on small files with the official fields."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from reflectrm.errors import InputError
from reflectrm.eval.benchmarks import load_benchmark, select

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
if not DATA.is_dir():
    DATA = Path("/work/shared/data")
needs_data = pytest.mark.skipif(not DATA.is_dir(), reason="the shared benchmark files are not on this machine")


@needs_data
@pytest.mark.parametrize(
    ("name", "pairs", "dropped", "partial"),
    [
        pytest.param("judgebench", 350, 0, False, id="judgebench-gpt4o-split"),
        pytest.param("rm-bench", 798 * 9, 0, True, id="rm-bench-no-math"),
        pytest.param("llmbar", 419, 0, False, id="llmbar"),
        pytest.param("mt-bench-human", 200, 0, True, id="mt-bench-llmbar-sample"),
        pytest.param("hh-rlhf", 2312 - 8, 8, True, id="hh-rlhf-harmless-test"),  # 8 rows with an empty response
        pytest.param("evalbiasbench", 80, 0, False, id="evalbiasbench"),
    ],
)
def test_local_benchmarks_match_the_data_readme(name: str, pairs: int, dropped: int, partial: bool) -> None:
    bench = load_benchmark(name, DATA)
    assert (len(bench.pairs), bench.dropped, bool(bench.partial)) == (pairs, dropped, partial)
    assert len({p.id for p in bench.pairs}) == len(bench.pairs)


@needs_data
def test_judgebench_keeps_the_source_order_and_its_categories() -> None:
    bench = load_benchmark("judgebench", DATA / "judgebench")
    assert Counter(p.label for p in bench.pairs) == {1: 193, 2: 157}  # README: A>B 193, B>A 157
    assert Counter(p.subset for p in bench.pairs) == {"knowledge": 154, "reasoning": 98, "math": 56, "coding": 42}


@needs_data
def test_rm_bench_cells_and_levels() -> None:
    bench = load_benchmark("rm-bench", DATA)
    levels = Counter(bench.meta[p.id]["level"] for p in bench.pairs)
    assert levels == {"hard": 798 * 3, "normal": 798 * 3, "easy": 798 * 3}
    assert Counter(p.subset for p in bench.pairs) == {"chat": 129 * 9, "code": 228 * 9, "safety": (284 + 157) * 9}
    assert "math" in bench.partial


@needs_data
def test_rmb_pairwise_and_best_of_n_groups() -> None:
    bench = load_benchmark("rmb", DATA)
    parts = Counter(bench.meta[p.id]["part"] for p in bench.pairs)
    # README: 14,543 pairwise items; 7 rows hold an empty answer and are dropped (a BoN group keeps the rest)
    assert parts["pairwise"] + parts["bon"] + bench.dropped == 14_543 + 8_330
    assert len({bench.meta[p.id]["group"] for p in bench.pairs if bench.meta[p.id]["part"] == "bon"}) == 3_618
    assert "Pairwise_set 46 of 49" in bench.partial


@needs_data
def test_select_draws_whole_groups_and_a_subset() -> None:
    bench = load_benchmark("rm-bench", DATA)
    picked = select(bench, limit=5, seed=1)
    assert len(picked.pairs) == 45  # five prompts, nine cells each
    assert select(bench, limit=5, seed=1).pairs == picked.pairs  # the draw is seeded
    assert {p.subset for p in select(bench, subset="code").pairs} == {"code"}
    with pytest.raises(InputError, match="no subset 'nope'"):
        select(bench, subset="nope")


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_rewardbench_from_a_local_copy(tmp_path: Path) -> None:
    rows = [{"id": k, "prompt": f"p{k}", "chosen": "good", "rejected": "bad", "subset": s}
            for k, s in enumerate(["alpacaeval-easy", "hep-go", "math-prm"])]
    bench = load_benchmark("rewardbench", _jsonl(tmp_path / "rb.jsonl", rows))
    assert bench.scoring == "rewardbench" and len(bench.pairs) == 3
    for p in bench.pairs:  # chosen placed by a hash of the id, label follows it
        assert (p.response_1 if p.label == 1 else p.response_2) == "good"


def test_rewardbench2_pairs_each_rejected_with_the_chosen_in_one_group(tmp_path: Path) -> None:
    rows = [{"id": "x", "prompt": "p", "chosen": ["c"], "rejected": ["r1", "r2", "r3"], "subset": "Math"},
            {"id": "t", "prompt": "p2", "chosen": ["c1", "c2"], "rejected": ["r"], "subset": "Ties"}]
    bench = load_benchmark("rewardbench2", _jsonl(tmp_path / "rb2.jsonl", rows))
    assert sorted(p.id for p in bench.pairs) == ["t:0:0", "t:1:0", "x:0", "x:1", "x:2"]
    assert {bench.meta[p.id]["group"] for p in bench.pairs} == {"x", "t"}


def test_ppe_keeps_ties_as_ties(tmp_path: Path) -> None:
    rows = [{"question_id": "q1", "prompt": "p", "response_1": "a", "response_2": "b", "winner": "model_b",
             "language": "English"},
            {"question_id": "q2", "prompt": "p", "response_1": "a", "response_2": "c", "winner": "tie",
             "language": "English"}]
    bench = load_benchmark("ppe-preference", _jsonl(tmp_path / "ppe.jsonl", rows))
    assert [(p.id, p.label, p.tie, p.response_1) for p in bench.pairs] == [("q1", 2, False, "a"), ("q2", None, True, "a")]


def test_helpsteer3_reads_the_signed_preference_and_multi_turn_context(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    context = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
               {"role": "user", "content": "sum 2+2"}]
    rows = [{"context": context, "response1": "4", "response2": "5", "overall_preference": -2, "domain": "stem",
             "language": "english"},
            {"context": context, "response1": "4", "response2": "four", "overall_preference": 0, "domain": "stem",
             "language": "english"}]
    path = tmp_path / "hs3.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    bench = load_benchmark("helpsteer3", path)
    first, tie = bench.pairs
    assert (first.label, first.response_1, len(first.conversation), first.subset) == (1, "4", 3, "stem/english")
    assert tie.tie and tie.label is None


def test_mt_bench_human_hub_fields(tmp_path: Path) -> None:
    conv = lambda answer: [{"role": "user", "content": "q"}, {"role": "assistant", "content": answer}]
    rows = [{"question_id": 81, "model_a": "m1", "model_b": "m2", "winner": "model_b", "judge": "expert_0",
             "conversation_a": conv("A1"), "conversation_b": conv("B1"), "turn": 1}]
    bench = load_benchmark("mt-bench-human", _jsonl(tmp_path / "mt.jsonl", rows))
    (pair,) = bench.pairs
    assert (pair.response_1, pair.response_2, pair.label, pair.query) == ("A1", "B1", 2, "q")


def test_unknown_benchmark_and_missing_data_say_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="benchmark 'nope' is unknown"):
        load_benchmark("nope")
    with pytest.raises(InputError, match="pass --data"):
        load_benchmark("judgebench", None)
    with pytest.raises(InputError, match="does not exist"):
        load_benchmark("rmb", tmp_path / "missing")


@pytest.mark.parametrize(("name", "path", "said"), [
    pytest.param("judgebench", None, "has no Hub copy here: pass --data with the local file or folder", id="no-hub"),
    # braces in a path are text, not placeholders of the message's wording
    pytest.param("judgebench", "missing-{data}-{x}", "'missing-{data}-{x}' does not exist: pass --data with",
                 id="braces-in-path"),
    pytest.param("demo", ".", "drop --data (or use --benchmark file)", id="demo-with-data"),
])
def test_the_cli_is_told_its_data_flag(tmp_path, name: str, path: str | None, said: str) -> None:
    import pickle

    from reflectrm.eval.benchmarks import DataError, load_benchmark

    with pytest.raises(DataError) as caught:
        load_benchmark(name, None if path is None else Path(path))
    assert said in str(caught.value)
    assert str(pickle.loads(pickle.dumps(caught.value))) == str(caught.value)  # crosses a process boundary intact
