"""A SQLite store read through the standard ``sqlite3`` module: a read-only connection and a
SQLAlchemy query compiled for it. It sits below ``branchpoint.core.store`` (it needs no store object), so
the store's own judgment summaries (``branchpoint.core.judgment_summaries``) can read with it."""

from __future__ import annotations

import os
import sqlite3
from typing import Any, NamedTuple, TypeAlias

from sqlalchemy.dialects import sqlite
from sqlalchemy.sql import Select

from branchpoint.core.errors import StoreError

# A SELECT of any columns (SQLAlchemy types a select by the tuple of its columns).
Query: TypeAlias = Select[*tuple[Any, ...]]

_SQLITE = sqlite.dialect(paramstyle="qmark")
_PARAM_TYPES = (str, int, float, bytes, type(None))  # what sqlite3 binds as is (bool is an int)


def readonly_sqlite(path: str) -> sqlite3.Connection:
    """A read-only connection to an existing SQLite store, usable from any thread."""
    if not os.path.exists(path):
        raise StoreError(f"{path}: no such store (run `branchpoint run` first, or pass --db)")
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    # A writer holds the lock only briefly under WAL; wait for it rather than fail.
    conn.execute("PRAGMA busy_timeout=30000")
    return conn


class SQLiteQuery(NamedTuple):
    """A statement compiled once for SQLite, to run many times with other bound values."""

    sql: str
    names: tuple[str, ...]  # bound parameters in placeholder order
    values: dict[str, Any]  # the values the statement was built with

    def params(self, **values: Any) -> tuple[Any, ...]:
        out = tuple(values[n] if n in values else self.values[n] for n in self.names)
        for value in out:
            # Raw sqlite3 runs no SQLAlchemy bind processing: only values it stores as given pass.
            if not isinstance(value, _PARAM_TYPES):
                raise TypeError(f"cannot bind {type(value).__name__} in a raw SQLite read")
        return out


def prepare_sqlite(stmt: Query, dialect: Any = _SQLITE) -> SQLiteQuery:
    """SQL text with ``?`` placeholders (IN lists expanded) for a sqlite3 cursor."""
    compiled = stmt.compile(dialect=dialect, compile_kwargs={"render_postcompile": True})
    return SQLiteQuery(str(compiled), tuple(compiled.positiontup or ()), dict(compiled.params))


def compile_sqlite(stmt: Query, dialect: Any = _SQLITE) -> tuple[str, tuple[Any, ...]]:
    """SQL text with ``?`` placeholders and its parameters."""
    query = prepare_sqlite(stmt, dialect)
    return query.sql, query.params()
