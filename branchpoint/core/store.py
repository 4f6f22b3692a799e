"""Opening the store: a SQLite file (WAL mode) by default, or any SQLAlchemy URL (PostgreSQL).

Use ``open_store(path_or_url)``; it creates the tables on a new store, refuses a store written by a
newer branchpoint, and upgrades an older one through ``branchpoint.core.migrations``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError
from sqlalchemy.pool import ConnectionPoolEntry
from sqlmodel import Session, SQLModel, create_engine, select

from branchpoint.core import migrations, records
from branchpoint.core.errors import StoreError
from branchpoint.core.records import SCHEMA_VERSION, SchemaInfo

DEFAULT_DB = "branchpoint.db"


def resolve_url(db: str | os.PathLike[str] | None) -> str:
    """``--db`` value, else ``$BRANCHPOINT_DB``, else ``./branchpoint.db``; paths become sqlite URLs."""
    value = str(db) if db is not None else os.environ.get("BRANCHPOINT_DB", DEFAULT_DB)
    if "://" in value:
        return value
    return f"sqlite:///{Path(value).expanduser().resolve()}"


def _sqlite_pragmas(dbapi_conn: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
    cur = dbapi_conn.cursor()
    # WAL lets readers (the TUI, analysis) work while a run writes; NORMAL sync is safe under WAL.
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA busy_timeout=30000")
    cur.close()


class Store:
    def __init__(self, url: str, engine: Engine) -> None:
        self.url = url
        self.engine = engine

    @contextmanager
    def session(self) -> Iterator[Session]:
        with Session(self.engine, expire_on_commit=False) as s:
            yield s

    def schema_version(self) -> int:
        with self.session() as s:
            row = s.get(SchemaInfo, "schema_version")
            return int(row.value) if row else 0

    def close(self) -> None:
        self.engine.dispose()

    def __repr__(self) -> str:
        return f"Store({redact_url(self.url)!r})"


def redact_url(url: str) -> str:
    """Hide a password in a database URL before it is printed or stored."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return url


def open_store(db: str | os.PathLike[str] | None = None, *, create: bool = True) -> Store:
    url = resolve_url(db)
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        if not path.exists() and not create:
            raise StoreError(f"{path}: no such store (run `branchpoint run` first, or pass --db)")
        path.parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
    else:
        try:
            engine = create_engine(url, pool_pre_ping=True)
        except (ArgumentError, NoSuchModuleError, ImportError) as exc:
            raise StoreError(
                f"{redact_url(url)}: not a usable database URL ({_first_line(exc)}); "
                "for PostgreSQL install psycopg and use postgresql+psycopg://USER@HOST/DB"
            ) from None
    store = Store(url, engine)
    try:
        _prepare(store)
    except OperationalError as exc:
        store.close()
        raise StoreError(
            f"{redact_url(url)}: cannot open the store: {_first_line(exc.orig or exc)}"
        ) from None
    return store


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _prepare(store: Store) -> None:
    assert records  # the import registers every table on SQLModel.metadata
    SQLModel.metadata.create_all(store.engine)
    with store.session() as s:
        row = s.get(SchemaInfo, "schema_version")
        if row is None:
            has_data = s.exec(select(records.Run.id).limit(1)).first() is not None
            version = 0 if has_data else SCHEMA_VERSION
            s.add(SchemaInfo(key="schema_version", value=str(version)))
            s.commit()
            current = version
        else:
            current = int(row.value)
    if current > SCHEMA_VERSION:
        raise StoreError(
            f"{redact_url(store.url)}: store schema version {current} is newer than this "
            f"branchpoint understands ({SCHEMA_VERSION}); upgrade branchpoint"
        )
    if current < SCHEMA_VERSION:
        migrations.upgrade(store.engine, current)
    if store.engine.dialect.name == "sqlite":  # a new store's (a migrated one has them already)
        from branchpoint.core import judgment_summaries

        with store.engine.begin() as conn:
            judgment_summaries.ensure(conn, str(store.engine.url.database))
