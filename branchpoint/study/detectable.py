"""For each matched contrast a sweep plans, the smallest difference in failure rate it can detect.

A contrast is what ``branchpoint.analysis.contrasts.matched`` tests: a branch point's option against its baseline,
over pairs of arms of one tree that differ in that choice only (same scenario, target, condition,
simulator, replicate and every other choice), pooled over targets and simulators, never over
conditions, with scenarios as the independent unit. The pairs are counted here from the planned
trees, per scenario, and ``branchpoint.core.power.detectable_difference`` turns them into the minimal
detectable difference at 80% power, two-sided alpha 0.05, at the manifest's stated base rate
(``plan.base_rate``), for the test the analysis will run at that design: the same rule
(``branchpoint.core.power.scenario_test``) chooses it in both. At 3 to 5 scenarios that is the
exact sign-flip test, whose smallest p (2 / 2^S: 0.125 at 4) is never below 0.05: no effect is
detectable, and the line says so. Its assumptions are in that module and in the printed line.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from branchpoint.core.power import ALPHA, POWER, detectable_difference
from branchpoint.core.words import counted

if TYPE_CHECKING:
    from branchpoint.core.analysis_plan import AnalysisPlan, PrimaryContrast
    from branchpoint.simulator.plan import TreeSpec

ContrastKey = tuple[str, str, str]  # branch point, baseline, option


@dataclass
class ContrastPairs:
    """Planned pairs of one contrast: (condition, scenario) -> pairs, and the same per target."""

    key: ContrastKey
    pairs: Counter[tuple[str, str]] = field(default_factory=Counter)
    per_target: Counter[tuple[str, str, str]] = field(default_factory=Counter)

    @property
    def label(self) -> str:
        bp, baseline, option = self.key
        return f"{bp}: {baseline} → {option}"

    def scenarios(self) -> int:
        return len({s for _, s in self.pairs})

    def sizes(self) -> dict[str, list[int]]:
        """Condition -> pairs in each scenario."""
        out: dict[str, list[int]] = {}
        for (condition, _), n in sorted(self.pairs.items()):
            out.setdefault(condition, []).append(n)
        return out

    def target_sizes(self) -> dict[tuple[str, str], list[int]]:
        out: dict[tuple[str, str], list[int]] = {}
        for (target, condition, _), n in sorted(self.per_target.items()):
            out.setdefault((target, condition), []).append(n)
        return out


def tree_pairs(tree: TreeSpec) -> dict[ContrastKey, int]:
    """Matched pairs in one tree, per contrast."""
    out: Counter[ContrastKey] = Counter()
    for bp in tree.scenario.branch_points:

        def option(choices: dict[str, object], bp_id: str = bp.id, base: str = bp.baseline) -> str:
            # As the engine and analysis: an arm without a choice holds the baseline.
            chosen = choices.get(bp_id)
            return base if chosen is None else str(chosen)

        def rest(choices: dict[str, object], bp_id: str = bp.id) -> str:
            return repr(sorted((k, str(v)) for k, v in choices.items() if k != bp_id))

        baselines = {rest(a.choices) for a in tree.arms if option(a.choices) == bp.baseline}
        for arm in tree.arms:
            opt = option(arm.choices)
            if opt != bp.baseline and rest(arm.choices) in baselines:
                out[(bp.id, bp.baseline, opt)] += 1
    return dict(out)


def count_pairs(trees: list[TreeSpec], into: dict[ContrastKey, ContrastPairs]) -> None:
    # A tree's pairs depend on its scenario and its arms' choices only: the replicates,
    # targets and conditions of one scenario's variant set are counted once.
    known: dict[tuple[str, tuple[str, ...]], dict[ContrastKey, int]] = {}
    for tree in trees:
        shape = (tree.scenario_hash, tuple(a.variant_id for a in tree.arms))
        pairs = known.get(shape)
        if pairs is None:
            pairs = known[shape] = tree_pairs(tree)
        for key, n in pairs.items():
            entry = into.setdefault(key, ContrastPairs(key))
            entry.pairs[(tree.condition, tree.scenario.id)] += n
            entry.per_target[(tree.target, tree.condition, tree.scenario.id)] += n


def _weakest(base_rate: float, groups: list[list[int]]) -> tuple[float | None, str]:
    """The largest MDD over the separately tested groups, or why there is none (the first group
    with no detectable effect: its test, its smallest p)."""
    got = [detectable_difference(base_rate, sizes) for sizes in groups]
    if not got:
        return None, "no pairs"
    for mdd, why in got:
        if mdd is None:
            return None, why
    return max(m for m, _ in got if m is not None), ""


def _points(mdd: tuple[float | None, str]) -> str:
    value, why = mdd
    return f"+{100 * value:.1f} points" if value is not None else why


def lines(contrasts: dict[ContrastKey, ContrastPairs], base_rate: float, targets: int) -> list[str]:
    """The plan's lines: one a contrast, with the assumptions stated once."""
    if not contrasts:
        return [
            "detectable differences: no branch point in these scenarios (profile contrasts, as in "
            "the ED study, are not estimated)"
        ]
    out = [
        f"smallest detectable difference in failure rate ({POWER:.0%} power, two-sided alpha "
        f"{ALPHA:g}, base rate {base_rate:.0%}), per condition, pooled over targets:",
        "  the scenario-level test the analysis runs at each design (t from 6 scenarios, the exact "
        "sign-flip test at 3 to 5, none below); assumes independent arms (no within-pair "
        "correlation: conservative), the same effect in every scenario, every pair realised",
        f"  {'contrast':44}{'scenarios':>10}{'pairs':>8}{'pooled':>22}"
        + (f"{'per target':>22}" if targets > 1 else ""),
    ]
    for key in sorted(contrasts):
        c = contrasts[key]
        sizes = c.sizes()
        k = c.scenarios()
        pairs = max(sum(v) for v in sizes.values())
        row = f"  {c.label[:43]:44}{k:>10}{pairs:>8}"
        row += f"  {_points(_weakest(base_rate, list(sizes.values()))):>20}"
        if targets > 1:
            per = _weakest(base_rate, list(c.target_sizes().values()))
            row += f"  {_points(per):>20}"
        out.append(row)
    return out


