"""Store writes off the event loop: one writer thread per store, committing small groups.

The engine's loop only queues writes (Core statements with their parameters); a thread takes
everything queued, runs it in one transaction (rows of one statement in one executemany) and
commits. A write that the engine must know is durable before it goes on (a turn: the crash
guarantee is that a stored turn is never made twice) is awaited: its future resolves after the
commit that holds it, or handed back as a future (``committed``) for the engine to await later.
Other writes (a model call's row, also its cache entry) are not awaited: a crash loses at most
those of the calls in flight, whose turns are not stored either, and ``drain`` (which the end of
a run awaits) makes sure none is left. Writes commit in the order they were queued: what a
crash leaves is the queue up to some point, less any write that failed.

Statements run in a fixed order inside a transaction (conversations before turns: the foreign
key), and a group that fails is retried one write at a time, so one bad row fails only its own
write. A failed write that nobody awaited is raised by the next ``drain``.
"""

from __future__ import annotations

import asyncio
import queue
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection
    from sqlalchemy.sql import Executable

    from branchpoint.core.store import Store

# Statement ranks inside one transaction: a conversation row before the turns that refer to it.
RANK_CONVERSATION, RANK_SPLIT, RANK_TURN, RANK_PROGRESS = 0, 1, 2, 3
RANK_PROMPT_TEXT, RANK_MODEL_CALL = 4, 5
# a priced call's write-ahead reservation, and its settling (in its call row's transaction)
RANK_RESERVATION, RANK_SETTLE = 6, 7

MAX_GROUP = 512  # writes per transaction: small enough that one commit stays short
LINGER_S = 0.003
IDLE_EXIT_S = 2.0  # an idle thread ends (a later write starts another): tests open many stores


@dataclass
class Write:
    """Statements to run in order, as one unit; ``rank`` orders units' statements in a group."""

    ops: list[tuple[int, Executable, list[dict[str, Any]]]]
    notify: Callable[[BaseException | None], None] | None = None  # told; the failure stays
    future: asyncio.Future[None] | None = None  # settled with the outcome; takes over a failure


@dataclass
class _State:
    pending: int = 0
    errors: list[BaseException] = field(default_factory=list)
    idle: threading.Condition = field(default_factory=threading.Condition)


