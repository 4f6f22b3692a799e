"""INSERT ... ON CONFLICT statements for SQLite and PostgreSQL, one object per table and dialect.

A bulk write (the gateway's write-behind rows, an imported labels file) sends its rows through
one executemany of one of these: an ORM merge per row costs a SELECT and an object each.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.sql.expression import Executable

_UPSERTS: dict[tuple[str, str, tuple[str, ...]], Executable] = {}


def upsert(dialect: str, table: Any, keys: list[str], columns: list[str]) -> Executable:
    """INSERT that updates ``columns`` (or, with none, keeps the row) where ``keys`` exist; one
    statement object per table and dialect, so that a group's rows share one executemany."""
    slot = (dialect, table.name, tuple(columns))
    stmt = _UPSERTS.get(slot)
    if stmt is None:
        if dialect == "postgresql":
            from sqlalchemy.dialects.postgresql import insert
        else:
            from sqlalchemy.dialects.sqlite import insert  # type: ignore[assignment]
        base = insert(table)
        stmt = (
            base.on_conflict_do_update(
                index_elements=keys, set_={c: getattr(base.excluded, c) for c in columns}
            )
            if columns
            else base.on_conflict_do_nothing(index_elements=keys)
        )
        _UPSERTS[slot] = stmt
    return stmt
