"""The primary family of a pre-registered analysis (``branchpoint.core.analysis_plan``), tested
as registered: nothing else enters it.

Each primary contrast is paired as the exploratory tables pair it (``candidate_pairs``: a branch
option with its baseline arm, same run, scenario, target, condition, simulator, replicate and
other choices; two chatbots on one design cell; a condition with its reference on one variant),
restricted to the registered scope (targets, conditions) and rubric and judge. Its rows: each
registered criterion, or the rubric as a whole, per condition (never pooled; a condition
contrast has one row per outcome). Each row gets the scenario-level test and interval
(``summarise_pairs``); Holm runs over the family's rows together at the registered alpha; the
decision follows the registered rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from branchpoint.analysis.chatbots.alignment import CELL_KEYS
from branchpoint.analysis.contrasts.matched import (
    PAIR_KEYS,
    candidate_pairs,
    pairing_of,
    resolve_baselines,
    summarise_pairs,
    with_distinct_pairs,
)
from branchpoint.analysis.stats.inference import SIGN_FLIP, holm
from branchpoint.analysis.tables.judgments import choice_column, choice_columns
from branchpoint.core.analysis_plan import AnalysisPlan, PrimaryContrast
from branchpoint.core.power import sign_flip_min_p

ALL_CRITERIA = "(all criteria)"
GROUP = ["contrast", "criterion_id", "condition"]


@dataclass
class Family:
    plan: AnalysisPlan
    table: pd.DataFrame  # one row per member: estimate, interval, p, Holm p, decision
    notes: list[str] = field(default_factory=list)


def _scoped(jt: pd.DataFrame, plan: AnalysisPlan, notes: list[str]) -> pd.DataFrame:
    keep = np.ones(len(jt), dtype=bool)
    if plan.scope.targets:
        keep &= jt["target"].astype(str).isin(plan.scope.targets).to_numpy()
    rubric = plan.rubric or (str(jt["rubric_id"].mode().iloc[0]) if len(jt) else None)
    keep &= (jt["rubric_id"].astype(str) == rubric).to_numpy()
    out = jt[keep]
    judges = out["judge"].astype(str)
    judge = plan.judge or (str(judges.value_counts().index[0]) if len(out) else None)
    if plan.judge is None and judges.nunique() > 1:
        notes.append(f"several judges rated the rubric: the family uses {judge} (most ratings)")
    return out[judges == judge]


def _pairs(p: Any, contrast: PrimaryContrast, notes: list[str]) -> pd.DataFrame:
    cc = p.cc
    choices = choice_columns(cc)
    if contrast.kind == "branch_point":
        col = choice_column(str(contrast.branch_point))
        base = resolve_baselines(cc)
        hit = base[base["branch_point"] == contrast.branch_point]
        if col not in cc.columns or hit.empty:
            notes.append(f"{contrast.label()}: branch point not in the data")
            return pd.DataFrame()
        baseline = str(hit["baseline"].iloc[0])
        match = [*PAIR_KEYS, *[c for c in choices if c != col]]
        cand = candidate_pairs(cc, col, baseline, contrast.option, match, p.enc, turns=p.turns,
                               tree=p.tree)  # fmt: skip
        label = f"{contrast.branch_point}: {baseline} → {contrast.option}"
    elif contrast.kind == "chatbots":
        a, b = contrast.chatbots or ["", ""]
        cand = candidate_pairs(cc, "target", a, b, [*CELL_KEYS, *choices], p.enc, turns=p.turns,
                               tree=p.tree)  # fmt: skip
        label = contrast.label()
    else:
        match = ["run_id", "scenario_id", "variant_id", "target", "simulator", "replicate",
                 *choices]  # fmt: skip
        cand = candidate_pairs(cc, "condition", contrast.reference, contrast.condition, match,
                               p.enc, turns=p.turns, tree=p.tree)  # fmt: skip
        label = contrast.label()
    if cand.empty or not (cand["status"] == "pair").any():
        notes.append(f"{label}: no pair rated in both arms; the member has no test")
        return pd.DataFrame()
    pairs = cand[cand["status"] == "pair"].drop(columns=["status", "_ia", "_ib", "_k"])
    pairs = pairs.reset_index(drop=True)
    for c in pairs.columns:
        if isinstance(pairs[c].dtype, pd.CategoricalDtype):
            pairs[c] = pairs[c].astype(object)
    if contrast.kind == "condition":
        pairs["condition"] = f"{contrast.reference} → {contrast.condition}"
    return pairs.assign(contrast=label)


def primary_family(jt: pd.DataFrame, plan: AnalysisPlan, ci: float = 0.95) -> Family:
    """The registered family's table (see the module docstring). ``jt``: a judgment table with
    the fork tree attached."""
    notes: list[str] = []
    data = _scoped(jt, plan, notes)
    if plan.scope.conditions:
        keep_cond = set(plan.scope.conditions) | {
            c.reference for c in plan.primary if c.kind == "condition"
        }
        data = data[data["condition"].astype(str).isin(keep_cond)]
    p, more = pairing_of(data)
    notes += more
    parts, untested = [], []
    for contrast in plan.primary:
        pairs = _pairs(p, contrast, notes)
        if pairs.empty:  # a registered member stays in the family, untested, and says so
            outcomes = [ALL_CRITERIA] if plan.outcome == "rubric" else list(plan.criteria)
            untested += [{"contrast": contrast.label(), "criterion_id": o, "condition": "",
                          "n_pairs": 0, "decision": "no test: no pair rated in both arms"}
                         for o in outcomes]  # fmt: skip
            continue
        if plan.outcome == "rubric":
            pairs = pairs.assign(criterion_id=ALL_CRITERIA)
        else:
            pairs = pairs[pairs["criterion_id"].astype(str).isin(plan.criteria)]
            missing = set(plan.criteria) - set(pairs["criterion_id"].astype(str))
            if missing:
                notes.append(f"{pairs['contrast'].iloc[0] if len(pairs) else contrast.label()}: "
                             f"no pair rated {', '.join(sorted(missing))}")  # fmt: skip
        if not pairs.empty:
            summary = summarise_pairs(pairs, GROUP, n_boot=0, ci=ci, tests=False)
            parts.append(with_distinct_pairs(summary, pairs, GROUP))
    if not parts:
        return Family(plan, pd.DataFrame(untested), notes)
    tab = pd.concat(parts, ignore_index=True)
    tab = tab.drop(columns=["pooled_boot_low", "pooled_boot_high"], errors="ignore")
    tab["p_holm"] = holm(tab["p_scenario"].to_numpy())
    tab["decision"] = [decide(plan, r) for r in tab.itertuples(index=False)]
    if untested:
        tab = pd.concat([tab, pd.DataFrame(untested)], ignore_index=True)
    return Family(plan, tab, notes)


def decide(plan: AnalysisPlan, row: Any) -> str:
    """The registered decision rule applied to one member."""
    p, est, lo, hi = row.p_holm, row.diff, row.ci_low, row.ci_high
    x = plan.smallest_effect
    if p != p:  # NaN: no test (too few scenarios)
        return "no test (too few scenarios)"
    floor = sign_flip_min_p(int(row.n_scenarios)) if row.test == SIGN_FLIP else 0.0
    if floor >= plan.alpha:  # 3-5 scenarios: "no difference shown" would read as a result
        return (
            f"no test could show a difference: the exact sign-flip test's smallest p with "
            f"{int(row.n_scenarios)} scenarios is {floor:.3g}"
        )
    if p < plan.alpha:
        direction = "higher" if est > 0 else "lower"
        if plan.decision == "holm":
            return f"difference: failure {direction}"
        size = "at least" if abs(est) >= x else "smaller than"
        return f"difference: failure {direction}, {size} the smallest effect of interest"
    if plan.decision == "holm_and_smallest_effect" and lo == lo and -x < lo and hi < x:
        return "no difference shown; equivalent within the smallest effect of interest"
    return "no difference shown"
