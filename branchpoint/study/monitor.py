"""What a running sweep shows: figures gathered while it runs, for the live view to draw.

``SweepMonitor`` holds no model text, only counts, ids and times. It is fed three ways:

- ``on_progress(done, total)``: ``run_sweep``'s progress callback, for the plan's turn budget
  (shown beside the turns stored, never as a share: branching can store more);
- ``refresh()``: a read of the store (conversations of the sweep by target and status, its
  stored turns, and its model call rows by target and by role: purpose and spec), so that what
  it shows is what the store holds and what ``branchpoint runs`` counts; progress and the one ETA
  are conversations finished (completed or failed, each counted apart) of those planned, never
  above 100% however many turns branching adds; dollars are ``None`` ("unpriced") where a call
  row has no cost recorded (a model with no known price); while
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
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from sqlalchemy import case, func, select

from branchpoint.core.read.costs import answered_unpriced, cache_share, cache_token_sums
from branchpoint.core.read.schema import CONVERSATIONS, MODEL_CALLS, TURNS

if TYPE_CHECKING:
    from branchpoint.core.store import Store

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
    usd: float | None = 0.0  # None: some of its calls have no price known (unpriced)

    @property
    def waiting(self) -> int:
        """Planned conversations neither finished nor running (pending, interrupted, not begun)."""
        return max(0, self.planned - self.done - self.running - self.failed)


@dataclass(frozen=True)
class RoleFigures:
    """One role (a model call row's purpose: target, persona, detector, judge) and the spec it
    called, from the sweep's call rows: what ``branchpoint runs`` counts, split."""

    role: str
    spec: str
    calls: int
    tokens: int
    usd: float | None  # None: some of these calls have no price known (unpriced)
    # the share of their input tokens a provider's prompt cache served; None: none reported
    cached_share: float | None = None


@dataclass(frozen=True)
class ProviderFigures:
    """One provider key's limiter: calls in flight against its current (adaptive) limit."""

    key: str
    in_flight: int
    limit: int
    configured: int
    throttled: int  # 429 answers so far
    cooling_s: float = 0.0  # Retry-After cool-down left
    # the roles and specs whose calls it limits ("target oai:x, persona oai:y"), from the sweep's
    # call rows; empty until a call of it is stored (the view shows the key then)
    roles: str = ""


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
    turns_done: int  # turns stored in the sweep's conversations (at the last read)
    turns_total: int  # the plan's turn budget: branching can store more, so never a percentage
    calls: int  # model calls this process made (gateway), cached ones included
    calls_per_s: float
    tokens: int
    usd: float | None  # None: some calls have no price known (unpriced)
    eta_s: float | None  # the one ETA: from conversations finished in this invocation
    targets: list[TargetFigures]
    providers: list[ProviderFigures]
    oldest_running: tuple[str, float] | None  # (conversation id, seconds seen running)
    judging: list[JudgingFigures]
    judging_planned: int  # passes the manifest asks for (live ones per target, and after)
    refreshed: bool  # the store has been read at least once
    read_error: str | None = None  # why the last read of the store failed, if it did
    roles: list[RoleFigures] = field(default_factory=list)

    @property
    def planned(self) -> int:
        return sum(t.planned for t in self.targets)

    @property
    def finished_pct(self) -> float:
        """Conversations finished (completed or failed) of those planned: at most 100."""
        planned = self.planned
        finished = sum(min(t.planned, t.done + t.failed) for t in self.targets)
        return 100.0 * finished / planned if planned else 0.0


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
        self._call_marks: deque[tuple[float, int]] = deque()
        self._running_since: dict[str, float] = {}
        self._finished_at_start: dict[str, int] | None = None
        self._targets = [TargetFigures(t, len(ids)) for t, ids in self.planned.items()]
        self._judging: list[JudgingFigures] = []
        self._refreshed = False
        self._last_read_s = 0.0
        self._stored_calls = 0  # the sweep's call rows at the last refresh
        self._stored_turns = 0  # the turns of its conversations at the last refresh
        self._roles: list[RoleFigures] = []
        self._key_roles: dict[str, list[tuple[str, str]]] = {}
        self._eta: float | None = None
        self._eta_since = self.started
        self.read_error: str | None = None  # the last failed read of the store, if the last failed

    # -- feeds ---------------------------------------------------------------------------------

    def attach(self, gateway: Any) -> None:
        """The gateway the sweep calls through (``run_sweep`` attaches the one it made)."""
        self.gateway = gateway

    def on_progress(self, done: int, total: int) -> None:
        with self._lock:
            self._turns = (done, total)

    def rates_from_here(self) -> None:
        """Measure the ETA's rate from now on: what came before (a resume's finished
        conversations) was not done by this run; they count from the next read on."""
        with self._lock:
            self._finished_at_start = None
            self._eta_since = self.clock()

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
        c, m, t = CONVERSATIONS.c, MODEL_CALLS.c, TURNS.c
        unpriced = func.coalesce(func.sum(case((answered_unpriced(), 1), else_=0)), 0)
        spent = (
            func.count(),
            func.coalesce(func.sum(m.tokens_in + m.tokens_out), 0),
            func.coalesce(func.sum(m.cost), 0.0),
            unpriced,
        )
        with self.store.engine.connect() as conn:
            by_status = conn.execute(
                select(c.target, c.status, func.count())
                .where(c.run_id == self.sweep_id)
                .group_by(c.target, c.status)
            ).all()
            running = conn.execute(
                select(c.id).where(c.run_id == self.sweep_id, c.status == "running")
            ).all()
            by_target = conn.execute(
                select(c.target, *spent)
                .select_from(MODEL_CALLS.join(CONVERSATIONS, m.conversation_id == c.id))
                .where(m.run_id == self.sweep_id)
                .group_by(c.target)
            ).all()
            by_role = conn.execute(
                select(m.purpose, m.model, *spent, *cache_token_sums())
                .where(m.run_id == self.sweep_id)
                .group_by(m.purpose, m.model)
            ).all()
            samples = _limiter_keys(
                conn.execute(
                    select(MODEL_CALLS.c.params, m.purpose, m.model).where(
                        m.id.in_(
                            select(func.max(m.id))
                            .where(m.run_id == self.sweep_id)
                            .group_by(m.purpose, m.model)
                        )
                    )
                ).all()
            )
            turns = conn.execute(
                select(func.count())
                .select_from(TURNS.join(CONVERSATIONS, t.conversation_id == c.id))
                .where(c.run_id == self.sweep_id)
            ).scalar_one()
        now = self.clock()
        counts: dict[str, dict[str, int]] = {}
        for target, status, n in by_status:
            counts.setdefault(str(target), {})[str(status)] = int(n)
        costs = {str(r[0]): (int(r[1]), int(r[2]), _usd(r[3], r[4])) for r in by_target}
        roles = [
            RoleFigures(
                str(p), str(spec), int(n), int(tok), _usd(usd, unp), cache_share(served, of)
            )
            for p, spec, n, tok, usd, unp, served, of in sorted(
                by_role, key=lambda r: (_role_order(r[0]), r[1])
            )
        ]
        ids = {str(r[0]) for r in running}
        self._stored_calls = sum(r.calls for r in roles)
        calls_now = self._gateway_calls()
        with self._lock:
            _mark(self._call_marks, now, calls_now)
            self._running_since = {i: self._running_since.get(i, now) for i in ids}
            finished = {
                t: min(
                    len(self.planned[t]),
                    counts.get(t, {}).get("completed", 0) + counts.get(t, {}).get("failed", 0),
                )
                for t in self.planned
            }
            if self._finished_at_start is None:
                self._finished_at_start = finished
            # One ETA: the conversations left at the rate this invocation has finished them
            # (completed or failed alike: either is one fewer to wait for).
            remaining = sum(len(p) for p in self.planned.values()) - sum(finished.values())
            now_finished = sum(finished.values()) - sum(self._finished_at_start.values())
            elapsed = max(now - self._eta_since, 1e-9)
            self._eta = (
                0.0
                if remaining <= 0
                else (remaining * elapsed / now_finished if now_finished > 0 else None)
            )
            figures = []
            for target, ids_planned in self.planned.items():
                got = counts.get(target, {})
                calls, tokens, usd = costs.get(target, (0, 0, 0.0))
                figures.append(
                    TargetFigures(
                        target=target,
                        planned=len(ids_planned),
                        done=got.get("completed", 0),
                        running=got.get("running", 0),
                        failed=got.get("failed", 0),
                        calls=calls,
                        tokens=tokens,
                        usd=usd,
                    )
                )
            self._targets = figures
            self._roles = roles
            self._key_roles = samples
            self._stored_turns = int(turns)
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
            providers = [
                replace(p, roles=", ".join(f"{r} {s}" for r, s in self._key_roles.get(p.key, [])))
                for p in providers
            ]
            _mark(self._call_marks, now, calls)
            total = self._turns[1]
            call_rate = _rate(self._call_marks)
            oldest = (
                min(self._running_since.items(), key=lambda kv: (kv[1], kv[0]))
                if self._running_since
                else None
            )
            targets = list(self._targets)
            return MonitorSnapshot(
                sweep_id=self.sweep_id,
                elapsed_s=now - self.started,
                turns_done=self._stored_turns,
                turns_total=total,
                calls=calls,
                calls_per_s=call_rate,
                tokens=sum(r.tokens for r in self._roles),
                usd=_sum_usd(r.usd for r in self._roles),
                eta_s=self._eta,
                targets=targets,
                providers=providers,
                oldest_running=(oldest[0], now - oldest[1]) if oldest else None,
                judging=list(self._judging),
                judging_planned=self.judging_planned,
                refreshed=self._refreshed,
                read_error=self.read_error,
                roles=list(self._roles),
            )


_ROLES = ("target", "persona", "detector", "judge")


def _role_order(purpose: object) -> int:
    return _ROLES.index(str(purpose)) if str(purpose) in _ROLES else len(_ROLES)


def _limiter_keys(samples: Iterable[Any]) -> dict[str, list[tuple[str, str]]]:
    """Provider limiter key -> the (role, spec) pairs whose calls it limits, from one stored call
    row of each (its params carry the endpoint the key is made of)."""
    from branchpoint.core.errors import UserError
    from branchpoint.gateway.completion import GenParams
    from branchpoint.gateway.providers.registry import provider_kind
    from branchpoint.gateway.specs import parse_spec

    out: dict[str, list[tuple[str, str]]] = {}
    for params, purpose, model in samples:
        try:
            spec = parse_spec(str(model))
            key = provider_kind(spec.kind).key(spec.model, GenParams.model_validate(params or {}))
        except (UserError, ValueError):  # a row this build cannot read is left unlabelled
            continue
        out.setdefault(key, []).append((str(purpose), str(model)))
    for pairs in out.values():
        pairs.sort(key=lambda p: (_role_order(p[0]), p[1]))
    return out


def _usd(cost: Any, unpriced: Any) -> float | None:
    """The dollars of a group of call rows; None where any has no price known."""
    return None if int(unpriced or 0) else float(cost or 0.0)


def _sum_usd(values: Iterable[float | None]) -> float | None:
    total = 0.0
    for v in values:
        if v is None:
            return None
        total += v
    return total


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
    "RoleFigures",
    "SweepMonitor",
    "TargetFigures",
]
