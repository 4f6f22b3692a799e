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
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field, ValidationError


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


class Limiter:
    """The live state for one provider key: a semaphore and an optional token bucket."""

    def __init__(self, limits: ProviderLimits) -> None:
        self.limits = limits
        self.semaphore = asyncio.Semaphore(limits.max_concurrency)
        self.bucket = TokenBucket(limits.rpm) if limits.rpm else None
        self.tokens = TokenBudget(limits.tpm) if limits.tpm else None


def load_limits(
    path: str | os.PathLike[str] | None, items: Sequence[str] = ()
) -> dict[str, ProviderLimits]:
    """``--limits FILE`` then each ``--limit KEY,...`` over it; bad input raises UserError, one
    ``file:LINE:COL: field: problem`` line per problem of the file."""
    from core.errors import UserError
    from core.yamlio import load_model

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
