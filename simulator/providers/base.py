"""The provider interface: what the gateway needs from a model backend."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from simulator.completion import Completion, GenParams, Message


@runtime_checkable
class Provider(Protocol):
    """A model backend. ``complete`` raises ModelError (retryable or not) on failure.

    ``model`` is the part of the spec after the prefix. ``default_concurrency`` is how many calls
    the gateway lets through at once when the user set no limit.
    """

    default_concurrency: int

    async def complete(self, model: str, messages: list[Message], params: GenParams) -> Completion: ...

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
