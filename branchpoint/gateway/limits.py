"""Per-provider limits for the gateway: calls in flight, requests per minute, tokens per minute.

They are set per limit key (``ProviderLimits``), from the command line (``parse_limit``:
``--limit KEY,max_concurrency=N,rpm=R,tpm=T``) or from a YAML file read into ``LimitsFile``
(``--limits FILE``; a sweep manifest reuses the same model):

    limits:
      "oai:http://127.0.0.1:8000/v1": {max_concurrency: 256}
      litellm:openai: {max_concurrency: 64, rpm: 5000, tpm: 2000000}
      "*": {max_concurrency: 32}
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, ValidationError

# Seconds one attempt may take by default. A chat reply of 1,000 tokens at 20 tokens a second
# takes 50 s, so this leaves it room twice over, while a hung endpoint holds a conversation at
# most about 8 minutes (4 attempts and their back-off) rather than 40 at 600 s an attempt.
# Reasoning models that think for minutes need more: --timeout / execution.timeout_s.
DEFAULT_TIMEOUT_S = 120.0


class ProviderLimits(BaseModel):
    """How hard one provider may be driven: calls in flight, requests and tokens per minute
    (None: no cap)."""

    model_config = ConfigDict(extra="forbid")
    max_concurrency: int = Field(default=8, ge=1, description="Calls in flight at most.")
    rpm: float | None = Field(default=None, gt=0, description="Requests per minute at most.")
    tpm: float | None = Field(
        default=None, gt=0, description="Tokens (prompt + completion) per minute at most."
    )


class LimitsFile(BaseModel):
    """A ``--limits`` YAML file: limit key (a spec, ``oai:API_BASE``, a prefix, or ``*``) ->
    ProviderLimits."""

    model_config = ConfigDict(extra="forbid")
    limits: dict[str, ProviderLimits] = Field(default_factory=dict)


def parse_limit(text: str) -> tuple[str, ProviderLimits]:
    """``KEY,max_concurrency=N,rpm=R,tpm=T`` (any of the three) -> (KEY, ProviderLimits).

    Raises ValueError with what is wrong, for a one-line error."""
    key, _, rest = text.partition(",")
    if not key.strip() or not rest.strip():
        raise ValueError(f"{text!r}: expected KEY,max_concurrency=N[,rpm=R][,tpm=T]")
    fields: dict[str, str] = {}
    for item in rest.split(","):
        name, eq, value = item.partition("=")
        if not eq or name.strip() not in ProviderLimits.model_fields:
            raise ValueError(
                f"{item.strip()!r}: expected one of {', '.join(ProviderLimits.model_fields)}=NUMBER"
            )
        fields[name.strip()] = value.strip()
    try:
        return key.strip(), ProviderLimits.model_validate(fields)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise ValueError(f"{err['loc'][0]}: {err['msg']}") from None


class TokenBudget:
    """Tokens-per-minute limiter: a call starts while the budget is not in debt, and is charged
    its tokens when it ends (they are only known then), the budget refilling continuously."""

    def __init__(self, tpm: float) -> None:
        self.rate = tpm / 60.0
        self.capacity = tpm / 60.0  # a second's worth: no burst of a whole minute at the start
        self.tokens = self.capacity
        self.updated = time.monotonic()

    def _refill(self) -> None:
        now = time.monotonic()
        self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
        self.updated = now

    async def acquire(self) -> None:
        self._refill()
        while self.tokens < 0:
            await asyncio.sleep(-self.tokens / self.rate)
            self._refill()

    def charge(self, tokens: int) -> None:
        self._refill()
        self.tokens -= tokens


class TokenBucket:
    """Requests-per-minute limiter: a bucket of ``rpm`` tokens refilled continuously.

    The bucket starts with one token rather than a full minute's worth so that a sweep does not
    fire a burst of ``rpm`` requests in its first second and then hit the provider's own limiter.
    """

    def __init__(self, rpm: float, burst: float = 1.0) -> None:
        self.rate = rpm / 60.0
        self.capacity = max(1.0, burst)
        self.tokens = self.capacity
        self.updated = time.monotonic()
        self._lock = asyncio.Lock()

    async def acquire(self) -> None:
        async with self._lock:
            while True:
                now = time.monotonic()
                self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
                self.updated = now
                if self.tokens >= 1.0:
                    self.tokens -= 1.0
                    return
                await asyncio.sleep((1.0 - self.tokens) / self.rate)


class LimiterState(BaseModel):
    """One provider's limiter as the live view shows it."""

    key: str
    in_flight: int = Field(description="Calls holding a slot now.")
    waiting: int = Field(0, description="Calls waiting for a slot.")
    limit: int = Field(description="Calls in flight allowed now (adaptive).")
    configured: int = Field(description="The configured max_concurrency.")
    throttled: int = Field(0, description="429 answers so far.")
    errors: int = Field(0, description="Other failed attempts so far.")
    ok: int = Field(0, description="Successful attempts so far.")
    cooling_until_s: float = Field(
        0.0, description="Seconds of Retry-After cool-down left (0: none): no call starts before."
    )
    rpm: float | None = None
    tpm: float | None = None


