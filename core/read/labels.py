"""Human labels as a table, on the same key as judgments (for agreement with the judges)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sqlalchemy import select

from core.read.schema import CONVERSATIONS, HUMAN_LABELS
from core.read.source import StoreRef, read_frame

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
