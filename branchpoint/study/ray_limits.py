"""One provider's limits shared by every Ray worker of a sweep: a limiter actor per provider key.

``SharedLimit`` is the state (plain Python, no Ray): the adaptive in-flight limit, the
requests-per-minute bucket, the tokens-per-minute debt and the Retry-After cool-down, with the
same rules as the local ``branchpoint.gateway.limits.Limiter`` (cut by 0.8 on a 429, never below 1, at most
once a second; one back after 8 successes in a row; no cut on other errors). It never waits:
``reserve`` answers at once with 0 (granted: a slot is held) or the seconds to wait before asking
again, so one actor serves every worker without blocking on any of them. A Retry-After that one
worker reports puts every worker's next reservation off until it has passed.

``RayLimiter`` is what a worker's gateway holds (``Gateway(limiter_factory=...)``): it implements
``branchpoint.gateway.limits.CallLimiter`` by asking the actor, sleeping locally for the wait it is told.
Within one worker a lock lets one call at a time ask, so the actor sees one request per worker
waiting, not one per conversation.

A worker that dies holding slots would shrink the limit for good; its slots are held under its
owner tag, and the driver calls ``forget(owner)`` when it sees the worker gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from branchpoint.gateway.limits import AdaptiveLimit, LimiterState, Outcome, ProviderLimits

FULL_WAIT_S = 0.02  # asked again this soon when every slot is taken (no wake-up across processes)


class SharedLimit(AdaptiveLimit):
    """The global state of one provider key (see the module docstring); ``now`` is monotonic."""

    def __init__(self, key: str, limits: ProviderLimits) -> None:
        super().__init__(limits.max_concurrency)
        self.key, self.limits = key, limits
        self.held: dict[str, int] = {}  # owner -> slots it holds
        self.rate = (limits.rpm or 0.0) / 60.0
        self.tokens = 1.0  # one request of burst: see branchpoint.gateway.limits.TokenBucket
        self.tpm_rate = (limits.tpm or 0.0) / 60.0
        self.tpm_credit = self.tpm_rate  # a second's worth (branchpoint.gateway.limits.TokenBudget)
        self.updated = time.monotonic()

    @property
    def in_flight(self) -> int:
        return sum(self.held.values())

    def _refill(self, now: float) -> None:
        elapsed, self.updated = now - self.updated, now
        if self.rate:
            self.tokens = min(1.0, self.tokens + elapsed * self.rate)
        if self.tpm_rate:
            self.tpm_credit = min(self.tpm_rate, self.tpm_credit + elapsed * self.tpm_rate)

    def reserve(self, owner: str, now: float | None = None) -> float:
        """0.0: granted, ``owner`` holds one slot more; otherwise seconds to wait."""
        now = time.monotonic() if now is None else now
        self._refill(now)
        if self.cooling_until > now:
            return self.cooling_until - now
        if self.tpm_rate and self.tpm_credit < 0:
            return -self.tpm_credit / self.tpm_rate
        if self.in_flight >= self.limit:
            return FULL_WAIT_S
        if self.rate:
            if self.tokens < 1.0:
                return (1.0 - self.tokens) / self.rate
            self.tokens -= 1.0
        self.held[owner] = self.held.get(owner, 0) + 1
        return 0.0

    def release(
        self,
        owner: str,
        outcome: Outcome,
        retry_after: float | None = None,
        tokens: int = 0,
        now: float | None = None,
    ) -> None:
        now = time.monotonic() if now is None else now
        self._refill(now)
        if self.held.get(owner, 0) > 0:
            self.held[owner] -= 1
        if tokens and self.tpm_rate:
            self.tpm_credit -= tokens
        self.observe(outcome, retry_after, now)

    def forget(self, owner: str) -> int:
        """Drop the slots of a worker that is gone; how many it held."""
        return self.held.pop(owner, 0)

    def snapshot(self, now: float | None = None) -> LimiterState:
        now = time.monotonic() if now is None else now
        return LimiterState(
            key=self.key,
            in_flight=self.in_flight,
            limit=self.limit,
            configured=self.configured,
            throttled=self.throttled,
            errors=self.errors,
            ok=self.ok,
            cooling_until_s=max(0.0, self.cooling_until - now),
            rpm=self.limits.rpm,
            tpm=self.limits.tpm,
        )


def limiter_actor_class() -> Any:
    """The Ray actor class around SharedLimit (made on first use: Ray is an optional extra)."""
    import ray

    global _ACTOR
    if _ACTOR is None:

        class LimiterActor:
            def __init__(self, key: str, limits: dict[str, Any]) -> None:
                self.state = SharedLimit(key, ProviderLimits.model_validate(limits))

            def reserve(self, owner: str) -> float:
                return self.state.reserve(owner)

            def release(
                self, owner: str, outcome: Outcome, retry_after: float | None, tokens: int
            ) -> None:
                self.state.release(owner, outcome, retry_after, tokens)

            def forget(self, owner: str) -> int:
                return self.state.forget(owner)

            def snapshot(self) -> dict[str, Any]:
                return self.state.snapshot().model_dump()

        _ACTOR = ray.remote(num_cpus=0)(LimiterActor)  # one call at a time
    return _ACTOR


def registry_actor_class() -> Any:
    """An actor that makes one limiter actor per provider key on first request and hands out
    the same one to every worker; the driver owns it, so the limiters outlive any worker."""
    import ray

    global _REGISTRY
    if _REGISTRY is None:

        class LimiterRegistry:
            def __init__(self) -> None:
                self.actors: dict[str, Any] = {}

            def get(self, key: str, limits: dict[str, Any]) -> Any:
                actor = self.actors.get(key)
                if actor is None:
                    actor = self.actors[key] = limiter_actor_class().remote(key, limits)
                return actor

            def forget(self, owner: str) -> int:
                return sum(ray.get([a.forget.remote(owner) for a in self.actors.values()]))

            def snapshots(self) -> list[dict[str, Any]]:
                return list(ray.get([a.snapshot.remote() for a in self.actors.values()]))

        _REGISTRY = ray.remote(num_cpus=0)(LimiterRegistry)
    return _REGISTRY


_ACTOR: Any = None
_REGISTRY: Any = None


class RayLimiter:
    """``CallLimiter`` over a limiter actor (see the module docstring)."""

    def __init__(self, key: str, limits: ProviderLimits, registry: Any, owner: str) -> None:
        self.key, self.limits, self.owner = key, limits, owner
        self._actor_ref = registry.get.remote(key, limits.model_dump())
        self._actor: Any = None
        self._lock = asyncio.Lock()
        self.in_flight = 0
        self.throttled = self.errors = self.ok = 0
        self.waited_s = 0.0  # time this worker's calls spent told to wait
        self._undo: asyncio.Future[None] | None = None  # kept: a task nobody holds may vanish

    async def acquire(self) -> None:
        if self._actor is None:
            self._actor = await self._actor_ref
        async with self._lock:
            while True:
                ref = self._actor.reserve.remote(self.owner)
                try:
                    wait = await ref
                except asyncio.CancelledError:
                    # the slot may have been granted all the same: hand it back if so
                    self._undo = asyncio.ensure_future(self._give_back(ref))
                    raise
                if wait <= 0:
                    break
                self.waited_s += wait
                await asyncio.sleep(wait)
        self.in_flight += 1

    async def _give_back(self, ref: Any) -> None:
        with contextlib.suppress(Exception):
            if await ref <= 0:
                self._actor.release.remote(self.owner, "error", None, 0)

    def release(
        self, outcome: Outcome, *, retry_after: float | None = None, tokens: int = 0
    ) -> None:
        if self._actor is None:  # acquire never got the actor: nothing is held
            return
        self.in_flight -= 1
        if outcome == "throttled":
            self.throttled += 1
        elif outcome == "ok":
            self.ok += 1
        else:
            self.errors += 1
        # not awaited: Ray delivers one caller's calls to an actor in order, after its reserve
        self._actor.release.remote(self.owner, outcome, retry_after, tokens)

    def snapshot(self) -> LimiterState:
        """This worker's share (the actor's state is global: ``LimiterRegistry.snapshots``)."""
        return LimiterState(
            key=self.key,
            in_flight=self.in_flight,
            limit=self.limits.max_concurrency,
            configured=self.limits.max_concurrency,
            throttled=self.throttled,
            errors=self.errors,
            ok=self.ok,
            rpm=self.limits.rpm,
            tpm=self.limits.tpm,
        )