Outcome = Literal["ok", "throttled", "error"]


@runtime_checkable
class CallLimiter(Protocol):
    """What the gateway holds around every attempt of every call to one provider key.

    ``acquire`` waits for a slot (the adaptive in-flight limit), the requests-per-minute bucket,
    the tokens-per-minute debt and any Retry-After cool-down; every ``acquire`` is paired with one
    ``release``: ``ok``, ``throttled`` (a 429, with its Retry-After) or ``error`` (anything else,
    including a call given up before it was sent), with the tokens the call used."""

    key: str

    async def acquire(self) -> None: ...

    def release(
        self, outcome: Outcome, *, retry_after: float | None = None, tokens: int = 0
    ) -> None: ...

    def snapshot(self) -> LimiterState: ...


LimiterFactory = Callable[[str, ProviderLimits], CallLimiter]


class AdaptiveLimit:
    """The adaptive in-flight rule, one definition for the local limiter and the Ray limiter
    actor (``branchpoint.study.ray_limits``): see ``Limiter``. ``now`` is ``time.monotonic()``."""

    def __init__(
        self, configured: int, *, cut: float = 0.8, grow_after: int = 8, cut_interval_s: float = 1.0
    ) -> None:
        self.configured = configured
        self.cut = cut
        self.grow_after = max(1, grow_after)
        self.cut_interval_s = cut_interval_s
        self._limit = float(configured)
        self.throttled = self.errors = self.ok = 0
        self.cooling_until = 0.0  # time.monotonic() before which no call starts
        self._streak = 0
        self._last_cut = -float("inf")

    @property
    def limit(self) -> int:
        return max(1, int(self._limit))

    def observe(self, outcome: Outcome, retry_after: float | None, now: float) -> None:
        """Adapt the limit to one attempt's outcome."""
        if outcome == "throttled":
            self.throttled += 1
            self._streak = 0
            if now - self._last_cut >= self.cut_interval_s:
                self._limit = max(1.0, self._limit * self.cut)
                self._last_cut = now
            if retry_after is not None and retry_after > 0:
                self.cooling_until = max(self.cooling_until, now + retry_after)
        elif outcome == "ok":
            self.ok += 1
            self._streak += 1
            if self._streak >= self.grow_after and self._limit < self.configured:
                self._limit = min(float(self.configured), float(int(self._limit) + 1))
                self._streak = 0
        else:
            self.errors += 1


