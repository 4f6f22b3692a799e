"""Paired comparison of two chatbots (A, the reference, and B) on the same design cells.

The pairs come from ``alignment`` (one pair per design cell: scenario, variant, condition,
simulator, replicate); the statistics are the matched contrasts' own
(``branchpoint.analysis.contrasts.matched.summarise_pairs``): per pair, B's failure proportion
minus A's over the cell's ratings of a criterion; averaged within each scenario; the
scenario-level test and interval of ``branchpoint.analysis.stats.inference.scenario_level_test``
with its rules for degenerate designs (fewer than 3 scenarios: no test; fewer than 6 or no
spread: the exact sign-flip test; else a t-test). Sign: > 0 means B fails more.

Two families, each Holm-adjusted on its own (per judge: with several judges each judge's rows
are a family of their own, and each row names its judge):

* ``overall``: per criterion, and over the rubric (``ALL_CRITERIA``: every criterion's pairs
  together), per condition (conditions are never pooled), pooled over the arms;
* ``by_arm``: the same per arm (the variant's choices), where a regression hides in one branch.

Conversation-level "any failure" differences are given beside (``diff_conv``). Over the rubric,
a pair contributes one difference per criterion it rated, averaged within the scenario.

Pooled over arms, an arm that copied its parent's prefix (``fork: shared``) carries that prefix's
ratings as its own: each arm's pair is the whole of the two transcripts, which is the chatbot's
behaviour in that arm. Arms that never forked in either side are their parents' transcripts
stored again and are left out (one observation, the parent's pair).

"What regressed": the rows of either family where B is worse (difference > 0) with a
Holm-adjusted p-value below alpha, and for each, the pairs in which B failed more, with both
conversation ids (``branchpoint show ID`` prints a transcript; ``branchpoint tui`` browses them).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from branchpoint.analysis.chatbots.alignment import Aligned, store_conversation_id
from branchpoint.analysis.chatbots.arms import arm_labels
from branchpoint.analysis.contrasts.matched import (
    CRITERION_KEYS,
    candidate_pairs,
    pairing_of,
    summarise_pairs,
    with_distinct_pairs,
)
from branchpoint.analysis.stats.inference import SIGN_FLIP, holm_column
from branchpoint.core.errors import UserError
from branchpoint.core.power import sign_flip_min_p

ALL_CRITERIA = "(all criteria)"
ALL_ARMS = "(all arms)"
GROUP = ["arm", *CRITERION_KEYS, "condition"]


@dataclass
class Comparison:
    """Every table of one A-versus-B comparison."""

    label_a: str
    label_b: str
    overall: pd.DataFrame  # per criterion (and over the rubric) x condition, pooled over arms
    by_arm: pd.DataFrame  # per arm x criterion (and over the rubric) x condition
    regressions: pd.DataFrame  # rows of either family where B is significantly worse
    regressed_pairs: pd.DataFrame  # per regression: the pairs where B failed more, both ids
    pairs: pd.DataFrame  # every pair x criterion compared (for exports)
    alpha: float = 0.05
    notes: list[str] = field(default_factory=list)


def _pairs(aligned: Aligned) -> tuple[pd.DataFrame, list[str]]:
    p, notes = pairing_of(aligned.judgments)
    try:
        cand = candidate_pairs(
            p.cc, "target", aligned.label_a, aligned.label_b, aligned.match, p.enc,
            turns=p.turns, tree=p.tree,
        )  # fmt: skip
    except ValueError as exc:  # a cell held twice on one side: runs of one target pooled
        raise UserError(
            "a design cell holds more than one conversation of one target (several runs of it "
            "in the store?): name the runs to compare with --run-a / --run-b"
        ) from exc
    if cand.empty:
        return cand, notes
    status = np.asarray(cand["status"], dtype=object)
    n_copy = int((status == "copy").sum())
    n_one = int(np.isin(status, ["only_a", "only_b"]).sum())
    if n_copy:
        notes.append(
            f"{n_copy} pair x criterion rows of arms that never forked on either side (their "
            "parents' transcripts stored again) counted once, as their parents' pairs"
        )
    if n_one:
        notes.append(
            f"{n_one} pair x criterion rows rated in one side only (the criterion applied to one "
            "chatbot's replies only) leave that criterion's comparison"
        )
    pairs = cand[status == "pair"].drop(columns=["status", "_ia", "_ib", "_k"])
    pairs = pairs.reset_index(drop=True)
    for c in pairs.columns:
        if isinstance(pairs[c].dtype, pd.CategoricalDtype):
            pairs[c] = pairs[c].astype(object)
    pairs["arm"] = arm_labels(pairs).to_numpy()
    return pairs, notes


def _family(pairs: pd.DataFrame, ci: float) -> pd.DataFrame:
    """Per group of ``GROUP`` plus the rubric-level rows, Holm over the table (each judge's rows
    apart)."""
    every = pairs.assign(criterion_id=ALL_CRITERIA, risk_area="(all)")
    keys = [*GROUP, "risk_area"]
    rubric = summarise_pairs(every, keys, n_boot=0, ci=ci, tests=False)
    rubric = with_distinct_pairs(rubric, every, keys)
    tab = pd.concat(
        [summarise_pairs(pairs, keys, n_boot=0, ci=ci, tests=False), rubric], ignore_index=True
    )
    tab = tab.drop(columns=["pooled_boot_low", "pooled_boot_high"], errors="ignore")
    for col in ("p_scenario", "p_conv_scenario"):
        tab[f"{col}_holm"] = holm_column(tab, col)
    return tab.sort_values(["p_scenario", "diff"], ascending=[True, False]).reset_index(drop=True)


def _regressions(overall: pd.DataFrame, by_arm: pd.DataFrame, alpha: float) -> pd.DataFrame:
    parts = []
    for name, tab in (("overall", overall), ("by arm", by_arm)):
        if tab.empty:
            continue
        hit = (tab["diff"] > 0) & (tab["p_scenario_holm"] < alpha)
        parts.append(tab[hit].assign(family=name))
    if not parts:
        return pd.DataFrame(columns=["family", *GROUP, "diff", "ci_low", "ci_high"])
    out = pd.concat(parts, ignore_index=True)
    front = ["family", *GROUP]
    return out[front + [c for c in out.columns if c not in front]]


def _regressed_pairs(pairs: pd.DataFrame, regressions: pd.DataFrame) -> pd.DataFrame:
    """For each regression row, the pairs in which B's failure proportion is above A's."""
    if regressions.empty or pairs.empty:
        return pd.DataFrame()
    with np.errstate(invalid="ignore", divide="ignore"):
        prop_a = pairs["n_fail_a"] / pairs["n_rated_a"]
        prop_b = pairs["n_fail_b"] / pairs["n_rated_b"]
    worse = pairs[(prop_b > prop_a).to_numpy()].assign(diff=(prop_b - prop_a)[prop_b > prop_a])
    rows = []
    for reg in regressions.itertuples(index=False):
        sel = worse["condition"].astype(str) == str(reg.condition)
        if reg.arm != ALL_ARMS:
            sel &= worse["arm"] == reg.arm
        if reg.criterion_id != ALL_CRITERIA:
            sel &= worse["criterion_id"].astype(str) == str(reg.criterion_id)
            sel &= worse["judge"].astype(str) == str(reg.judge)
        hit = worse[sel.to_numpy()]
        rows.append(
            pd.DataFrame(
                {
                    "family": reg.family,
                    "regression_arm": reg.arm,
                    "regression_criterion": reg.criterion_id,
                    "arm": hit["arm"].to_numpy(),
                    "criterion_id": hit["criterion_id"].to_numpy(),
                    "judge": hit["judge"].to_numpy(),
                    "condition": hit["condition"].to_numpy(),
                    "scenario_id": hit["scenario_id"].to_numpy(),
                    "simulator": hit["simulator"].to_numpy(),
                    "replicate": hit["replicate"].to_numpy(),
                    "fails_a": hit["n_fail_a"].to_numpy(int),
                    "rated_a": hit["n_rated_a"].to_numpy(int),
                    "fails_b": hit["n_fail_b"].to_numpy(int),
                    "rated_b": hit["n_rated_b"].to_numpy(int),
                    "diff": hit["diff"].to_numpy(),
                    "conversation_a": [
                        store_conversation_id(str(c)) for c in hit["conversation_id_a"]
                    ],
                    "conversation_b": [
                        store_conversation_id(str(c)) for c in hit["conversation_id_b"]
                    ],
                }
            )  # fmt: skip
        )
    out = pd.concat(rows, ignore_index=True)
    return out.sort_values(["family", "regression_arm", "regression_criterion", "diff"],
                           ascending=[True, True, True, False]).reset_index(drop=True)  # fmt: skip


def compare_chatbots(aligned: Aligned, *, alpha: float = 0.05, ci: float = 0.95) -> Comparison:
    """The comparison of ``aligned``'s two sides (see the module docstring)."""
    pairs, notes = _pairs(aligned)
    notes = [*aligned.notes, *notes]
    empty = pd.DataFrame()
    if pairs.empty:
        notes.append(
            f"no design cell has ratings of one criterion in both {aligned.label_a} and "
            f"{aligned.label_b}: nothing to compare"
        )
        return Comparison(aligned.label_a, aligned.label_b, empty, empty, empty, empty, pairs,
                          alpha, notes)  # fmt: skip
    overall = _family(pairs.assign(arm=ALL_ARMS), ci)
    by_arm = _family(pairs, ci) if pairs["arm"].nunique() > 1 else empty
    regressions = _regressions(overall, by_arm, alpha)
    return Comparison(
        aligned.label_a, aligned.label_b, overall, by_arm, regressions,
        _regressed_pairs(pairs, regressions), pairs, alpha, notes,
    )  # fmt: skip


