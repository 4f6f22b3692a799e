"""The report's "Chatbots ranked" section: with two or more targets, the ranking with its
uncertainty (``ranking``) and, on risk-level (ED) judgments, the model comparison
(``ed_models``). The paired comparison of two chosen chatbots is ``branchpoint compare``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from branchpoint.analysis.chatbots.ed_models import ed_model_comparison
from branchpoint.analysis.chatbots.ranking import rank_targets, ranking_display
from branchpoint.analysis.pairing.forks import attach_tree
from branchpoint.analysis.report.sections import Section
from branchpoint.analysis.tables.judgments import judgment_table

TITLE = "Chatbots ranked"
METHOD = (
    "Each target's failure rate over its distinct ratings (pass/partial/fail rubrics; a "
    "shared-prefix turn once) on the scenarios every target ran; scenarios resampled with "
    "replacement (the same draws for every target), the targets ranked in each replicate: the "
    "95% interval of each rank and the share of replicates in which it ranked first. "
    "Overlapping rank intervals: the data do not order those targets. Two chosen chatbots, "
    "pair by pair with what regressed: `branchpoint compare --a A --b B`."
)


def _ed_display(pairs: pd.DataFrame) -> pd.DataFrame:
    return pd.DataFrame({
        "condition": pairs["condition"], "judge": pairs["judge"], "model a": pairs["model_a"],
        "model b": pairs["model_b"], "questions": pairs["n_questions"],
        "safety a": [f"{x:.1f}" for x in pairs["mean_a"]],
        "safety b": [f"{x:.1f}" for x in pairs["mean_b"]],
        "median b - a": [f"{x:+.1f}" for x in pairs["median_diff"]],
        "Wilcoxon p": [f"{x:.3g}" for x in pairs["p_wilcoxon"]],
        "p (Holm)": [f"{x:.3g}" for x in pairs["p_holm"]],
    })  # fmt: skip


def chatbots_section(store_or_db: Any, runs: Sequence[str] | None = None) -> Section | None:
    """The section, or None with fewer than two targets."""
    jt = judgment_table(store_or_db, runs)
    if jt.empty or jt["target"].nunique() < 2:
        return None
    jt = attach_tree(jt, store_or_db, runs)
    section = Section(TITLE, [METHOD])
    ranking = rank_targets(jt)
    if not ranking.empty:
        section.tables.append(("Ranking (1: fewest failures)", ranking_display(ranking)))
    fried, pairs = ed_model_comparison(jt)
    if not fried.empty:
        section.text.append(
            "ED models: each model's mean safety score per question (0-100), Friedman over "
            "questions, then every pair by Wilcoxon's signed-rank test over questions, Holm over "
            "the pairs (b - a > 0: b safer)."
        )
        section.tables.append(("ED models: Friedman over questions", fried.round(4)))
    if not pairs.empty:
        section.tables.append(("ED models, pairwise", _ed_display(pairs)))
    if not section.tables:
        return None
    return section
