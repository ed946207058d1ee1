"""A process reward for the demo domain: is the analysis's arithmetic true? Pure standard library.

The paper rewards the verdict alone. On the demo judge that reward is noisy: an analysis that
computes `2 * 3 = 8` still names the right response half the time (when neither answer matches, the
verdict defaults to Response 1), and one that writes `6 - 8 = 0, right` may name it by accident, so
GRPO also reinforces wrong arithmetic. The demo's analyses are checkable, so this reward pays 1.0
only when every equation in the analysis is true, the first one works the prompt's problem, each
right / wrong mark follows from its difference (0 means right), and each candidate is checked once,
quoted as the prompt has it (the number a response states, the result a critique computed): a sample
that copies 19 for a response's 29 checks true arithmetic but judges a response it never read, and
the reflection, which checks critiques' results, cannot see that slip. Use it beside the accuracy
reward (`TrainConfig(reward_weights={"accuracy": 1.0, "arithmetic": 1.0})`), on demo data only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from reflectrm.core.parsing import parse_output
from reflectrm.core.prompts import Task
from reflectrm.demo.tasks import KIND_OF, Problem, problem_in, stated_value

_EQUATION = re.compile(r"(-?\d+) ([-+*]) (-?\d+) = (-?\d+)")
_CHECK = re.compile(r"(-?\d+) - (-?\d+) = (-?\d+), (right|wrong)")
_QUOTE = re.compile(r"((?:Response|Critique) [12]): (?:(-?\d+) - (-?\d+) = -?\d+, (?:right|wrong)|no answer, wrong)\.")
"""A check of one candidate: what it quotes for it and what it subtracts ("Response 2: 29 - 19 = 10, wrong.")."""
_CANDIDATE = re.compile(r"^\[((?:Response|Critique) [12])\]\n(.*?)(?=\n\[(?:Response|Critique) [12]\]\n|\n\n## |\Z)",
                        re.MULTILINE | re.DOTALL)
_RESULT = re.compile(r"[^=]*= (-?\d+)\.")
"""A critique's computed result: "3 + 16 = 19." """


def _prompt_text(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    return "\n".join(str(m.get("content", "")) for m in prompt or () if isinstance(m, dict))


def quoted_values(prompt_text: str, task: Task) -> dict[str, int | None]:
    """What a faithful analysis quotes for each candidate of a prompt: the number each response states
    (the response task) or the result each critique computed (the reflection task); None: it has none."""
    noun = "Response" if task is Task.RESPONSE else "Critique"
    out: dict[str, int | None] = {}
    for label, text in _CANDIDATE.findall(prompt_text):
        if label.startswith(noun):
            if task is Task.RESPONSE:
                out[label] = stated_value(text)
            else:
                m = _RESULT.match(text.strip())
                out[label] = int(m.group(1)) if m else None
    return out


def arithmetic_true(analysis: str, problem: Problem | None, quoted: dict[str, int | None] | None = None) -> bool:
    """Every equation true, the first one `problem` (when given), each mark following its difference;
    with `quoted` (`quoted_values`), one check per candidate that quotes it faithfully and subtracts the
    analysis's own result."""
    equations = [(Problem(KIND_OF[op], int(a), int(b)), int(v)) for a, op, b, v in _EQUATION.findall(analysis)]
    if not equations:
        return False
    if problem is not None and equations[0][0] != problem:
        return False
    if any(worked.answer != value for worked, value in equations):
        return False
    if not all((int(d) == 0) == (mark == "right") for _, _, d, mark in _CHECK.findall(analysis)):
        return False
    if quoted is None:
        return True
    checks = _QUOTE.findall(analysis)
    if sorted(label for label, _, _ in checks) != sorted(quoted):
        return False  # a candidate left unchecked, or checked twice
    computed = equations[0][1]
    return all(quoted[label] is None if not said else (int(said) == quoted[label] and int(minus) == computed)
               for label, said, minus in checks)


def arithmetic_reward(prompts: Sequence[Any], completions: Sequence[Any], task: Sequence[str],
                      **kwargs: Any) -> list[float]:
    """1.0 when the completion's analysis does the prompt's arithmetic right (see the module), else 0.0."""
    from reflectrm.training.rewards import completion_text  # the one reading of TRL's completions

    rewards = []
    for prompt, completion, kind in zip(prompts, completions, task, strict=True):
        text = _prompt_text(prompt)
        problem = problem_in(text)
        analysis = parse_output(completion_text(completion), task=Task(kind)).analysis
        true = problem is not None and arithmetic_true(analysis, problem, quoted_values(text, Task(kind)))
        rewards.append(1.0 if true else 0.0)
    return rewards
