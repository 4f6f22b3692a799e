"""The provider interface: what the gateway needs from a model backend."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC
from typing import Any, Protocol, runtime_checkable

from simulator.completion import Completion, GenParams, Message

# HTTP statuses worth retrying (rate limits, overload, gateway errors), for every HTTP provider.
RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504, 520, 522, 524, 529}


@runtime_checkable
class Provider(Protocol):
    """A model backend. ``complete`` raises ModelError (retryable or not) on failure.

    ``model`` is the part of the spec after the prefix. ``default_concurrency`` is how many calls
    the gateway lets through at once when the user set no limit.
    """

    default_concurrency: int

    async def complete(
        self, model: str, messages: list[Message], params: GenParams
    ) -> Completion: ...

    async def aclose(self) -> None: ...


def limit_key(kind: str, model: str, params: GenParams) -> str:
    """The key that shares one concurrency limit: an API provider, a server, or a local model."""
    if kind == "litellm":
        base = params.api_base or model.split("/", 1)[0]
        return f"litellm:{base}"
    if kind == "oai":
        return f"oai:{params.api_base}"
    if kind == "embedded":
        return "embedded"
    return f"{kind}:{model}"


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
