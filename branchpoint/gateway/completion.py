"""What crosses the model gateway: messages in, a completion out. Providers speak only these."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Role = Literal["system", "user", "assistant"]


class Message(BaseModel):
    model_config = ConfigDict(frozen=True)
    role: Role
    content: str
    # The first cache_prefix characters are a prefix worth caching (a system prompt, a
    # transcript before what changes per call): providers with explicit caches mark it (the
    # litellm provider: Anthropic's cache_control); it is not part of what is sent or hashed.
    cache_prefix: int | None = None


class GenParams(BaseModel):
    """Generation settings. ``api_base`` and ``extra`` go to the provider; keys never live here."""

    model_config = ConfigDict(extra="forbid")
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    stop: list[str] | None = None
    # JSON schema for structured output: HTTP providers climb branchpoint/gateway/structured.py's ladder
    # (``extra.structured`` pins a mode), local ones decode guided by it; callers still validate.
    json_schema: dict[str, Any] | None = None
    api_base: str | None = None
    extra: dict[str, Any] = Field(default_factory=dict)

    def merged(self, other: GenParams | dict[str, Any] | None) -> GenParams:
        """These params overridden by the fields set in ``other``."""
        if other is None:
            return self
        data = other.model_dump(exclude_unset=True) if isinstance(other, GenParams) else other
        return self.model_copy(update=data)


class Completion(BaseModel):
    text: str
    reasoning: str | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    # parts of tokens_in a provider's prompt cache served, and wrote where that is billed apart
    tokens_cached: int = 0
    tokens_cache_write: int = 0
    cost: float | None = None
    latency_s: float = 0.0
    finish_reason: str | None = None
    request_id: str | None = None
    model: str = ""
    cached: bool = False
    attempts: int = 1
    # How structured output was asked for (json_schema, json_object or prompt; None when it was
    # not, or the provider has no such modes), and the modes the server refused on the way.
    structured: str | None = None
    structured_refused: list[str] = Field(default_factory=list)


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def cache_usage(usage: Any) -> tuple[int, int]:
    """(input tokens read from a prompt cache, input tokens written to it) in a provider's
    ``usage`` (a dict or litellm's object): OpenAI's ``prompt_tokens_details.cached_tokens``,
    Anthropic's ``cache_read_input_tokens`` and ``cache_creation_input_tokens`` (litellm passes
    both on, and counts them in ``prompt_tokens``, as OpenAI counts its cached tokens)."""
    if usage is None:
        return 0, 0
    details = _field(usage, "prompt_tokens_details")
    read = _field(details, "cached_tokens") if details is not None else None
    # litellm copies Anthropic's cache reads into cached_tokens too: the larger, never the sum
    read = max(int(read or 0), int(_field(usage, "cache_read_input_tokens") or 0))
    written = int(_field(usage, "cache_creation_input_tokens") or 0)
    return read, written


class ModelError(Exception):
    """A call that failed for good (after retries); ``reason`` is one line, safe to store.

    HTTP providers add the ``status`` and the start of the body (``detail``, redacted), and set
    ``refused`` when the server refused the request's structured-output shape: a request to send
    differently, never to retry as it was. ``unsent`` when the request never reached the server
    (a connection refused): like an error answer, it was not billed.
    """

    def __init__(
        self,
        reason: str,
        *,
        retryable: bool = False,
        retry_after: float | None = None,
        status: int | None = None,
        detail: str = "",
        refused: bool = False,
        unsent: bool = False,
    ):
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable
        self.retry_after = retry_after
        self.status = status
        self.detail = detail
        self.refused = refused
        self.unsent = unsent
