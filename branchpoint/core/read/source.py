"""Where a read goes, and how a query built with SQLAlchemy is run there.

A SQLite store is read through the standard ``sqlite3`` module in read-only mode: it cannot write
to (or lock) a store that a sweep is writing, and pandas gets the raw column values without
SQLAlchemy's per-row result processing, which matters at millions of rows. The query is still a
SQLAlchemy statement, compiled for SQLite here. Any other database (PostgreSQL) is read through
the store's engine.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, TypeAlias

from sqlalchemy.engine import Engine

from branchpoint.core.read.sqlite_file import Query, compile_sqlite, readonly_sqlite
from branchpoint.core.store import Store, open_store, resolve_url

if TYPE_CHECKING:
    import pandas as pd

# A store, a path to a SQLite file, or a database URL: what ``--db`` and the Python API accept.
StoreRef: TypeAlias = Store | str | os.PathLike[str]


def sqlite_path(ref: StoreRef) -> str | None:
    """The file behind a store, a path or a sqlite URL; None for other databases."""
    url = ref.url if isinstance(ref, Store) else resolve_url(ref)
    if url.startswith("sqlite:///"):
        return url.removeprefix("sqlite:///")
    return None


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
