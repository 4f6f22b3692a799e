"""Whether a sweep should ask before it runs: the most its cells still to do may cost, against
the manifest's ``confirm_above_usd``.

The amount compared is the plan's *high* USD, not its expected one: the question guards against
a bill nobody meant to run up, so it is asked whenever the plan says the run could cost more
than the threshold, not only when it probably will. High takes each side's ``max_tokens``; a
target that sets none has its replies assumed (``branchpoint.study.costs.TARGET_REPLY_HIGH``), and the
question says so. A budget caps what a sweep can spend, so a budget below that is the bound
instead. A plan with an unpriced model cannot bound the cost at all, so it always asks. Judging
is in the plan's cost, so in this bound, when its estimate is attached
(``branchpoint.study.judge_estimate``, as ``sweep`` does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from branchpoint.study.costs import TARGET_REPLY_HIGH

if TYPE_CHECKING:
    from branchpoint.study.plan import SweepPlan


@dataclass(frozen=True)
class CostCheck:
    to_do: int  # cells still to do
    bound: float | None  # the most they may cost (USD); None: an unpriced model, no bound
    expected: float | None  # the plan's expected and high USD, for the question
    high: float | None
    threshold: float  # the manifest's confirm_above_usd
    by_budget: bool = False  # the bound is the budget's, below the plan's estimates
    judging: str = ""  # what the plan's USD say of judging (SweepPlan.judging_note)
    unpriced: tuple[str, ...] = ()
    uncapped: tuple[str, ...] = ()  # targets with no max_tokens: high assumes their reply length

    @property
    def needed(self) -> bool:
        if self.to_do == 0:
            return False
        return self.bound is None or self.bound > self.threshold

    def reason(self) -> str:
        """Why the sweep asks, one line (no full stop: callers go on)."""
        cells = f"the {self.to_do} cell(s) to do"
        if self.bound is None or self.expected is None or self.high is None:
            models = ", ".join(self.unpriced) or "a model"
            return (
                f"the plan cannot bound the cost of {cells}: {models} unpriced (not in "
                "litellm's price map; a target's price: gives one)"
            )
        cap = "the budget's cap; " if self.by_budget else ""
        assumed = (
            f"; more if {', '.join(self.uncapped)} replies past {TARGET_REPLY_HIGH} tokens (no "
            "max_tokens)"
            if self.uncapped and not self.by_budget
            else ""
        )
        return (
            f"{cells} may cost up to {usd(self.bound)} ({cap}plan: expected "
            f"{usd(self.expected)}, high {usd(self.high)}{self.judging}{assumed}), above "
            f"confirm_above_usd {usd(self.threshold)}"
        )


def usd(value: float) -> str:
    """Dollars to the cent; a small amount to four places, so that a threshold of a tenth of a
    cent does not read as $0.00."""
    return f"${value:.2f}" if value == 0 or value >= 0.01 else f"${value:.4f}"


def cost_check(plan: SweepPlan) -> CostCheck:
    """The bound on what ``plan``'s cells to do may cost, and whether it calls for a question."""
    m = plan.manifest
    expected, high = plan.total("usd", "expected"), plan.total("usd", "high")
    bound = None if expected is None or high is None else max(expected, high)
    by_budget = False
    if bound is not None and m.budget is not None:
        caps = [c for c in (m.budget.usd_total,) if c is not None]
        if m.budget.usd_per_target is not None:
            caps.append(m.budget.usd_per_target * len(m.targets))
        if caps and min(caps) < bound:
            bound, by_budget = min(caps), True
    return CostCheck(
        to_do=plan.cells - plan.done,
        bound=bound,
        expected=expected,
        high=high,
        threshold=m.confirm_above_usd,
        by_budget=by_budget,
        judging=plan.judging_note,
        unpriced=tuple(plan.unpriced),
        uncapped=tuple(plan.uncapped),
    )
