"""Where a read goes, and how a query built with SQLAlchemy is run there.

A SQLite store is read through the standard ``sqlite3`` module in read-only mode: it cannot write
to (or lock) a store that a sweep is writing, and pandas gets the raw column values without
SQLAlchemy's per-row result processing, which matters at millions of rows. The query is still a
SQLAlchemy statement, compiled for SQLite here. Any other database (PostgreSQL) is read through
the store's engine.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias

from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import Engine
from sqlalchemy.sql import Select

from core.store import Store, StoreError, open_store, resolve_url

if TYPE_CHECKING:
    import pandas as pd

# A store, a path to a SQLite file, or a database URL: what ``--db`` and the Python API accept.
StoreRef: TypeAlias = Store | str | os.PathLike[str]
# A SELECT of any columns (SQLAlchemy types a select by the tuple of its columns).
Query: TypeAlias = Select[*tuple[Any, ...]]

_SQLITE = sqlite.dialect(paramstyle="qmark")
_PARAM_TYPES = (str, int, float, bytes, type(None))  # what sqlite3 binds as is (bool is an int)


def sqlite_path(ref: StoreRef) -> str | None:
    """The file behind a store, a path or a sqlite URL; None for other databases."""
    url = ref.url if isinstance(ref, Store) else resolve_url(ref)
    if url.startswith("sqlite:///"):
        return url.removeprefix("sqlite:///")
    return None


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


def execute_sqlite(conn: sqlite3.Connection, stmt: Query, dialect: Any = _SQLITE) -> Any:
    """Run a statement on a sqlite3 connection; returns the cursor."""
    return conn.execute(*compile_sqlite(stmt, dialect))


@contextmanager
def engine_of(ref: StoreRef) -> Iterator[Engine]:
    """The store's engine; a store opened from a URL for this read is closed afterwards."""
    if isinstance(ref, Store):
        yield ref.engine
        return
    store = open_store(ref, create=False)
    try:
        yield store.engine
    finally:
        store.close()


def read_frame(stmt: Query, ref: StoreRef) -> pd.DataFrame:
    """The rows of ``stmt`` as a DataFrame, one column per selected (labelled) column."""
    import pandas as pd

    path = sqlite_path(ref)
    if path is not None:
        sql, params = compile_sqlite(stmt)
        conn = readonly_sqlite(path)
        try:
            return pd.read_sql_query(sql, conn, params=params)
        finally:
            conn.close()
    with engine_of(ref) as engine, engine.connect() as connection:
        return pd.read_sql_query(stmt, connection)


def iter_sqlite_frames(stmt: Query, path: str, chunksize: int) -> Iterator[pd.DataFrame]:
    """The rows of ``stmt`` from a SQLite file, ``chunksize`` rows at a time (bounded memory)."""
    import pandas as pd

    sql, params = compile_sqlite(stmt)
    conn = readonly_sqlite(path)
    try:
        yield from pd.read_sql_query(sql, conn, params=params, chunksize=chunksize)
    finally:
        conn.close()