def primary_sizes(
    primary: PrimaryContrast, contrasts: dict[ContrastKey, ContrastPairs],
    trees: list[TreeSpec], targets: list[str], conditions: list[str],
) -> dict[str, list[int]]:  # fmt: skip
    """Condition -> pairs in each scenario, of one pre-registered primary contrast within the
    scope (``targets``, ``conditions``): as the Confirmatory section pairs them."""
    sizes: Counter[tuple[str, str]] = Counter()
    if primary.kind == "branch_point":
        for key, c in contrasts.items():
            if key[0] == primary.branch_point and key[2] == primary.option:
                for (target, condition, scenario), n in c.per_target.items():
                    if target in targets and condition in conditions:
                        sizes[(condition, scenario)] += n
    else:
        # Each arm of the reference side's tree meets the same arm of the other side's tree.
        for tree in trees:
            if primary.chatbots is not None:
                hit = tree.target == primary.chatbots[0] and tree.condition in conditions
                condition = tree.condition
            else:
                hit = tree.target in targets and tree.condition == primary.reference
                condition = f"{primary.reference} → {primary.condition}"
            if hit:
                sizes[(condition, tree.scenario.id)] += len(tree.arms)
    out: dict[str, list[int]] = {}
    for (condition, _), n in sorted(sizes.items()):
        out.setdefault(condition, []).append(n)
    return out


def primary_lines(plan: AnalysisPlan, family: list[tuple[str, dict[str, list[int]]]],
                  base_rate: float) -> list[str]:  # fmt: skip
    """The pre-registered primary family's detectable differences, at Holm's strictest step
    (alpha / m, m the family's members: contrasts x conditions x criteria)."""
    per_outcome = 1 if plan.outcome == "rubric" else len(plan.criteria)
    m = sum(len(sizes) for _, sizes in family) * per_outcome
    if m == 0:
        return ["primary family (pre-registered): no planned pair for its contrasts"]
    alpha = plan.alpha / m
    out = [
        f"primary family (pre-registered, {counted(m, 'member')}; Holm at alpha {plan.alpha:g}, "
        f"the first step at {alpha:.3g}); smallest effect of interest "
        f"+{100 * plan.smallest_effect:.1f} points; detectable at the first step, same "
        "assumptions:",
        f"  {'contrast':45}{'condition':21}{'scenarios':>9}  detectable",
    ]
    for label, sizes in family:
        for condition, per_scenario in sizes.items():
            # the test the analysis will run at this design (detectable_difference), as in lines
            found = detectable_difference(base_rate, per_scenario, alpha=alpha)
            mdd = found[0]
            verdict = ""
            if mdd is not None:
                verdict = "  (covers it)" if mdd <= plan.smallest_effect else "  (above it)"
            out.append(f"  {label[:44]:45}{condition[:20]:21}{len(per_scenario):>9}  "
                       f"{_points(found)}{verdict}")  # fmt: skip
    return out