class BatchWriter:
    """The write-behind queue of one store; ``shared_writer(store)`` gives the process's one."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._queue: queue.SimpleQueue[list[Write]] = queue.SimpleQueue()
        self._buffer: list[Write] = []  # written during this turn of the event loop
        self._state = _State()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.commits = 0  # transactions committed: what the benchmark and tests read
        self.writes = 0

    # -- queueing, from the event loop -------------------------------------------------------------

    def submit(self, write: Write) -> None:
        with self._state.idle:
            self._state.pending += 1
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None:
            self._queue.put([write])
            self._ensure_thread()
            return
        # Handing the thread work costs a wake-up and a GIL switch: the writes of one turn of
        # the event loop go over together.
        self._buffer.append(write)
        if len(self._buffer) == 1:
            loop.call_soon(self._hand_over)

    def _hand_over(self) -> None:
        writes, self._buffer = self._buffer, []
        if writes:
            self._queue.put(writes)
            self._ensure_thread()

    def send(
        self,
        ops: Sequence[tuple[int, Executable, list[dict[str, Any]]]],
        notify: Callable[[BaseException | None], None] | None = None,
    ) -> None:
        """Queue ``ops`` without waiting; a failure surfaces at the next ``drain``. ``notify``
        is called (on the writer's thread) with the outcome once they are committed or failed."""
        self.submit(Write(list(ops), notify=notify))

    async def write(self, ops: Sequence[tuple[int, Executable, list[dict[str, Any]]]]) -> None:
        """Queue ``ops`` and return once they are committed (raise what their commit raised)."""
        await asyncio.shield(self.committed(ops))

    def committed(
        self, ops: Sequence[tuple[int, Executable, list[dict[str, Any]]]]
    ) -> asyncio.Future[None]:
        """Queue ``ops``; the future resolves once they are committed (or fails as they did)."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.submit(Write(list(ops), future=future))
        return future

    async def drain(self) -> None:
        """Wait until everything queued so far is committed; raise a failed unawaited write."""
        await asyncio.to_thread(self.wait_idle)
        errors, self._state.errors = self._state.errors, []
        if errors:
            raise errors[0]

    def wait_idle(self) -> None:
        with self._state.idle:
            self._state.idle.wait_for(lambda: self._state.pending == 0)

    # -- the thread --------------------------------------------------------------------------------

    def _ensure_thread(self) -> None:
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._loop, name="branchpoint-store-writer", daemon=True
                )
                self._thread.start()

    def _loop(self) -> None:
        while True:
            try:
                first = self._queue.get(timeout=IDLE_EXIT_S)
            except queue.Empty:
                with self._lock:
                    if self._queue.empty():
                        self._thread = None
                        return
                continue
            group = list(first)
            if self._queue.empty():
                # Each commit costs; waiting a moment for the writes of other conversations
                # makes fewer, larger ones (a turn's wait grows by this, its call's by nothing).
                time.sleep(LINGER_S)
            while len(group) < MAX_GROUP:
                try:
                    group += self._queue.get_nowait()
                except queue.Empty:
                    break
            self._commit_group(group)

    def _commit_group(self, group: list[Write]) -> None:
        outcomes: list[BaseException | None]
        try:
            with self.store.engine.begin() as conn:
                _execute(conn, group)
            self.commits += 1
            outcomes = [None] * len(group)
        except Exception:  # one bad write: find it, let the others through
            outcomes = []
            for write in group:
                try:
                    with self.store.engine.begin() as conn:
                        _execute(conn, [write])
                    self.commits += 1
                    outcomes.append(None)
                except Exception as exc:
                    outcomes.append(exc)
        # one wake-up of each waiting loop for the whole group, not one per awaited write
        settle: dict[asyncio.AbstractEventLoop, list[tuple[Any, BaseException | None]]] = {}
        for write, outcome in zip(group, outcomes, strict=True):
            if write.notify is not None:
                write.notify(outcome)
            if write.future is not None:
                settle.setdefault(write.future.get_loop(), []).append((write.future, outcome))
            elif outcome is not None:
                self._state.errors.append(outcome)
        for loop, settled in settle.items():
            try:
                loop.call_soon_threadsafe(_settle_all, settled)
            except RuntimeError:  # that loop is closed: nobody is left to wait
                pass
        self.writes += len(group)
        with self._state.idle:
            self._state.pending -= len(group)
            self._state.idle.notify_all()


def _execute(conn: Connection, group: list[Write]) -> None:
    merged: dict[tuple[int, int], tuple[Executable, list[dict[str, Any]]]] = {}
    for write in group:
        for rank, stmt, rows in write.ops:
            slot = merged.setdefault((rank, id(stmt)), (stmt, []))
            slot[1].extend(rows)
    for _, (stmt, rows) in sorted(merged.items(), key=lambda kv: kv[0][0]):
        if not rows:
            continue
        plan = _driver_plan(stmt, conn.dialect, tuple(rows[0]))
        if plan is None:
            conn.execute(stmt, rows)
            continue
        try:
            params = [plan.row(r) for r in rows]
        except KeyError:  # rows of different keys: SQLAlchemy says which is missing
            conn.execute(stmt, rows)
            continue
        conn.exec_driver_sql(plan.sql, params)


@dataclass(frozen=True)
class _DriverPlan:
    """A statement compiled once for rows of given keys: its SQL, the row keys its positional
    parameters take (a fixed value's under its bind name) and the types' bind processors. The
    writer thread spent as much CPU in SQLAlchemy's per-row parameter handling as in SQLite's
    inserts."""

    sql: str
    get: Callable[[dict[str, Any]], tuple[Any, ...]]
    fixed: dict[str, Any]
    processors: tuple[tuple[int, Callable[[Any], Any]], ...]

    def row(self, values: dict[str, Any]) -> tuple[Any, ...]:
        out = list(self.get(values | self.fixed if self.fixed else values))
        for i, process in self.processors:
            out[i] = process(out[i])
        return tuple(out)


# by statement (a statement object hashes and compares by identity), dialect and row keys
_PLANS: dict[tuple[Executable, str, tuple[str, ...]], _DriverPlan | None] = {}


def _driver_plan(stmt: Executable, dialect: Any, keys: tuple[str, ...]) -> _DriverPlan | None:
    """The plan of ``stmt`` for rows of ``keys``; None where SQLAlchemy must run it (a named
    parameter style, or column defaults it would compute per row)."""
    slot = (stmt, dialect.name, keys)
    if slot in _PLANS:
        return _PLANS[slot]
    plan = None
    if dialect.positional:
        compiled = stmt.compile(dialect=dialect, column_keys=list(keys))  # type: ignore[attr-defined]
        if not (compiled.insert_prefetch or compiled.update_prefetch or compiled.postfetch):
            names, fixed, processors = [], {}, []
            for i, name in enumerate(compiled.positiontup or ()):
                bind = compiled.binds[name]
                if bind.key in keys:
                    names.append(bind.key)
                else:
                    names.append(name)
                    fixed[name] = bind.effective_value
                impl = bind.type.dialect_impl(dialect)
                process = impl.bind_processor(dialect)
                if process is not None:
                    processors.append((i, _json_fast(process) if _is_json(impl) else process))
            get = itemgetter(*names) if len(names) > 1 else lambda row: (row[names[0]],)
            plan = _DriverPlan(compiled.string, get, fixed, tuple(processors))
    if len(_PLANS) > 256:  # statements made per call would otherwise pile up
        _PLANS.clear()
    _PLANS[slot] = plan
    return plan


def _is_json(impl: Any) -> bool:
    from sqlalchemy.types import JSON

    # a TypeDecorator over JSON is JSON too
    return isinstance(impl, JSON) or isinstance(getattr(impl, "impl", None), JSON)


def _json_fast(process: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """``process`` with its answer for an empty list or dict made once: most rows' JSON columns
    (a turn's events, its fired rules) are empty, and each json.dumps costs."""
    empty_list, empty_dict = process([]), process({})

    def fast(value: Any) -> Any:
        if type(value) is list and not value:
            return empty_list
        if type(value) is dict and not value:
            return empty_dict
        return process(value)

    return fast


def _settle_all(settled: list[tuple[asyncio.Future[None], BaseException | None]]) -> None:
    for future, exc in settled:
        if future.done():
            continue
        if exc is None:
            future.set_result(None)
        else:
            future.set_exception(exc)


def column_defaults(model: type[Any], **required: Any) -> dict[str, Any]:
    """A table row's column defaults, computed once: a Core insert fills none of the model's."""
    proto = model(**required)
    return {c.name: getattr(proto, c.name) for c in model.__table__.columns}


def upsert(store: Store, table: Any, keys: list[str], columns: list[str]) -> Executable:
    """``branchpoint.core.upserts.upsert`` for ``store``'s dialect."""
    from branchpoint.core.upserts import upsert as dialect_upsert

    return dialect_upsert(store.engine.dialect.name, table, keys, columns)


_WRITERS: weakref.WeakKeyDictionary[Store, BatchWriter] = weakref.WeakKeyDictionary()


def shared_writer(store: Store) -> BatchWriter:
    """This process's writer for ``store``: the engine and the gateway share it, so their writes
    commit in the order they were made."""
    writer = _WRITERS.get(store)
    if writer is None:
        writer = _WRITERS[store] = BatchWriter(store)
    return writer
