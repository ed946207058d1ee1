"""The report's files: report.json, report.md and a plot of accuracy against generated tokens per strategy.

The plot is an SVG written here (no plotting library needed); every text in it is escaped. Text from data in
report.md (and on the terminal) is shown with its control characters escaped (`reflectrm.display.printable`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from html import escape
from pathlib import Path
from typing import Any

from reflectrm.display import printable

PAPER_REFERENCE = {
    "rewardbench": {"Qwen3-4B": 84.8, "ReflectRM-4B": 86.7, "Qwen3-8B": 85.0, "ReflectRM-8B": 89.2},
    "rm-bench": {"Qwen3-4B": 75.4, "ReflectRM-4B": 77.7, "Qwen3-8B": 78.5, "ReflectRM-8B": 82.7},
    "rmb": {"Qwen3-4B": 70.4, "ReflectRM-4B": 77.1, "Qwen3-8B": 73.9, "ReflectRM-8B": 73.3},
    "ppe-preference": {"Qwen3-4B": 60.1, "ReflectRM-4B": 64.2, "Qwen3-8B": 62.9, "ReflectRM-8B": 64.0},
    "judgebench": {"Qwen3-4B (both orders)": 49.3, "ReflectRM-4B (both orders)": 54.9,
                   "Qwen3-8B (both orders)": 52.7, "ReflectRM-8B (both orders)": 56.3},
}
"""The paper's Table 1 (accuracy, %) and Table 5 (JudgeBench, right in both orders), beside a run's figures."""


def _pct(x: Any) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}"


def _ci(e: Mapping[str, Any], unit: str = "pairs") -> str:
    return f"{_pct(e['value'])} [{_pct(e['low'])}, {_pct(e['high'])}] (n={e['n']} {unit})"


def json_safe(value: Any) -> Any:
    """`value` with every NaN or infinite float replaced by None (JSON null), dicts and lists walked."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def dumps(value: Any) -> str:
    """Strict JSON (no bare NaN, which JavaScript, jq and most parsers refuse): NaN and infinities become null."""
    return json.dumps(json_safe(value), indent=2, ensure_ascii=False, default=str, allow_nan=False)


def _ece(s: Mapping[str, Any]) -> str:
    cal = s["calibration"]
    return f"{_pct(cal.get('ece'))} (n={cal.get('n', '?')} pairs)" if cal else "-"


def _cell(text: Any) -> str:
    """Text from data in a Markdown table cell (or any one-line field): a `|` cannot split the cell; a line end,
    which would end the row, and every other control character are shown as escapes (`printable`)."""
    return printable(str(text).replace("|", "\\|"))


def markdown(report: Mapping[str, Any]) -> str:
    """The report as Markdown tables (text from data is escaped for table cells)."""
    lines = [f"# Evaluation: {_cell(report['benchmark'])}", ""]
    if report.get("incomplete"):
        lines += [incomplete_line(report["incomplete"]), ""]
    if report.get("partial"):
        lines += [f"**Partial copy** ({_cell(report['partial'])}): these figures are not the benchmark's score.", ""]
    lines += [(f"Model: `{_cell(report.get('model', ''))}` revision `{_cell(report.get('model_revision', ''))}`; "
               f"pair-orders judged or skipped: {report['items']}; ties (pairs, not scored): {report['ties']}; "
               f"skipped: {report['skipped']['count']} {_cell(report['skipped']['reasons'] or '')}"
               f"{' from subsets ' + _cell(report['skipped']['subsets']) if report['skipped']['count'] else ''}"), ""]
    lines += ["Intervals are 95 % Wilson score intervals; n counts pairs (one order) or pair-orders (both).", ""]
    lines += [("| strategy | accuracy % [95 % CI] (pairs, order given) | official | right in both orders % (pairs) "
               "| flip rate % (pairs) | abstained (pair-orders) | parse fail % (samples) "
               "| tokens / judgment (pair-orders) | ECE % (pairs) |"), "|---|---|---|---|---|---|---|---|---|"]
    for name, s in report["strategies"].items():
        both = s.get("both_orders")
        judged = s.get("judged", "?")
        lines.append(f"| {_cell(name)} | {_ci(s['accuracy'])} | {_pct(s['official'].get('score'))} | "
                     f"{_ci(both['accuracy']) if both else '-'} | {_ci(both['flip_rate']) if both else '-'} | "
                     f"{s['abstained']} of {judged} | {_pct(s['parse_failure_rate'])} of {s.get('samples', '?')} | "
                     f"{s['tokens_per_judgment']:.0f} (n={judged}) | {_ece(s)} |")
    lines += _stage2_lines(report)
    lines += ["", "## Per subset (accuracy %, 95 % CI, pairs in the order given)", "",
              "| strategy | subset | accuracy |", "|---|---|---|"]
    for name, s in report["strategies"].items():
        lines += [f"| {_cell(name)} | {_cell(sub)} | {_ci(e)} |" for sub, e in s["subsets"].items()]
    reference = PAPER_REFERENCE.get(str(report["benchmark"]))
    if reference:
        lines += ["", "## The paper's figures (%, for reference)", "", "| system | score |", "|---|---|"]
        lines += [f"| {k} | {v} |" for k, v in reference.items()]
    return "\n".join(lines) + "\n"


def incomplete_line(incomplete: Mapping[str, Any], *, run: Any = None) -> str:
    """The line an unfinished run's report opens with: why, and how much of it was judged."""
    which = f"Run {_cell(run)} is incomplete" if run is not None else "Incomplete"
    return (f"**{which}: {_cell(incomplete.get('why', incomplete.get('status', '?')))}, "
            f"{incomplete.get('judged', '?')} of {incomplete.get('total', '?')} {incomplete.get('unit', 'pair-orders')} "
            "judged.** These figures cover only those: rerun the same command (or Resume run in the app) to go on.")


