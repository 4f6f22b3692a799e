"""The chatbots of one analysis, compared: with two or more targets, their ranking with its
uncertainty (``ranking``) and, on risk-level (ED) judgments, the ED study's model comparison
(``ed_models``). Computed once, by the analysis pipeline, from the judgment rows it has already
read; ``branchpoint analyze`` and the report's section (``section``) both show this result. The
paired comparison of two chosen chatbots, with what regressed, is ``branchpoint compare``."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from branchpoint.analysis.chatbots.ed_models import ed_model_comparison
from branchpoint.analysis.chatbots.ranking import rank_targets
from branchpoint.core.scales import PASS_PARTIAL_FAIL


@dataclass
class Chatbots:
    """``absent``: why there is nothing to show (one target; no scenario every target ran)."""

    targets: list[str]
    ranking: pd.DataFrame = field(default_factory=pd.DataFrame)
    ed_friedman: pd.DataFrame = field(default_factory=pd.DataFrame)
    ed_pairwise: pd.DataFrame = field(default_factory=pd.DataFrame)
    absent: str = ""


def _pass_partial_fail(judgments: pd.DataFrame) -> pd.DataFrame:
    """The rows of rubrics rated pass/partial/fail: a risk level is no failure and no pass, so
    an ED rating would only dilute a failure rate."""
    ppf = judgments["verdict"].isin(PASS_PARTIAL_FAIL.levels).to_numpy()
    rubrics = set(judgments["rubric_id"].unique())
    scaled = set(judgments.loc[ppf, "rubric_id"].unique())
    if rubrics <= scaled:  # the usual store: no copy of the table
        return judgments
    return judgments[judgments["rubric_id"].isin(scaled).to_numpy()]


def chatbot_summary(judgments: pd.DataFrame) -> Chatbots:
    """``judgments``: a judgment table with the fork tree (``parent_id``, ``fork_turn``)."""
    targets = (
        sorted(judgments["target"].dropna().astype(str).unique()) if not judgments.empty else []
    )
    if len(targets) < 2:
        one = f"one target ({targets[0]})" if targets else "no judged target"
        return Chatbots(targets, absent=f"{one} in the selected runs: no chatbots to compare")
    out = Chatbots(targets, rank_targets(_pass_partial_fail(judgments)))
    out.ed_friedman, out.ed_pairwise = ed_model_comparison(judgments)
    if out.ranking.empty and out.ed_pairwise.empty:
        out.absent = (
            f"{len(targets)} targets, but no scenario that every one of them ran with a rating "
            "(and no question every ED model answered): nothing to rank"
        )
    return out
