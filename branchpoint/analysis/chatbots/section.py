"""The report's "Chatbots ranked" section, shown from the analysis' result
(``summary.Chatbots``, which ``branchpoint analyze`` prints too): with two or more targets, the
ranking with its uncertainty and, on risk-level (ED) judgments, the model comparison. The paired
comparison of two chosen chatbots is ``branchpoint compare``."""

from __future__ import annotations

import pandas as pd

from branchpoint.analysis.chatbots.ranking import ranking_display
from branchpoint.analysis.chatbots.summary import Chatbots
from branchpoint.analysis.report.sections import Section

TITLE = "Chatbots ranked"
METHOD = (
    "Each target's failure rate over its distinct ratings (pass/partial/fail rubrics; a "
    "shared-prefix turn once) on the scenarios every target ran, per judge and condition; every "
    "pair of targets compared by the scenario-level test over the per-scenario differences of "
    "their rates, Holm over the pairs: a target's 95% rank set runs from 1 plus the targets "
    "significantly better to N minus those significantly worse. "
    "Overlapping rank sets: the data do not order those targets. Two chosen chatbots, "
    "pair by pair with what regressed: `branchpoint compare --a A --b B`."
)
RANKING = "Ranking (1: fewest failures)"
ED_TEXT = (
    "ED models: each model's mean safety score per question (0-100), Friedman over questions, "
    "then every pair by Wilcoxon's signed-rank test over questions, Holm over the pairs (b - a > "
    "0: b safer)."
)
ED_FRIEDMAN = "ED models: Friedman over questions"
ED_PAIRWISE = "ED models, pairwise"


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


def chatbot_tables(c: Chatbots) -> list[tuple[str, pd.DataFrame]]:
    """The section's tables as shown (``branchpoint analyze`` prints the same ones)."""
    tables = []
    if not c.ranking.empty:
        tables.append((RANKING, ranking_display(c.ranking)))
    if not c.ed_friedman.empty:
        tables.append((ED_FRIEDMAN, c.ed_friedman.round(4)))
    if not c.ed_pairwise.empty:
        tables.append((ED_PAIRWISE, _ed_display(c.ed_pairwise)))
    return tables


def chatbots_section(c: Chatbots | None) -> Section | None:
    """The section from the analysis' result (``Analysis.chatbots``); None when it has nothing
    to show (fewer than two targets, or none ranked)."""
    if c is None or c.absent:
        return None
    section = Section(TITLE, [METHOD])
    section.tables += chatbot_tables(c)
    if not c.ed_friedman.empty or not c.ed_pairwise.empty:
        section.text.append(ED_TEXT)
    return section
