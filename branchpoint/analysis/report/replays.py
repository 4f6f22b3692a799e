"""The report's list of replays (issue 47), apart from every designed contrast.

A replay (``branchpoint replay``) is a branch a person made by changing one persona message of a
stored conversation: a question a clinician asked of one transcript, not a sampled arm. It is
never counted in a contrast (``resolve_runs`` leaves replay runs out); the report lists the
replays of the runs it covers, each beside its original: where it forked, who made it, what was
said instead, and the chatbot turns judged failing after the fork in each.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pandas as pd
from sqlalchemy import func, select

from branchpoint.analysis.report.sections import Section
from branchpoint.core.domain import REPLAY_ORIGIN
from branchpoint.core.read.schema import CONVERSATIONS, JUDGMENTS, TURNS
from branchpoint.core.read.source import read_frame

MESSAGE_CHARS = 80


def _one_line(text: str) -> str:
    from branchpoint.simulator.transcript import safe_text

    flat = " ".join(safe_text(text or "").split())
    return flat if len(flat) <= MESSAGE_CHARS else flat[: MESSAGE_CHARS - 1] + "…"


def replay_table(store_or_db: Any, runs: Sequence[str] | None) -> pd.DataFrame:
    """One row per replay of ``runs`` (every run: None)."""
    c, t = CONVERSATIONS.c, TURNS.c
    convs = read_frame(
        select(c.id, c.parent_id, c.fork_turn, c.replay, c.status, c.n_turns).where(
            c.origin == REPLAY_ORIGIN
        ),
        store_or_db,
    )
    cols = ["replay", "original", "original run", "at turn", "annotator", "message instead",
            "turns", "status", "failing after fork (replay)", "failing after fork (original)"]  # fmt: skip
    if convs.empty:
        return pd.DataFrame(columns=cols)
    info = [json.loads(r) if isinstance(r, str) else (r or {}) for r in convs["replay"]]
    convs = convs.assign(
        parent_run=[i.get("parent_run_id") for i in info],
        annotator=[i.get("annotator") for i in info],
    )
    if runs is not None:
        convs = convs[convs["parent_run"].isin(list(runs))]
    if convs.empty:
        return pd.DataFrame(columns=cols)
    ids = [*convs["id"], *convs["parent_id"]]
    messages = read_frame(
        select(t.conversation_id, t.index, t.content).where(
            t.conversation_id.in_(list(convs["id"]))
        ),
        store_or_db,
    )
    said = {(r.conversation_id, int(r.index)): r.content for r in messages.itertuples()}
    j = JUDGMENTS.c
    fails = read_frame(
        select(j.conversation_id, j.turn_index, func.count().label("n"))
        .where(j.conversation_id.in_(ids), j.verdict == "fail")
        .group_by(j.conversation_id, j.turn_index),
        store_or_db,
    )
    rows = []
    for r in convs.itertuples():
        at = int(r.fork_turn)

        def failing(cid: str, at: int = at) -> int:
            mine = fails[(fails["conversation_id"] == cid) & (fails["turn_index"] > at)]
            return int(mine["n"].sum())

        rows.append({
            "replay": r.id, "original": r.parent_id, "original run": r.parent_run, "at turn": at,
            "annotator": r.annotator, "message instead": _one_line(said.get((r.id, at), "")),
            "turns": int(r.n_turns), "status": r.status,
            "failing after fork (replay)": failing(r.id),
            "failing after fork (original)": failing(r.parent_id),
        })  # fmt: skip
    return pd.DataFrame(rows, columns=cols)


def replay_sections(store_or_db: Any, runs: Sequence[str] | None) -> list[Section]:
    """The replays section, or nothing when no replay was made of these runs."""
    table = replay_table(store_or_db, runs)
    if table.empty:
        return []
    return [
        Section(
            "Replays (not in any contrast)",
            text=[
                "Branches a person made by sending another persona message at a stored turn "
                "(`branchpoint replay`): the same target, params, condition and seeds, a live "
                "call. Each is one clinician's question of one transcript, not a sampled arm: "
                "no contrast, rate or interval above counts them. Failing: the chatbot turns "
                "after the fork judged fail (any judge), in the replay and in its original."
            ],
            tables=[("Replays beside their originals", table)],
        )
    ]
