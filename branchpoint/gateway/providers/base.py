"""The provider interface: what the gateway needs from a model backend."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC
from typing import Any, Protocol, runtime_checkable

from branchpoint.gateway.completion import Completion, GenParams, Message

# HTTP statuses worth retrying (rate limits, overload, gateway errors), for every HTTP provider.
RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524, 529}


@runtime_checkable
class Provider(Protocol):
    """A model backend. ``complete`` raises ModelError (retryable or not) on failure.

    ``model`` is the part of the spec after the prefix. A provider object may carry its own
    ``default_concurrency`` (a local model: its batch size); it then wins over its kind's.
    """

    async def complete(
        self, model: str, messages: list[Message], params: GenParams
    ) -> Completion: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True)
class ProviderKind:
    """What a provider module declares (as ``PROVIDER``) so that the registry can serve its specs.

    ``create(model)`` makes the provider for the part of a spec after the prefix; the gateway
    makes one per prefix and shares it, or one per model when ``one_per_model`` (a local model
    holds its weights). ``limit_key(model, params)`` names what shares one concurrency limit (an
    API account, a server, a loaded model); by default each model has its own. A ``bare`` kind
    is written as its prefix alone (``embedded``). ``check_model`` returns what is wrong with
    a model part, or None.
    """

    prefix: str
    usage: str  # how a spec of this kind is written, for error messages: "hf:MODEL_ID_OR_PATH"
    create: Callable[[str], Provider]
    default_concurrency: int
    limit_key: Callable[[str, GenParams], str] | None = None
    one_per_model: bool = False
    bare: bool = False
    check_model: Callable[[str], str | None] | None = None

    def key(self, model: str, params: GenParams) -> str:
        if self.limit_key is not None:
            return self.limit_key(model, params)
        return f"{self.prefix}:{model}" if model else self.prefix


def retry_after_from(headers: Mapping[Any, Any]) -> float | None:
    """Seconds to wait from Retry-After (seconds or HTTP date) or retry-after-ms, any header case."""
    headers = {str(k).lower(): str(v) for k, v in headers.items()}
    if "retry-after-ms" in headers:
        try:
            return float(headers["retry-after-ms"]) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        from datetime import datetime
        from email.utils import parsedate_to_datetime

        try:
            return max(0.0, (parsedate_to_datetime(value) - datetime.now(UTC)).total_seconds())
        except (TypeError, ValueError):
            return None