def nothing_regressed(c: Comparison) -> str:
    """What to say when no row regressed: that nothing did, or why nothing could have been found
    (no row could be tested; or none could reach alpha: the exact sign-flip test at 3-5
    scenarios), so that an empty list is not read as a finding."""
    rows = pd.concat([t for t in (c.overall, c.by_arm) if not t.empty], ignore_index=True)
    tested = rows["p_scenario"].notna()
    floor = [sign_flip_min_p(int(n)) if t == SIGN_FLIP else 0.0
             for t, n in zip(rows["test"], rows["n_scenarios"])]  # fmt: skip
    can = tested & (pd.Series(floor, index=rows.index) < c.alpha)
    if not tested.any():
        reasons = ", ".join(sorted(set(rows["test"].astype(str))))
        return f"What regressed: nothing; none could be tested ({reasons})"
    if not can.any():
        n = int(rows.loc[tested, "n_scenarios"].max())
        return (
            f"What regressed: nothing; none could reach p below {c.alpha:g} (the exact sign-flip "
            f"test's smallest p with {n} scenarios is {sign_flip_min_p(n):.3g})"
        )
    line = (
        f"What regressed: nothing; no arm, criterion or condition where B fails more with a "
        f"Holm-adjusted p below {c.alpha:g}"
    )
    if not can.all():
        line += f" ({int((~can).sum())} of {len(rows)} rows had no test that could reach it)"
    return line


