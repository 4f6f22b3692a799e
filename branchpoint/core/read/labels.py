"""Human labels as a table, on the same key as judgments (for agreement with the judges)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sqlalchemy import select

from branchpoint.core.human_labels import REALISM_RUBRIC
from branchpoint.core.read.schema import (
    CONVERSATIONS,
    HUMAN_LABELS,
    JUDGMENTS,
    LABEL_DESIGN_ITEMS,
    LABEL_DESIGNS,
)
from branchpoint.core.read.source import StoreRef, read_frame
from branchpoint.core.read.units import carriers, distinct_ratings, with_tree
from branchpoint.core.scales import ERROR

if TYPE_CHECKING:
    import pandas as pd


def human_label_rows(ref: StoreRef, runs: Sequence[str] | None = None) -> pd.DataFrame:
    """conversation_id, turn_id, turn_index, rubric_id, criterion_id, annotator, verdict."""
    h, c = HUMAN_LABELS.c, CONVERSATIONS.c
    q = select(
        h.conversation_id,
        h.turn_id,
        h.turn_index,
        h.rubric_id,
        h.criterion_id,
        h.annotator,
        h.verdict,
    ).join_from(HUMAN_LABELS, CONVERSATIONS, c.id == h.conversation_id)
    if runs is not None:
        q = q.where(c.run_id.in_(list(runs)))
    return read_frame(q, ref)


def design_label_rows(ref: StoreRef, runs: Sequence[str] | None = None) -> pd.DataFrame:
    """Criterion labels with what decides whether the judge-corrected estimators may use them:
    conversation_id, turn_index, rubric_id, criterion_id, annotator, verdict, blind, design_id
    (realism ratings left out)."""
    h, c = HUMAN_LABELS.c, CONVERSATIONS.c
    q = (
        select(
            h.conversation_id,
            h.turn_index,
            h.rubric_id,
            h.criterion_id,
            h.annotator,
            h.verdict,
            h.blind,
            h.design_id,
        )
        .join_from(HUMAN_LABELS, CONVERSATIONS, c.id == h.conversation_id)
        .where(h.rubric_id != REALISM_RUBRIC)
    )
    if runs is not None:
        q = q.where(c.run_id.in_(list(runs)))
    return read_frame(q, ref)


def label_design_rows(ref: StoreRef) -> pd.DataFrame:
    """The stored labelling designs: id, kind, settings (JSON), strata (JSON), created_at."""
    d = LABEL_DESIGNS.c
    return read_frame(select(d.id, d.kind, d.settings, d.strata, d.created_at), ref)


def label_design_item_rows(ref: StoreRef, designs: Sequence[str]) -> pd.DataFrame:
    """The items these designs drew: design_id, conversation_id, turn_index, rubric_id,
    criterion_id, stratum, inclusion_probability."""
    i = LABEL_DESIGN_ITEMS.c
    q = select(
        i.design_id,
        i.conversation_id,
        i.turn_index,
        i.rubric_id,
        i.criterion_id,
        i.stratum,
        i.inclusion_probability,
    ).where(i.design_id.in_(list(designs)))
    return read_frame(q, ref)


def judged_items(ref: StoreRef, runs: Sequence[str] | None = None) -> pd.DataFrame:
    """Every rated chatbot turn x criterion (applicable, a level, not ``error``), per judge, once
    however many arms carry it (``branchpoint.core.read.units.distinct_ratings``: the unit of
    analysis the rate tables count), with what the labelling designs stratify and cluster by:
    conversation_id (the arm that produced the turn), turn_index, rubric_id, rubric_hash,
    criterion_id, judge, prompt_version, verdict, created_at, run_id, scenario_id, target,
    condition and n_arms (how many arms carry the turn).

    Copies are resolved over every stored verdict before the unrated ones are dropped, as the
    rate tables resolve them: where a root's verdict is not applicable (or an error) and a copy's
    is rated, the unit is the root's, unrated, and no copy stands in for it."""
    j, c = JUDGMENTS.c, CONVERSATIONS.c
    q = (
        select(
            j.conversation_id,
            j.turn_index,
            j.rubric_id,
            j.rubric_hash,
            j.criterion_id,
            j.judge,
            j.prompt_version,
            j.applicable,
            j.verdict,
            j.created_at,
            c.run_id,
            c.scenario_id,
            c.target,
            c.condition,
        )
        .join_from(JUDGMENTS, CONVERSATIONS, c.id == j.conversation_id)
        .where(j.turn_index.is_not(None))
    )
    if runs is not None:
        q = q.where(c.run_id.in_(list(runs)))
    rows = with_tree(read_frame(q, ref), ref, runs)
    items = distinct_ratings(rows)
    items = items.assign(n_arms=carriers(rows, items))
    verdict = items["verdict"]
    rated = items["applicable"].fillna(False).astype(bool) & verdict.notna() & (verdict != ERROR)
    items = items[rated.to_numpy()]
    return items.drop(columns=["parent_id", "fork_turn", "applicable"]).reset_index(drop=True)
