"""The report's Confirmatory section: the pre-registered primary family only, Holm over it, the
decision per member and the deviations from the registered plan. When a sweep registered a plan,
every other section of the report is labelled exploratory (``label_exploratory``)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from branchpoint.analysis.pairing.forks import attach_tree
from branchpoint.analysis.preregistered.family import primary_family
from branchpoint.analysis.report.sections import Section
from branchpoint.analysis.tables.judgments import judgment_table
from branchpoint.core.analysis_plan import DECISIONS, AnalysisPlan
from branchpoint.core.words import counted

TITLE = "Confirmatory analysis (pre-registered)"
# A block first stored after cells had run (added with --amend to a sweep that had none).
LATE_TITLE = "Confirmatory analysis (registered after data collection began)"
EXPLORATORY = " (exploratory)"


def _pts(x: Any) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:+.1f}"


def _plan_hash(h: Any, word: str = "plan ") -> str:
    """A deviation's hash: 'plan 917cd5ae37dc', or 'no plan' where none was (not 'None')."""
    return "no plan" if h is None else f"{word}{str(h)[:12]}"


def family_display(tab: pd.DataFrame) -> pd.DataFrame:
    tab = tab.reindex(columns=[*tab.columns, *[c for c in ("rate_a", "rate_b", "diff", "ci_low",
                      "ci_high", "interval", "p_scenario", "p_holm") if c not in tab.columns]])  # fmt: skip

    def rate(x: Any) -> str:
        return "n/a" if x is None or x != x else f"{100 * x:.1f}%"

    def p(x: Any) -> str:
        return "n/a" if x is None or x != x else f"{x:.3g}"

    return pd.DataFrame({
        "contrast": tab["contrast"], "outcome": tab["criterion_id"], "condition": tab["condition"],
        "rate (reference)": [rate(x) for x in tab["rate_a"]],
        "rate (compared)": [rate(x) for x in tab["rate_b"]],
        "difference (points)": [_pts(x) for x in tab["diff"]],
        "95% interval": ["none" if lo != lo else f"{_pts(lo)} to {_pts(hi)}"
                         for lo, hi in zip(tab["ci_low"], tab["ci_high"])],
        "test": tab["interval"].fillna("none"), "p": [p(x) for x in tab["p_scenario"]],
        "p (Holm, family)": [p(x) for x in tab["p_holm"]],
        "decision": tab["decision"], "pairs": tab["n_pairs"],
    })  # fmt: skip


def confirmatory_sections(store_or_db: Any, runs: Sequence[str] | None) -> list[Section]:
    """One Confirmatory section per sweep that registered a plan (none: no section)."""
    from branchpoint.core.read import analysis_registrations

    out: list[Section] = []
    for sweep_id, reg in sorted(analysis_registrations(store_or_db, runs).items()):
        plan = AnalysisPlan.model_validate(reg["block"])
        jt = attach_tree(judgment_table(store_or_db, [sweep_id]), store_or_db, [sweep_id])
        fam = primary_family(jt, plan)
        late = reg.get("registered_after_cells")
        title = TITLE if late is None else LATE_TITLE
        s = Section(title if len(out) == 0 else f"{title}: {sweep_id}")
        when = f"registered {reg.get('registered_at')}"
        if late is not None:
            when += f", after {counted(int(late), 'cell')} had run"
        s.text.append(
            f"Sweep {sweep_id}: analysis plan {when} (hash "
            f"{str(reg.get('hash'))[:12]}). Family: the {counted(len(plan.primary), 'primary contrast')} "
            f"only, outcome {'the rubric as a whole' if plan.outcome == 'rubric' else ', '.join(plan.criteria)}"
            f", per condition; {plan.test.replace('_', '-')} test (t over scenario means; the "
            f"exact sign-flip test below 6 scenarios or with no spread); Holm over the family at "
            f"alpha {plan.alpha:g}; decision rule: {DECISIONS[plan.decision]}; smallest effect "
            f"of interest {100 * plan.smallest_effect:.1f} points. Differences: compared minus "
            "reference, on failure (> 0: more failures)."
        )
        devs = reg.get("deviations") or []
        if devs:
            s.text.append(f"Deviations from the registered plan ({len(devs)}):")
            for d in devs:
                s.text.append(f"- {d.get('at')}: {d.get('reason')} ({_plan_hash(d.get('old_hash'))} "
                              f"→ {_plan_hash(d.get('new_hash'), '')})")  # fmt: skip
        else:
            s.text.append("Deviations from the registered plan: none.")
        if fam.table.empty:
            s.text.append("No member of the family could be tested on these data.")
        else:
            s.tables.append(
                ("Primary family (Holm over these rows only)", family_display(fam.table))
            )
        s.text += [f"Note: {n}" for n in fam.notes]
        s.text.append("Every other table in this report is exploratory: not part of the "
                      "registered family, its p-values adjusted only within its own table.")  # fmt: skip
        out.append(s)
    return out


def label_exploratory(sections: list[Section]) -> None:
    for s in sections:
        if not s.title.endswith(EXPLORATORY):
            s.title += EXPLORATORY
