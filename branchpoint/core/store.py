"""Opening the store: a SQLite file (WAL mode) by default, or any SQLAlchemy URL (PostgreSQL).

Use ``open_store(path_or_url)``; it creates the tables on a new store, refuses a store written by a
newer branchpoint, and upgrades an older one through ``branchpoint.core.migrations``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.exc import (
    ArgumentError,
    DatabaseError,
    DBAPIError,
    IntegrityError,
    NoSuchModuleError,
    OperationalError,
    ProgrammingError,
)
from sqlalchemy.pool import ConnectionPoolEntry
from sqlmodel import Session, SQLModel, create_engine, select

from branchpoint.core import migrations, records
from branchpoint.core.errors import StoreError
from branchpoint.core.records import SCHEMA_VERSION, SchemaInfo

DEFAULT_DB = "branchpoint.db"
# tries at creating a new store's tables while another process creates them too
_CREATE_TRIES = 5
_opened: list[str] = []  # the URL of the store this process opened last (failure lines name it)


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
        _prepare_beside_other_creators(store)
    except OperationalError as exc:
        store.close()
        raise StoreError(
            f"{redact_url(url)}: cannot open the store: {_first_line(exc.orig or exc)}"
        ) from None
    except DatabaseError as exc:
        store.close()
        if type(exc) is not DatabaseError:  # an integrity or programming error: a bug, not input
            raise
        raise StoreError(not_a_store(url, exc)) from None
    _opened[:] = [url]
    return store


def not_a_store(url: str, exc: DatabaseError) -> str:
    """One line for a file that is not a readable store (a text file, a truncated database)."""
    return (
        f"{redact_url(url)}: not a readable branchpoint store ({_first_line(exc.orig or exc)}); "
        "expected a store made by branchpoint (or a new path)"
    )


def store_failure(exc: BaseException) -> tuple[str, int] | None:
    """The one line and the exit status for a command that ``exc`` ended, when it is the store's
    failure: 2 where the file is not a readable store (``malformed``, ``not a database``), 1
    where the store went away or could not write (connection lost, disk full); None otherwise.
    Looks through exception groups and the chain of causes (a handler that failed against the
    same dead store raises a second error whose context is the first)."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop(0)
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, DBAPIError):
            reason = _first_line(current.orig or current)
            if type(current) is DatabaseError:
                url = _opened[0] if _opened else "the store"
                return f"error: {not_a_store(url, current)}", 2
            if isinstance(current, OperationalError) or current.connection_invalidated:
                return (
                    f"store unavailable: {reason}; run the same command again to continue",
                    1,
                )
            return None  # an integrity or programming error: a bug, shown in full
        if isinstance(current, BaseExceptionGroup):
            pending.extend(current.exceptions)
        pending.extend([current.__cause__, current.__context__])
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _prepare_beside_other_creators(store: Store) -> None:
    """``_prepare``, tolerating a process that creates the same new store at the same moment:
    its ``CREATE TABLE`` (or schema row) lands between this one's look and its own, which then
    fails with "already exists"; looked at again, the tables are there."""
    for tries in range(1, _CREATE_TRIES + 1):
        try:
            _prepare(store)
            return
        except (OperationalError, IntegrityError, ProgrammingError) as exc:
            said = str(exc.orig or exc).lower()
            raced = "already exists" in said or "duplicate" in said or "unique" in said
            if not raced or tries == _CREATE_TRIES:
                raise
            time.sleep(0.05 * tries)


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
