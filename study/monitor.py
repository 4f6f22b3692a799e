"""What a running sweep shows: figures gathered while it runs, for the live view to draw.

``SweepMonitor`` holds no model text, only counts, ids and times. It is fed three ways:

- ``on_progress(done, total)``: the turns written (``run_sweep``'s progress callback), for the
  overall rate and ETA;
- ``refresh()``: a read of the store (conversations of the sweep by target and status, and the
  tokens and dollars of its model calls), so that what it shows is what the store holds; while
  ``run_sweep`` runs it is called from a worker thread every ``interval_s`` (longer on a store so
  large that one read takes a while), never on the event loop;
- the gateway: calls made (``Gateway.stats``; a gateway without stats, the stand-in of a sweep on
  Ray whose calls are made in the workers, counts the sweep's call rows in the store instead)
  and, per provider, calls in flight against the current limit and the 429s so far
  (``Gateway.limiter_states()``).

Judging is a higher layer's; it reports its passes with ``judge_started`` / ``judge_finished``.
``snapshot()`` returns a ``MonitorSnapshot``: plain data, safe to read from any thread.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from sqlalchemy import func, select

from core.read.schema import CONVERSATIONS, MODEL_CALLS

if TYPE_CHECKING:
    from core.store import Store

RATE_WINDOW_S = 30.0  # calls/s and turns/s are measured over the last half minute


@dataclass(frozen=True)
class TargetFigures:
    """One target of the sweep: its planned conversations by state, and what they cost so far."""

    target: str
    planned: int
    done: int = 0  # completed
    running: int = 0
    failed: int = 0
    calls: int = 0  # model calls recorded for its conversations (persona and detector included)
    tokens: int = 0
    usd: float = 0.0
    eta_s: float | None = None  # None: no conversation finished yet in this invocation

    @property
    def waiting(self) -> int:
        """Planned conversations neither finished nor running (pending, interrupted, not begun)."""
        return max(0, self.planned - self.done - self.running - self.failed)


@dataclass(frozen=True)
class ProviderFigures:
    """One provider key's limiter: calls in flight against its current (adaptive) limit."""

    key: str
    in_flight: int
    limit: int
    configured: int
    throttled: int  # 429 answers so far
    cooling_s: float = 0.0  # Retry-After cool-down left


@dataclass(frozen=True)
class JudgingFigures:
    """One judging pass (a judge x rubric, live on one target's conversations or after all)."""

    label: str
    when: str  # live | after
    conversations: int
    state: str = "running"  # running | done
    rows: int = 0
    errors: int = 0


@dataclass(frozen=True)
class MonitorSnapshot:
    sweep_id: str
    elapsed_s: float
    turns_done: int
    turns_total: int
    calls: int  # model calls this process made (gateway), cached ones included
    calls_per_s: float
    tokens: int
    usd: float
    eta_s: float | None
    targets: list[TargetFigures]
    providers: list[ProviderFigures]
    oldest_running: tuple[str, float] | None  # (conversation id, seconds seen running)
    judging: list[JudgingFigures]
    judging_planned: int  # passes the manifest asks for (live ones per target, and after)
    refreshed: bool  # the store has been read at least once
    read_error: str | None = None  # why the last read of the store failed, if it did


