"""Which branch options were realised: derived from the stored persona turns, never stored apart.

An arm's option at a branch point is *realised* when the branch point fired and the option's
instruction was in force for at least one persona turn. The engine writes both facts on every
persona turn it stores (``Turn.fired``: the branch points that fired for it, ``Turn.branch_state``:
the option in force at each), so realisation is a pure function of the transcript. Deriving it
here rather than writing a column keeps it true to the transcript whatever happens to a run
(resumed, re-forked, written by an older version: every store ever written can answer), needs no
write-path change and no migration, and cannot disagree with the turns it summarises. The read
touches only persona turns on which something fired: a few per conversation.

    frame = realisation_rows("results.db", ["run-1"])
    # conversation_id, branch_point, option, realised, exchange (None when not realised), recorded

``enactment`` (issue 36) is the manipulation check of the persona turn on which the option came
into force: ``enacted``, ``partly`` or ``not_enacted`` as rated by ``branchpoint.judges.persona_checks``
(judgment rows under rubric ``enactment``, criterion = the branch point), or None when that turn
was not rated (or the rater could not tell). ``error`` when every rating of that turn is an error
(a rater that could not answer): never counted as enacted. Where several raters rated it, a
verdict beats an error, and a model rater's verdict is preferred to the offline heuristic's (the
first by name, so the choice is stable); of one rater's ratings (it rated again after its rubric
changed), the newest.

``recorded`` is False for the conversations of a run none of whose persona turns records a firing:
a store written by something other than the engine (or by a tool that leaves ``fired`` empty)
says nothing about realisation, which is not the same as saying nothing was realised.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from sqlalchemy import String, cast, select

from branchpoint.core.domain import ENACTMENT_LEVELS, ENACTMENT_RUBRIC, is_branch_key
from branchpoint.core.read.schema import CONVERSATIONS, JUDGMENTS, TURNS
from branchpoint.core.read.source import StoreRef, read_frame
from branchpoint.core.scales import ERROR

if TYPE_CHECKING:
    import pandas as pd

REALISATION_COLUMNS = [
    "conversation_id", "branch_point", "option", "realised", "exchange", "recorded", "enactment",
]  # fmt: skip
HEURISTIC_RATER = "heuristic"


class Realisation(NamedTuple):
    branch_point: str
    option: str
    realised: bool
    exchange: int | None  # the first exchange whose persona turn had the option in force


class FiredTurn(NamedTuple):
    """What realisation needs of one persona turn."""

    exchange: int
    fired: Sequence[str]
    branch_state: Mapping[str, Any]


def realised_branches(choices: Mapping[str, Any], turns: Iterable[FiredTurn]) -> list[Realisation]:
    """For each branch point in ``choices``: was its chosen option realised, and where first.

    ``turns``: the conversation's persona turns (those with nothing fired may be left out). A turn
    counts for branch point B when B fired for it and B's option in force there is the arm's own.
    """
    first: dict[str, int] = {}
    for turn in turns:
        for bp in turn.fired or ():
            chosen = choices.get(bp)
            if chosen is None or turn.branch_state.get(bp) != chosen:
                continue
            if bp not in first or turn.exchange < first[bp]:
                first[bp] = int(turn.exchange)
    return [
        Realisation(str(bp), str(option), bp in first, first.get(bp))
        for bp, option in choices.items()
        if is_branch_key(str(bp)) and option is not None
    ]


def _parsed(value: Any, empty: Any) -> Any:
    # JSON columns come back as text from the raw SQLite read, parsed from other databases.
    if value is None:
        return empty
    if isinstance(value, str):
        return json.loads(value) if value else empty
    return value


def realisation_rows(ref: StoreRef, runs: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per conversation x branch point (``REALISATION_COLUMNS``), for ``runs`` or all."""
    import pandas as pd

    c, t = CONVERSATIONS.c, TURNS.c
    convs = select(c.id.label("conversation_id"), c.run_id, c.choices)
    fired = (
        select(t.conversation_id, c.run_id, t.exchange, t.fired, t.branch_state)
        .join_from(TURNS, CONVERSATIONS, c.id == t.conversation_id)
        .where(t.role == "user", cast(t.fired, String) != "[]", t.fired.is_not(None))
    )
    if runs is not None:
        convs = convs.where(c.run_id.in_(list(runs)))
        fired = fired.where(c.run_id.in_(list(runs)))
    # In id order: without it each database returns its own order (PostgreSQL's heap order
    # differed from SQLite's, and the arm export with it).
    convs = convs.order_by(c.id)
    fired = fired.order_by(t.conversation_id, t.exchange)
    conv_frame = read_frame(convs, ref)
    turn_frame = read_frame(fired, ref)
    by_conv: dict[str, list[FiredTurn]] = {}
    recorded: set[str] = set()
    for cid, run_id, exchange, fired_v, state in turn_frame.itertuples(index=False, name=None):
        turn = FiredTurn(int(exchange), _parsed(fired_v, []), _parsed(state, {}))
        if turn.fired:
            recorded.add(run_id)
        by_conv.setdefault(cid, []).append(turn)
    checks = _enactment_checks(ref, runs)
    rows = [
        (cid, *r, run_id in recorded, checks.get((cid, r.branch_point, r.exchange)))
        for cid, run_id, choices in conv_frame.itertuples(index=False, name=None)
        for r in realised_branches(_parsed(choices, {}), by_conv.get(cid, ()))
    ]
    out = pd.DataFrame(rows, columns=REALISATION_COLUMNS)
    out["exchange"] = out["exchange"].astype("Int64")
    out["realised"] = out["realised"].astype(bool)
    out["recorded"] = out["recorded"].astype(bool)
    out["enactment"] = out["enactment"].astype(object)
    return out


def _enactment_checks(
    ref: StoreRef, runs: Sequence[str] | None
) -> dict[tuple[str, str, int | None], str]:
    """(conversation, branch point, exchange) -> the manipulation check's verdict there."""
    j, c, t = JUDGMENTS.c, CONVERSATIONS.c, TURNS.c
    q = (
        select(
            j.conversation_id, j.criterion_id, t.exchange, j.judge, j.verdict, j.created_at, j.id
        )
        .join_from(JUDGMENTS, CONVERSATIONS, c.id == j.conversation_id)
        .join(TURNS, t.id == j.turn_id)
        .where(j.rubric_id == ENACTMENT_RUBRIC, j.verdict.in_([*ENACTMENT_LEVELS, ERROR]))
    )
    if runs is not None:
        q = q.where(c.run_id.in_(list(runs)))
    frame = read_frame(q, ref)
    # Oldest first, so that of one rater's ratings of a turn the newest is seen last and wins.
    frame = frame.sort_values(["created_at", "id"], kind="stable")
    best: dict[tuple[str, str, int | None], tuple[tuple[bool, bool, str], str]] = {}
    for cid, bp, exchange, judge, verdict, _at, _id in frame.itertuples(index=False, name=None):
        key = (str(cid), str(bp), int(exchange))
        # A verdict before an error, then model raters before the heuristic, then by name.
        rank = (verdict == ERROR, judge == HEURISTIC_RATER, str(judge))
        if key not in best or rank <= best[key][0]:
            best[key] = (rank, str(verdict))
    return {k: v for k, (_rank, v) in best.items()}
