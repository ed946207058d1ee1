"""The promotion gate (`reflectrm.eval.compare.gate`) over real paired comparisons: a table of cases."""

from __future__ import annotations

import math
from typing import Any

import pytest

from reflectrm.errors import ConfigError, InputError
from reflectrm.eval.compare import BETTER, NO_DATA, NO_DIFFERENCE, WORSE, check_alpha, gate, paired_difference


def _moved(n: int, *, only_a: int = 0, only_b: int = 0) -> dict[str, Any]:
    """n pairs: `only_a` right for A only, `only_b` right for B only, the rest right for both."""
    xa = [1.0] * only_a + [0.0] * only_b + [1.0] * (n - only_a - only_b)
    xb = [0.0] * only_a + [1.0] * only_b + [1.0] * (n - only_a - only_b)
    return paired_difference(xa, xb)


SAME = _moved(20)
WORSE_SET = _moved(20, only_a=10)  # p 0.002, B - A -50 points
BETTER_SET = _moved(20, only_b=10)
SIX_LOST = _moved(6, only_a=6)  # p = 2 / 2**6 = 0.03125 exactly; the exact interval lies below 0
TINY = _moved(4, only_a=3)  # the bootstrap interval lies below 0, the exact p is 0.25
HAND_P_ONLY = {"n": 40, "accuracy_a": 0.6, "accuracy_b": 0.5, "only_a": 8, "only_b": 0, "mcnemar_p": 0.0078,
               "difference": {"value": -0.1, "low": -0.2, "high": 0.01}}  # p agrees, the interval does not
EMPTY = {"n": 0, "accuracy_a": math.nan, "accuracy_b": math.nan, "only_a": 0, "only_b": 0, "mcnemar_p": 1.0,
         "difference": {"value": math.nan, "low": math.nan, "high": math.nan, "n": 0}}
NULLS = {"n": 0, "accuracy_a": None, "accuracy_b": None, "only_a": 0, "only_b": 0, "mcnemar_p": None,
         "difference": {"value": None, "low": None, "high": None}}  # the same, read back from --json


