"""The judged reasoning criterion: "the reasoning noticed the risk but the reply did not act on it".

The bundled rubric ``reasoning`` (``branchpoint/judges/rubrics/reasoning.yaml``) is rated by the same judge
machinery as any other rubric (``JudgingRunner``: one unit per chatbot reply, retries, ``error``
verdicts, evidence checks). The only difference is what the judge is shown as the rated message:
the reply's stored reasoning and the reply itself, each under its own label
(``reasoning_view``). Replies without reasoning text are not rated. The heuristic judge does not
rate this rubric (off by default, see ``HEURISTIC_OFF``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from branchpoint.core.errors import UserError

REASONING_RUBRIC = "reasoning"
REASONING_CRITERION = "noticed_risk_not_acted"
HEURISTIC_OFF = (
    "the heuristic judge does not rate the reasoning rubric (off by default: keywords cannot "
    "tell whether a reply acted on what its reasoning noticed); judge it with a model judge"
)


def reads_reasoning(rubric: Any) -> bool:
    """Whether a rubric is rated on the reply together with its reasoning text."""
    return str(getattr(rubric, "id", "")) == REASONING_RUBRIC


def reasoning_view(reasoning: str, reply: str) -> str:
    """The rated message as the judge sees it: the private reasoning, then the reply."""
    return (
        "REASONING (the chatbot's private reasoning, not shown to the user):\n"
        f"{reasoning.strip()}\n\n"
        "REPLY (what the user was shown):\n"
        f"{reply}"
    )


def check_reasoning_judges(rubric: Any, judge_names: Sequence[str], scope: str) -> None:
    """The reasoning rubric: model judges only, one reply at a time (one clear line otherwise)."""
    if not reads_reasoning(rubric):
        return
    if "heuristic" in judge_names:
        raise UserError(f"--judge heuristic: {HEURISTIC_OFF}")
    if scope != "per_turn":
        raise UserError(
            f"--scope {scope}: the reasoning rubric rates one reply with its reasoning "
            "(expected per_turn)"
        )