def _stage2_lines(report: Mapping[str, Any]) -> list[str]:
    """Stage 2's health per strategy that reflects: parse rate, collapsed judgments, position bias; warnings."""
    rows = {name: s for name, s in report["strategies"].items() if s.get("reflections")}
    if not rows:
        return []
    lines = ["", "## Stage 2 (reflections)", "",
             ("| strategy | reflections | reflection parse % | judgments with every reflection failed "
              "| chose the first-presented critique % [95 % CI] (unbiased: 50) |"), "|---|---|---|---|---|"]
    for name, s in rows.items():
        f = s["first_critique"]
        first = "n/a" if f["value"] is None else f"{_pct(f['value'])} [{_pct(f['low'])}, {_pct(f['high'])}] (n={f['n']})"
        lines.append(f"| {_cell(name)} | {s['reflections']} | {_pct(s['reflection_parse_rate'])} | "
                     f"{s['stage2_failed']} of {s['stage2_judgments']} | {first} |")
    for name, s in rows.items():
        for warning in s["warnings"]:
            lines += ["", f"**Warning ({_cell(name)})**: {_cell(warning)}."]
    return lines


def svg_plot(report: Mapping[str, Any], *, width: int = 560, height: int = 360) -> str:
    """Accuracy (with its 95 % interval) against mean generated tokens per judgment, one point per strategy."""
    points = [(name, s["tokens_per_judgment"], s["accuracy"]) for name, s in report["strategies"].items()
              if s["accuracy"]["value"] is not None and not math.isnan(s["accuracy"]["value"])]
    pad = 60
    max_x = max([p[1] for p in points] + [1.0]) * 1.1
    sx = lambda x: pad + (width - 2 * pad - 110) * x / max_x
    sy = lambda y: height - pad - (height - 2 * pad) * y
    parts = [(f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
              'font-size="11">'), f'<rect width="{width}" height="{height}" fill="white"/>',
             f'<line x1="{pad}" y1="{sy(0)}" x2="{width - pad}" y2="{sy(0)}" stroke="black"/>',
             f'<line x1="{pad}" y1="{sy(0)}" x2="{pad}" y2="{sy(1)}" stroke="black"/>',
             f'<text x="{width / 2}" y="{height - 15}" text-anchor="middle">generated tokens per judgment</text>',
             (f'<text x="15" y="{height / 2}" transform="rotate(-90 15 {height / 2})" text-anchor="middle">'
              'accuracy (95 % CI)</text>'),
             f'<text x="{width / 2}" y="20" text-anchor="middle">{escape(printable(report["benchmark"]))}</text>']
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        parts.append(f'<text x="{pad - 6}" y="{sy(tick) + 4}" text-anchor="end">{tick:.2f}</text>')
    parts.append(f'<text x="{sx(max_x)}" y="{sy(0) + 16}" text-anchor="end">{max_x:.0f}</text>')
    placed: list[tuple[float, float]] = []
    for name, x, acc in sorted(points, key=lambda p: -p[2]["value"]):
        label_y = sy(acc["value"]) - 6
        while any(abs(sx(x) - px) < 90 and abs(label_y - py) < 12 for px, py in placed):
            label_y += 12  # strategies at matched compute sit on one spot: stack their names
        placed.append((sx(x), label_y))
        parts += [f'<line x1="{sx(x)}" y1="{sy(acc["low"])}" x2="{sx(x)}" y2="{sy(acc["high"])}" stroke="steelblue"/>',
                  f'<circle cx="{sx(x)}" cy="{sy(acc["value"])}" r="4" fill="steelblue"/>',
                  f'<text x="{sx(x) + 6}" y="{label_y}">{escape(printable(name))} {100 * acc["value"]:.1f}</text>']
    return "\n".join([*parts, "</svg>"]) + "\n"


def write_report(report: Mapping[str, Any], out: Path) -> list[Path]:
    """Write report.json, report.md and accuracy_vs_tokens.svg into `out` (created); returns the paths."""
    out.mkdir(parents=True, exist_ok=True)
    files = {"report.json": dumps(report) + "\n",
             "report.md": markdown(report), "accuracy_vs_tokens.svg": svg_plot(report)}
    paths = []
    for name, text in files.items():
        path = out / name
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)  # never a half-written report
        paths.append(path)
    return paths


def compare_markdown(result: Mapping[str, Any]) -> str:
    """`reflectrm compare` as a table: per strategy and subset, both accuracies, discordant pairs, p and B - A."""
    lines = [f"# Run {result['run_b']} against run {result['run_a']} (paired, same items)", ""]
    for run, unfinished in (result.get("incomplete") or {}).items():
        lines += [incomplete_line(unfinished, run=run), ""]
    lines += ["| strategy | subset | n (pairs) | A % | B % | only A | only B | McNemar p | B - A [95 % CI] |",
              "|---|---|---|---|---|---|---|---|---|"]
    for name, groups in result["strategies"].items():
        for group, r in groups.items():
            d = r["difference"]
            lines.append(f"| {_cell(name)} | {_cell(group)} | {r['n']} | {_pct(r['accuracy_a'])} | "
                         f"{_pct(r['accuracy_b'])} | {r['only_a']} | {r['only_b']} | {r['mcnemar_p']:.3g} | "
                         f"{100 * d['value']:+.1f} [{100 * d['low']:+.1f}, {100 * d['high']:+.1f}] |")
    return "\n".join(lines) + "\n"
