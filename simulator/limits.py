"""Per-provider concurrency and request-rate limits for the gateway."""

from __future__ import annotations

import asyncio
import time

from pydantic import BaseModel, ConfigDict, Field


class ProviderLimits(BaseModel):
    """How hard one provider may be driven: calls in flight, and requests per minute (None: no cap)."""

    model_config = ConfigDict(extra="forbid")
    max_concurrency: int = Field(default=8, ge=1)
    rpm: float | None = Field(default=None, gt=0)


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


class Limiter:
    """The live state for one provider key: a semaphore and an optional token bucket."""

    def __init__(self, limits: ProviderLimits) -> None:
        self.limits = limits
        self.semaphore = asyncio.Semaphore(limits.max_concurrency)
        self.bucket = TokenBucket(limits.rpm) if limits.rpm else None
