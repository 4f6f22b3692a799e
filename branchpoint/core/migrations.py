"""Schema migrations, applied in order when an older store is opened.

Each entry upgrades from version N to N+1. Add one (and bump ``records.SCHEMA_VERSION``) for every
change to ``branchpoint/core/records.py`` that an existing store would not pick up from ``create_all``.
Migrations take an engine, not the Store, so that the store module imports this one and not the
other way round.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlalchemy import inspect, text
from sqlalchemy.engine import Engine
from sqlmodel import Session, SQLModel

from branchpoint.core.records import (
    JUDGMENT_FAILING_COLUMNS,
    JUDGMENT_FAILING_INDEX,
    JUDGMENT_FAILURE_INDEX,
    SCHEMA_VERSION,
    SchemaInfo,
    SpendReservation,
)

Migration = Callable[[Session], None]

# version N -> the function that upgrades a store at N to N+1.
MIGRATIONS: dict[int, Migration] = {
    # 0 is a store made before schema versions were written; its tables match version 1.
    0: lambda session: None,
    1: lambda session: _add_columns(
        session, "runs", {"owner": "VARCHAR", "heartbeat_at": "TIMESTAMP"}
    ),
    2: lambda session: _add_columns(
        session,
        "human_labels",
        {"time_spent_s": "FLOAT", "blind": "BOOLEAN", "confidence": "VARCHAR"},
    ),
    3: lambda session: _add_index(session, JUDGMENT_FAILURE_INDEX, ("conversation_id", "verdict")),
    # model calls store their messages as references (ModelCall.prompt); older rows keep theirs
    4: lambda session: _add_columns(session, "model_calls", {"prompt": "JSON"}),
    5: lambda session: _add_index(session, JUDGMENT_FAILING_INDEX, JUDGMENT_FAILING_COLUMNS),
    # labels made from a stored labelling design say so (branchpoint.core.human_labels); older ones are
    # outside any design, which is what they were
    6: lambda session: _add_columns(session, "human_labels", {"design_id": "VARCHAR"}),
    # spend_reservations (issue 33): a priced call's bound, durable before it is sent. The
    # table itself is create_all's; the version is bumped so that an older branchpoint, which
    # would not count the unsettled ones and so undercount a crashed sweep's spend, refuses
    # the store instead of resuming its budget from too low a figure.
    7: lambda session: _create_table(session, SpendReservation),
    # judgment summaries (issue 37): per conversation x rating key x criterion, one verdict byte
    # per turn, kept by triggers, so that the analysis of a store with forks need not read every
    # judgment row. SQLite only (PostgreSQL aggregates with SQL): filled here from the rows.
    8: lambda session: _judgment_summaries(session),
    # replays (issue 47): a conversation forked by a person at a persona turn says so, and who
    # did it; every older conversation was designed, which NULL means
    # (and an adaptive persona's turn stores the tactic it chose and why)
    9: lambda session: _replays_and_plans(session),
    # cached input tokens (issue 45): what a provider's prompt cache served, per call; older
    # rows stay None (not reported), never 0 (none served)
    10: lambda session: _add_columns(
        session, "model_calls", {"tokens_cached": "INTEGER", "tokens_cache_write": "INTEGER"}
    ),
}


def _replays_and_plans(session: Session) -> None:
    _add_columns(
        session, "conversations", {"origin": "VARCHAR", "replay": "JSON", "language": "VARCHAR"}
    )
    _add_columns(session, "turns", {"persona_plan": "JSON"})


def _judgment_summaries(session: Session) -> None:
    from branchpoint.core import judgment_summaries

    conn = session.connection()
    if conn.dialect.name != "sqlite":
        return
    path = conn.engine.url.database
    assert path  # a file store: in-memory SQLite is not a store
    judgment_summaries.backfill(conn, path)


def _create_table(session: Session, model: type[SQLModel]) -> None:
    model.__table__.create(session.connection(), checkfirst=True)  # type: ignore[attr-defined]


def _add_index(session: Session, name: str, columns: tuple[str, ...]) -> None:
    # IF NOT EXISTS: create_all has made it already when the table itself was new
    session.execute(text(f"CREATE INDEX IF NOT EXISTS {name} ON judgments ({', '.join(columns)})"))


def _add_columns(session: Session, table: str, columns: dict[str, str]) -> None:
    # create_all may already have made the table with these columns (a table that the old store
    # lacked entirely), and a second ALTER would fail.
    present = {c["name"] for c in inspect(session.connection()).get_columns(table)}
    for name, sql_type in columns.items():
        if name in present:
            continue
        session.execute(text(f"ALTER TABLE {table} ADD COLUMN {name} {sql_type}"))


def upgrade(engine: Engine, current: int) -> None:
    with Session(engine) as s:
        for version in range(current, SCHEMA_VERSION):
            MIGRATIONS[version](s)
            row = s.get(SchemaInfo, "schema_version") or SchemaInfo(key="schema_version", value="")
            row.value = str(version + 1)
            s.add(row)
            s.commit()
