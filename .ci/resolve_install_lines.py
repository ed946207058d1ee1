"""Resolve every `pip install` line that the README, docs/ and the Dockerfile print, so a broken one fails CI.

    python .ci/resolve_install_lines.py [--uv PATH] [--list]

Each line must name its constraint set (`-c constraints*.txt`); it is resolved for Linux x86_64 and
Python 3.11 against PyPI with `uv pip compile`, which reads wheel metadata through HTTP range requests.
`pip install --dry-run` would do the same job but downloads every wheel whole where the index serves no
separate metadata (PEP 658): about 4 GB and 3 minutes for the CUDA line, 2 minutes for the base one.
A resolved package the constraint set does not pin fails too: each set is a complete lock.
Lines with `--no-deps` resolve nothing and are skipped. The CPU sets (every set but the CUDA one) take
torch's CPU build from the wheel folder pip is told of ($PIP_FIND_LINKS or pip's config), else from PyTorch's CPU
index; a line's own `--extra-index-url` is dropped for that reason.
Stdlib only: CI runs it before the project is installed.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON = "3.11"
PLATFORM = "x86_64-manylinux_2_28"


@dataclass(frozen=True)
class InstallLine:
    source: str  # "README.md:44"
    constraints: str | None
    requirements: tuple[str, ...]
    no_deps: bool


def pages() -> list[Path]:
    docs = [p for p in sorted((ROOT / "docs").rglob("*.md")) if p.name != "cli.md"]
    return [ROOT / "README.md", *docs, ROOT / "Dockerfile"]


def _dockerfile_args(text: str) -> dict[str, str]:
    return dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.M))


def install_lines(path: Path) -> list[InstallLine]:
    """Every `pip install ...` in one file, up to a shell separator, a code span's end or a comment."""
    text = path.read_text(encoding="utf-8")
    args = _dockerfile_args(text) if path.name == "Dockerfile" else {}
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for match in re.finditer(r"\bpip install ([^`;&|#\n]*)", line):
            command = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), match.group(1))
            found.append(parse(command, source=f"{path.relative_to(ROOT)}:{number}"))
    return found


def parse(command: str, *, source: str) -> InstallLine:
    words = shlex.split(command.replace("\\", " "))
    constraints, requirements, no_deps = None, [], False
    i = 0
    while i < len(words):
        word = words[i]
        if word == "-c":
            constraints, i = words[i + 1], i + 2
            continue
        if word in ("--extra-index-url", "--index-url", "-r"):
            i += 2
            continue
        if word == "--no-deps":
            no_deps = True
        elif not word.startswith("-"):
            requirements.append(word)
        i += 1
    return InstallLine(source=source, constraints=constraints, requirements=tuple(requirements), no_deps=no_deps)


def _requirement_line(requirement: str) -> str:
    if requirement == "." or requirement.startswith(".["):
        return f"-e {ROOT}{requirement[1:]}"  # the project itself, with its extras
    return requirement


def _pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if "==" in line and not line.lstrip().startswith("#"):
            name, _, version = line.partition("==")
            pins[re.sub(r"[-_.]+", "-", name.strip()).lower()] = version.strip()
    return pins


def _cpu_wheels(line: InstallLine) -> list[str]:
    """Where a CPU set's torch build comes from: the local wheel folder pip is told of, else PyTorch's index."""
    if "cuda" in (line.constraints or ""):
        return []  # PyPI's torch is the CUDA build
    folder = os.environ.get("PIP_FIND_LINKS") or _pip_config("global.find-links")
    if folder:
        return ["--find-links", folder]
    return ["--extra-index-url", "https://download.pytorch.org/whl/cpu", "--index-strategy", "unsafe-best-match"]


def _pip_config(key: str) -> str | None:
    """A value from pip's own configuration files (where a machine names its local wheel folder), if any."""
    done = subprocess.run([sys.executable, "-m", "pip", "config", "get", key], capture_output=True, text=True,
                          check=False)
    return done.stdout.strip() or None if done.returncode == 0 else None


def resolve(line: InstallLine, *, uv: str) -> str | None:
    """None when the line resolves within its constraint set, else one line saying why not."""
    if line.constraints is None:
        return "names no constraint set: add `-c constraints.txt` (or the vLLM set the environment needs)"
    constraints = ROOT / line.constraints
    if not constraints.is_file():
        return f"its constraint set {line.constraints} does not exist"
    with tempfile.TemporaryDirectory() as tmp:
        req, out = Path(tmp) / "requirements.in", Path(tmp) / "resolved.txt"
        req.write_text("\n".join(_requirement_line(r) for r in line.requirements) + "\n", encoding="utf-8")
        done = subprocess.run([uv, "pip", "compile", str(req), "-c", str(constraints), "--python-version", PYTHON,
                               "--python-platform", PLATFORM, "--index-url", "https://pypi.org/simple",
                               *_cpu_wheels(line),
                               "--no-header", "--no-annotate", "--quiet", "-o", str(out)],
                              capture_output=True, text=True, check=False)
        if done.returncode != 0:
            return " ".join(done.stderr.split())[-600:]
        resolved = _pins(out)
    pins = _pins(constraints)
    unpinned = sorted(name for name in resolved if name != "reflectrm" and name not in pins)
    if unpinned:
        return f"{line.constraints} does not pin {', '.join(unpinned)}: regenerate it (its header says how)"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--uv", default="uv", help="the uv executable")
    parser.add_argument("--list", action="store_true", help="print the lines found; resolve nothing")
    args = parser.parse_args(argv)
    lines = [line for path in pages() for line in install_lines(path)]
    failed = 0
    for line in lines:
        shown = f"{line.source}: -c {line.constraints} {' '.join(line.requirements)}"
        if args.list or line.no_deps:
            print(f"{'skip (--no-deps)' if line.no_deps else 'found'}  {shown}")
            continue
        start = time.monotonic()
        problem = resolve(line, uv=args.uv)
        print(f"{'ok' if problem is None else 'FAILED'}  {shown}  ({time.monotonic() - start:.1f} s)")
        if problem is not None:
            failed += 1
            print(f"    error: {problem}", file=sys.stderr)
    print(f"{len(lines) - failed} of {len(lines)} install lines resolve")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