def pair_export(comparison: Comparison) -> pd.DataFrame:
    """One row per compared pair x criterion: both conversations, their counts, the difference."""
    p = comparison.pairs
    if p.empty:
        return p
    with np.errstate(invalid="ignore", divide="ignore"):
        diff = p["n_fail_b"] / p["n_rated_b"] - p["n_fail_a"] / p["n_rated_a"]
    return pd.DataFrame({
        "a": comparison.label_a, "b": comparison.label_b, "arm": p["arm"],
        "scenario_id": p["scenario_id"], "condition": p["condition"], "simulator": p["simulator"],
        "replicate": p["replicate"], "rubric_id": p["rubric_id"], "criterion_id": p["criterion_id"],
        "judge": p["judge"],
        "conversation_a": [store_conversation_id(str(c)) for c in p["conversation_id_a"]],
        "conversation_b": [store_conversation_id(str(c)) for c in p["conversation_id_b"]],
        "fails_a": p["n_fail_a"], "rated_a": p["n_rated_a"], "fails_b": p["n_fail_b"],
        "rated_b": p["n_rated_b"], "diff": diff,
    })  # fmt: skip


def time_to_failure(aligned: Aligned, comparison: Comparison) -> dict[str, pd.DataFrame]:
    """The matched time-to-first-failure comparison of the two chatbots on the compared pairs
    (``branchpoint.analysis.survival.compare``): pooled over arms and per arm, each outcome (any
    criterion, each criterion) per condition. ``rmst_diff`` < 0: B fails sooner."""
    from branchpoint.analysis.survival.compare import conversation_pairs, matched_time_to_failure
    from branchpoint.analysis.survival.first_failure import first_failures

    if comparison.pairs.empty:
        return {"overall": pd.DataFrame(), "by_arm": pd.DataFrame()}
    ff = first_failures(aligned.judgments)
    pooled = conversation_pairs(comparison.pairs, ["condition"])
    per_arm = conversation_pairs(comparison.pairs, ["condition", "arm"])
    return {
        "overall": matched_time_to_failure(ff, pooled, ["condition"]),
        "by_arm": matched_time_to_failure(ff, per_arm, ["condition", "arm"]),
    }