def _result(**strategies: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {"run_a": 1, "run_b": 2, "strategies": strategies}


@pytest.mark.parametrize(
    ("result", "kwargs", "verdict", "worse_sets"),
    [
        pytest.param(_result(r={"overall": WORSE_SET}), {}, WORSE, ["r/overall"], id="clearly-worse"),
        pytest.param(_result(r={"overall": BETTER_SET}), {}, BETTER, [], id="clearly-better"),
        pytest.param(_result(r={"overall": SAME, "both orders": SAME}), {}, NO_DIFFERENCE, [], id="no-difference"),
        pytest.param(_result(r={"overall": SAME, "both orders": WORSE_SET}), {}, WORSE, ["r/both orders"],
                     id="worse-only-in-both-orders"),
        pytest.param(_result(r={"overall": BETTER_SET, "both orders": WORSE_SET}), {}, WORSE, ["r/both orders"],
                     id="better-as-given-worse-in-both-orders-is-worse"),
        pytest.param(_result(r={"overall": TINY}), {}, NO_DIFFERENCE, [], id="tiny-sample-interval-only"),
        pytest.param(_result(r={"overall": HAND_P_ONLY}), {}, NO_DIFFERENCE, [], id="p-only-interval-touches-0"),
        pytest.param(_result(r={"overall": TINY}, g={"overall": WORSE_SET}), {}, WORSE, ["g/overall"],
                     id="several-strategies-one-worse"),
        pytest.param(_result(r={"overall": EMPTY, "both orders": SAME}), {}, NO_DIFFERENCE, [], id="n0-skipped"),
        pytest.param(_result(r={"overall": NULLS, "both orders": WORSE_SET}), {}, WORSE, ["r/both orders"],
                     id="n0-from-json-skipped-others-gated"),
        pytest.param(_result(r={"overall": EMPTY}), {}, NO_DIFFERENCE, [], id="nothing-to-gate"),
        pytest.param(_result(r={"overall": SIX_LOST}), {"alpha": 0.03125}, NO_DIFFERENCE, [],
                     id="p-equal-to-alpha-is-not-significant"),
        pytest.param(_result(r={"overall": SIX_LOST}), {"alpha": 0.0313}, WORSE, ["r/overall"],
                     id="p-just-below-alpha"),
        pytest.param(_result(r={"overall": WORSE_SET}), {"alpha": 0.001}, NO_DIFFERENCE, [], id="stricter-alpha"),
        pytest.param(_result(r={"overall": SAME, "s1": WORSE_SET}), {}, NO_DIFFERENCE, [],
                     id="a-worse-subset-is-reported-not-gated"),
        pytest.param(_result(r={"overall": SAME, "s1": WORSE_SET}), {"subsets": True}, WORSE, ["r/s1"],
                     id="a-worse-subset-gated-on-request"),
    ],
)
def test_gate(result: dict[str, Any], kwargs: dict[str, Any], verdict: str, worse_sets: list[str]) -> None:
    g = gate(result, **kwargs)
    assert g.verdict == verdict and g.passed == (verdict != WORSE)
    assert [f"{s.strategy}/{s.group}" for s in g.sets if s.gated and s.verdict == WORSE] == worse_sets
    assert len(g.sets) == sum(len(groups) for groups in result["strategies"].values())  # every set reported


def test_the_tiny_and_boundary_cases_are_what_they_claim() -> None:
    # so the table above tests the disagreement and the boundary, not something else
    assert TINY["difference"]["high"] < 0 and TINY["mcnemar_p"] == 0.25
    assert SIX_LOST["mcnemar_p"] == 0.03125 and SIX_LOST["difference"]["high"] < 0
    assert gate(_result(r={"overall": TINY}), alpha=0.5).verdict == WORSE  # both agree at a loose level


def test_each_set_is_one_line_with_its_figures_and_the_result_is_data() -> None:
    g = gate(_result(r={"overall": WORSE_SET, "both orders": EMPTY, "s1": SAME}))
    worse, empty, subset = g.sets
    assert worse.summary() == ("r / overall: worse (A 100.0 %, B 50.0 %, B - A -50.0 "
                               f"[{100 * worse.low:+.1f}, {100 * worse.high:+.1f}] points, McNemar p 0.00195, "
                               "n 20 pairs)")
    assert empty.verdict == NO_DATA and not empty.gated
    assert empty.summary() == "r / both orders: no data, not gated (n 0 pairs)"
    assert subset.summary().startswith("r / s1: no difference, not gated (A 100.0 %")
    assert g.summary() == "gate: worse on r / overall (alpha 0.05; 1 gated set(s))"  # not the empty set nor the subset
    d = g.to_dict()
    assert d["verdict"] == WORSE and d["passed"] is False and d["alpha"] == 0.05
    assert [s["set"] for s in d["sets"]] == ["overall", "both orders", "s1"]
    assert d["sets"][1]["difference"] == {"value": None, "low": None, "high": None}
    with pytest.raises(AttributeError):
        g.verdict = BETTER  # type: ignore[misc]


@pytest.mark.parametrize("alpha", [
    pytest.param(0, id="zero"), pytest.param(-0.05, id="negative"), pytest.param(0.51, id="above-half"),
    pytest.param(math.nan, id="nan"), pytest.param(True, id="bool"), pytest.param("0.05", id="text"),
    pytest.param(None, id="none"),
])
def test_a_level_outside_0_to_half_is_refused_naming_the_field(alpha: Any) -> None:
    with pytest.raises(ConfigError, match=r"^alpha is .*: give a significance level above 0 and at most 0.5"):
        gate(_result(r={"overall": SAME}), alpha=alpha)


def test_the_edges_of_alpha_are_taken() -> None:
    check_alpha(0.5)
    check_alpha(1e-9)


@pytest.mark.parametrize("unfinished", [
    pytest.param({"4": {"status": "stopped", "judged": 3, "total": 16}}, id="run-b-stopped"),
    pytest.param({"3": {"status": "interrupted"}, "4": {"status": "running"}}, id="both-unfinished"),
])
def test_a_comparison_with_an_unfinished_run_is_refused_naming_the_runs(unfinished: dict[str, Any]) -> None:
    result = {**_result(r={"overall": BETTER_SET}), "incomplete": unfinished}
    with pytest.raises(InputError, match="did not finish") as caught:
        gate(result)
    assert all(f"run {run}" in str(caught.value) for run in unfinished)
    assert "\n" not in str(caught.value)


def test_a_comparison_of_finished_runs_carries_no_incomplete_field_and_is_decided() -> None:
    assert gate({**_result(r={"overall": SAME}), "incomplete": {}}).verdict == NO_DIFFERENCE