class SweepMonitor:
    """See the module docstring. ``planned``: target -> its planned conversation ids."""

    def __init__(
        self,
        store: Store,
        sweep_id: str,
        planned: Mapping[str, Iterable[str]],
        *,
        gateway: Any | None = None,
        judging_planned: int = 0,
        interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.sweep_id = sweep_id
        self.planned = {t: frozenset(ids) for t, ids in planned.items()}
        self.gateway = gateway
        self.judging_planned = judging_planned
        self.interval_s = interval_s
        self.clock = clock
        self.started = clock()
        self._lock = threading.Lock()
        self._turns = (0, 0)
        self._turn_marks: deque[tuple[float, int]] = deque()
        self._call_marks: deque[tuple[float, int]] = deque()
        self._running_since: dict[str, float] = {}
        self._finished_at_start: dict[str, int] | None = None
        self._targets = [TargetFigures(t, len(ids)) for t, ids in self.planned.items()]
        self._judging: list[JudgingFigures] = []
        self._refreshed = False
        self._last_read_s = 0.0
        self._stored_calls = 0  # the sweep's call rows at the last refresh
        self.read_error: str | None = None  # the last failed read of the store, if the last failed

    # -- feeds ---------------------------------------------------------------------------------

    def attach(self, gateway: Any) -> None:
        """The gateway the sweep calls through (``run_sweep`` attaches the one it made)."""
        self.gateway = gateway

    def on_progress(self, done: int, total: int) -> None:
        now = self.clock()
        with self._lock:
            self._turns = (done, total)
            _mark(self._turn_marks, now, done)

    def rates_from_here(self) -> None:
        """Measure the turn rate from now on: what came before (a resume's stored turns) was
        not made by this run."""
        with self._lock:
            self._turn_marks.clear()
            _mark(self._turn_marks, self.clock(), self._turns[0])

    def judge_started(self, label: str, when: str, conversations: int) -> None:
        with self._lock:
            self._judging.append(JudgingFigures(label, when, conversations))

    def judge_finished(self, label: str, *, rows: int, errors: int) -> None:
        with self._lock:
            for i in range(len(self._judging) - 1, -1, -1):
                if self._judging[i].label == label and self._judging[i].state == "running":
                    self._judging[i] = replace(
                        self._judging[i], state="done", rows=rows, errors=errors
                    )
                    break

    def refresh(self) -> None:
        """Read the sweep's conversations and calls from the store (see the module docstring)."""
        began = time.perf_counter()
        c, m = CONVERSATIONS.c, MODEL_CALLS.c
        with self.store.engine.connect() as conn:
            by_status = conn.execute(
                select(c.target, c.status, func.count())
                .where(c.run_id == self.sweep_id)
                .group_by(c.target, c.status)
            ).all()
            running = conn.execute(
                select(c.id).where(c.run_id == self.sweep_id, c.status == "running")
            ).all()
            spent = conn.execute(
                select(
                    c.target,
                    func.count(),
                    func.coalesce(func.sum(m.tokens_in + m.tokens_out), 0),
                    func.coalesce(func.sum(m.cost), 0.0),
                )
                .select_from(MODEL_CALLS.join(CONVERSATIONS, m.conversation_id == c.id))
                .where(m.run_id == self.sweep_id)
                .group_by(c.target)
            ).all()
        now = self.clock()
        counts: dict[str, dict[str, int]] = {}
        for target, status, n in by_status:
            counts.setdefault(str(target), {})[str(status)] = int(n)
        costs = {str(t): (int(n), int(tok), float(usd)) for t, n, tok, usd in spent}
        ids = {str(r[0]) for r in running}
        self._stored_calls = sum(n for n, _, _ in costs.values())
        calls_now = self._gateway_calls()
        with self._lock:
            _mark(self._call_marks, now, calls_now)
            self._running_since = {i: self._running_since.get(i, now) for i in ids}
            finished = {
                t: counts.get(t, {}).get("completed", 0) + counts.get(t, {}).get("failed", 0)
                for t in self.planned
            }
            if self._finished_at_start is None:
                self._finished_at_start = finished
            elapsed = max(now - self.started, 1e-9)
            figures = []
            for target, ids_planned in self.planned.items():
                got = counts.get(target, {})
                calls, tokens, usd = costs.get(target, (0, 0, 0.0))
                done, failed = got.get("completed", 0), got.get("failed", 0)
                remaining = len(ids_planned) - done - failed
                now_finished = finished[target] - self._finished_at_start.get(target, 0)
                eta = (
                    0.0
                    if remaining <= 0
                    else (remaining * elapsed / now_finished if now_finished > 0 else None)
                )
                figures.append(
                    TargetFigures(
                        target=target,
                        planned=len(ids_planned),
                        done=done,
                        running=got.get("running", 0),
                        failed=failed,
                        calls=calls,
                        tokens=tokens,
                        usd=usd,
                        eta_s=eta,
                    )
                )
            self._targets = figures
            self._refreshed = True
        self._last_read_s = time.perf_counter() - began

    async def watch(self) -> None:
        """Refresh from a worker thread until cancelled (``run_sweep`` runs it as a task)."""
        from sqlalchemy.exc import SQLAlchemyError

        while True:
            try:
                await asyncio.to_thread(self.refresh)
                self.read_error = None
            except SQLAlchemyError as exc:
                # The view is not worth stopping a sweep for: say so in it and read again later.
                self.read_error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            # A store so large that a read takes long is read less often: at most a tenth of
            # the time goes to watching.
            await asyncio.sleep(max(self.interval_s, 10 * self._last_read_s))

    # -- reading -------------------------------------------------------------------------------

    def _gateway_calls(self) -> int:
        if self.gateway is None:
            return 0
        stats = getattr(self.gateway, "stats", None)
        return int(stats.get("calls", 0)) if isinstance(stats, dict) else self._stored_calls

    def snapshot(self) -> MonitorSnapshot:
        now = self.clock()
        calls = self._gateway_calls()
        providers = _providers(self.gateway)
        with self._lock:
            _mark(self._call_marks, now, calls)
            done, total = self._turns
            turn_rate = _rate(self._turn_marks)
            call_rate = _rate(self._call_marks)
            eta = (
                (total - done) / turn_rate
                if turn_rate > 0 and total > done
                else (0.0 if total and done >= total else None)
            )
            oldest = (
                min(self._running_since.items(), key=lambda kv: (kv[1], kv[0]))
                if self._running_since
                else None
            )
            targets = list(self._targets)
            return MonitorSnapshot(
                sweep_id=self.sweep_id,
                elapsed_s=now - self.started,
                turns_done=done,
                turns_total=total,
                calls=calls,
                calls_per_s=call_rate,
                tokens=sum(t.tokens for t in targets),
                usd=sum(t.usd for t in targets),
                eta_s=eta,
                targets=targets,
                providers=providers,
                oldest_running=(oldest[0], now - oldest[1]) if oldest else None,
                judging=list(self._judging),
                judging_planned=self.judging_planned,
                refreshed=self._refreshed,
                read_error=self.read_error,
            )


def _mark(marks: deque[tuple[float, int]], now: float, value: int) -> None:
    marks.append((now, value))
    while len(marks) > 2 and now - marks[1][0] > RATE_WINDOW_S:
        marks.popleft()


def _rate(marks: deque[tuple[float, int]]) -> float:
    if len(marks) < 2:
        return 0.0
    (t0, v0), (t1, v1) = marks[0], marks[-1]
    return (v1 - v0) / (t1 - t0) if t1 > t0 else 0.0


def _providers(gateway: Any | None) -> list[ProviderFigures]:
    """Each provider's limiter, from ``Gateway.limiter_states()`` (none on a gateway without it)."""
    states = getattr(gateway, "limiter_states", None)
    if not callable(states):
        return []
    out = []
    for s in states():
        out.append(
            ProviderFigures(
                key=str(getattr(s, "key", "")),
                in_flight=int(getattr(s, "in_flight", 0)),
                limit=int(getattr(s, "limit", 0)),
                configured=int(getattr(s, "configured", 0)),
                throttled=int(getattr(s, "throttled", 0)),
                cooling_s=float(getattr(s, "cooling_until_s", 0.0) or 0.0),
            )
        )
    return out


__all__ = [
    "JudgingFigures",
    "MonitorSnapshot",
    "ProviderFigures",
    "SweepMonitor",
    "TargetFigures",
]
