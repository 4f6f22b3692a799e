"""The report by language (issue 47), where the runs hold conversations in more than one.

A chatbot may hold its limits in English and drop them in Spanish; a pooled failure rate would
hide it. Per language: conversations, chatbot turns judged, and the share judged fail, per judge
and rubric (each judge apart: a model judge told the language and a rule-based judge that
refused it are different instruments). Conversations made before languages were recorded were
all English. Descriptive only: the designed contrasts are matched within a scenario, and every
scenario has one language.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
from sqlalchemy import case, func, select

from branchpoint.analysis.report.sections import Section
from branchpoint.core.read.schema import CONVERSATIONS, JUDGMENTS
from branchpoint.core.read.source import read_frame


def language_table(store_or_db: Any, runs: Sequence[str] | None) -> pd.DataFrame:
    """Per language x judge x rubric: conversations, ratings, share fail (errors counted apart)."""
    c, j = CONVERSATIONS.c, JUDGMENTS.c
    lang = func.coalesce(c.language, "en").label("language")
    convs_q = select(lang, func.count().label("conversations")).group_by(lang)
    q = (
        select(
            lang, j.judge, j.rubric_id,
            func.count().label("ratings"),
            func.sum(case((j.verdict == "fail", 1), else_=0)).label("fail"),
            func.sum(case((j.verdict == "error", 1), else_=0)).label("error"),
        )
        .join_from(JUDGMENTS, CONVERSATIONS, c.id == j.conversation_id)
        .where(j.applicable.is_(True), j.rubric_id.not_in(["enactment", "realism"]))
        .group_by(lang, j.judge, j.rubric_id)
    )  # fmt: skip
    if runs is not None:
        convs_q = convs_q.where(c.run_id.in_(list(runs)))
        q = q.where(c.run_id.in_(list(runs)))
    convs = read_frame(convs_q, store_or_db)
    rated = read_frame(q, store_or_db)
    if convs.empty:
        return pd.DataFrame()
    out = convs.merge(rated, on="language", how="left")
    rated_n = out["ratings"].fillna(0) - out["error"].fillna(0)
    out["share fail"] = (out["fail"].fillna(0) / rated_n.where(rated_n > 0)).round(3)
    return out.rename(columns={"rubric_id": "rubric"})


def language_sections(store_or_db: Any, runs: Sequence[str] | None) -> list[Section]:
    """The section, or nothing when every conversation is in one language."""
    table = language_table(store_or_db, runs)
    if table.empty or table["language"].nunique() < 2:
        return []
    return [
        Section(
            "By language",
            text=[
                "Conversations in each language, and the share of chatbot turns judged fail, per "
                "judge and rubric. Descriptive: each scenario has one language, so languages are "
                "compared across scenarios, not matched. The heuristic judge has rules for "
                "English only and refuses other languages; their ratings come from model judges, "
                "told the conversation's language."
            ],
            tables=[("Chatbot turns judged fail, by language", table)],
        )
    ]
