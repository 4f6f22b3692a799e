"""Which rater produced each persona figure, and how well it agrees with people (issue 47).

A realism or enactment figure means little without its rater: the offline rules
(``heuristic``) catch assistant-speak, word salad and copies, but not an implausible story, and
a model rater has its own biases. So every such figure in the report carries its rater and the
rater's kind, and, where people rated the same persona turns, the rater's agreement with them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from sqlalchemy import select

from branchpoint.analysis.raters.agreement import cohen_kappa_quadratic
from branchpoint.core.domain import ENACTMENT_LEVELS, ENACTMENT_RUBRIC
from branchpoint.core.read.realisation import HEURISTIC_RATER
from branchpoint.core.read.schema import CONVERSATIONS, HUMAN_LABELS, JUDGMENTS
from branchpoint.core.read.source import StoreRef, read_frame

HEURISTIC_KIND = "offline rules (heuristic)"
MODEL_KIND = "model"


def rater_kind(rater: str) -> str:
    """``offline rules (heuristic)`` for the rubric files' rules, ``model`` for a model spec."""
    return HEURISTIC_KIND if str(rater) == HEURISTIC_RATER else MODEL_KIND


def enactment_by_rater(ref: StoreRef, runs: Sequence[str] | None = None) -> pd.DataFrame:
    """Per rater: its kind, the manipulation checks it stored, the count at each level and of
    errors, the share enacted (enacted or partly, over rated), and its agreement with people's
    enactment labels of the same turns and branch points where there are any."""
    j, c = JUDGMENTS.c, CONVERSATIONS.c
    q = (
        select(j.judge.label("rater"), j.verdict, j.conversation_id, j.turn_index, j.criterion_id)
        .join_from(JUDGMENTS, CONVERSATIONS, c.id == j.conversation_id)
        .where(j.rubric_id == ENACTMENT_RUBRIC)
    )
    if runs is not None:
        q = q.where(c.run_id.in_(list(runs)))
    checks = read_frame(q, ref)
    cols = ["rater", "rater kind", "checks", *ENACTMENT_LEVELS, "error", "share enacted",
            "people's labels", "raw agreement", "kappa (quadratic)"]  # fmt: skip
    if checks.empty:
        return pd.DataFrame(columns=cols)
    human = _human_enactment(ref, runs)
    rows = []
    for rater, grp in checks.groupby("rater", sort=True):
        rated = grp[grp["verdict"].isin(ENACTMENT_LEVELS)]
        counts = {lv: int((rated["verdict"] == lv).sum()) for lv in ENACTMENT_LEVELS}
        share = (
            (counts[ENACTMENT_LEVELS[0]] + counts[ENACTMENT_LEVELS[1]]) / len(rated)
            if len(rated)
            else np.nan
        )
        n_both, raw, kappa = _agreement(rated, human)
        rows.append({
            "rater": rater, "rater kind": rater_kind(str(rater)), "checks": len(grp), **counts,
            "error": int(len(grp) - len(rated)), "share enacted": share,
            "people's labels": n_both, "raw agreement": raw, "kappa (quadratic)": kappa,
        })  # fmt: skip
    return pd.DataFrame(rows, columns=cols)


def _human_enactment(ref: StoreRef, runs: Sequence[str] | None) -> pd.DataFrame:
    h, c = HUMAN_LABELS.c, CONVERSATIONS.c
    q = (
        select(h.verdict, h.conversation_id, h.turn_index, h.criterion_id)
        .join_from(HUMAN_LABELS, CONVERSATIONS, c.id == h.conversation_id)
        .where(h.rubric_id == ENACTMENT_RUBRIC, h.verdict.in_(list(ENACTMENT_LEVELS)))
    )
    if runs is not None:
        q = q.where(c.run_id.in_(list(runs)))
    return read_frame(q, ref)


def _agreement(rated: pd.DataFrame, human: pd.DataFrame) -> tuple[int, float, float]:
    """Items both rated, raw agreement and quadratic kappa (NaN without any)."""
    if human.empty or rated.empty:
        return 0, np.nan, np.nan
    key = ["conversation_id", "turn_index", "criterion_id"]
    both = rated.merge(human, on=key, suffixes=("_auto", "_human"))
    if both.empty:
        return 0, np.nan, np.nan
    rank = {lv: float(i) for i, lv in enumerate(ENACTMENT_LEVELS)}
    a = np.array([rank[v] for v in both["verdict_auto"]])
    b = np.array([rank[v] for v in both["verdict_human"]])
    kappa = cohen_kappa_quadratic(a, b, labels=sorted(rank.values()))
    return len(both), float(np.mean(a == b)), kappa