class Limiter(AdaptiveLimit):
    """The local adaptive limiter for one provider key (one event loop).

    The in-flight limit starts at ``max_concurrency``. A 429 cuts it by ``cut`` (never below 1;
    at most once per ``cut_interval_s``, since the calls already in flight answer 429 together
    for the same overload) and, with a Retry-After, puts the whole provider in a cool-down that
    every caller waits out, not only the one that was refused. ``grow_after`` successes in a row
    add one back, up to the configured limit. Other errors (5xx, timeouts, bad bodies) leave the
    limit as it is: they say nothing about the rate.
    """

    def __init__(
        self,
        limits: ProviderLimits,
        key: str = "",
        *,
        cut: float = 0.8,
        grow_after: int = 8,
        cut_interval_s: float = 1.0,
    ) -> None:
        super().__init__(
            limits.max_concurrency, cut=cut, grow_after=grow_after, cut_interval_s=cut_interval_s
        )
        self.key = key
        self.limits = limits
        self.in_flight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self.bucket = TokenBucket(limits.rpm) if limits.rpm else None
        self.tokens = TokenBudget(limits.tpm) if limits.tpm else None

    async def acquire(self) -> None:
        await self._slot()
        try:
            while True:
                await self._cool_down()
                if self.tokens is not None:
                    await self.tokens.acquire()
                if self.bucket is not None:
                    await self.bucket.acquire()
                if self.cooling_until <= time.monotonic():
                    break
                # A 429 came back while this call waited for its rate token: wait the cool-down
                # out and take a fresh token after it, or every call holding one would leave
                # together the moment it ends (a burst over the rate limit).
        except BaseException:
            self._free()
            raise

    def release(
        self, outcome: Outcome, *, retry_after: float | None = None, tokens: int = 0
    ) -> None:
        if tokens and self.tokens is not None:
            self.tokens.charge(tokens)
        self.observe(outcome, retry_after, time.monotonic())
        self._free()

    def snapshot(self) -> LimiterState:
        return LimiterState(
            key=self.key,
            in_flight=self.in_flight,
            waiting=sum(1 for w in self._waiters if not w.done()),
            limit=self.limit,
            configured=self.configured,
            throttled=self.throttled,
            errors=self.errors,
            ok=self.ok,
            cooling_until_s=max(0.0, self.cooling_until - time.monotonic()),
            rpm=self.limits.rpm,
            tpm=self.limits.tpm,
        )

    async def _slot(self) -> None:
        loop = asyncio.get_running_loop()
        while self.in_flight >= self.limit:
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._wake()  # it was handed a slot it will not use: pass it on
                raise
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
        self.in_flight += 1

    async def _cool_down(self) -> None:
        while (left := self.cooling_until - time.monotonic()) > 0:
            await asyncio.sleep(left)

    def _free(self) -> None:
        self.in_flight -= 1
        self._wake()

    def _wake(self) -> None:
        free = self.limit - self.in_flight
        while free > 0 and self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                free -= 1


def local_limiter(key: str, limits: ProviderLimits) -> CallLimiter:
    """The default ``limiter_factory``: an in-process adaptive Limiter."""
    return Limiter(limits, key)


class SharedLimiters:
    """A ``limiter_factory`` for several gateways of one process that must draw on the same
    limits: one limiter per provider key, whichever gateway asks first (a sweep's
    conversations and its judges calling one provider)."""

    def __init__(self, factory: LimiterFactory = local_limiter) -> None:
        self.factory = factory
        self._made: dict[str, CallLimiter] = {}

    def __call__(self, key: str, limits: ProviderLimits) -> CallLimiter:
        limiter = self._made.get(key)
        if limiter is None:
            limiter = self._made[key] = self.factory(key, limits)
        return limiter


def load_limits(
    path: str | os.PathLike[str] | None, items: Sequence[str] = ()
) -> dict[str, ProviderLimits]:
    """``--limits FILE`` then each ``--limit KEY,...`` over it; bad input raises UserError, one
    ``file:LINE:COL: field: problem`` line per problem of the file."""
    from branchpoint.core.errors import UserError
    from branchpoint.core.yamlio import load_model

    limits: dict[str, ProviderLimits] = {}
    if path is not None:
        loaded, errors = load_model(os.fspath(path), LimitsFile)
        if errors or loaded is None:
            raise UserError("\n".join(str(e) for e in errors) or f"{path}: no limits")
        limits.update(loaded.limits)
    for item in items:
        try:
            key, value = parse_limit(item)
        except ValueError as exc:
            raise UserError(f"--limit {exc}") from None
        limits[key] = value
    return limits
