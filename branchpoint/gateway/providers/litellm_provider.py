"""``litellm:PROVIDER/MODEL``: any model litellm knows, or any OpenAI-compatible server via ``api_base``.

Keys come from the environment only: the variable ``extra.api_key_env`` names (a manifest's
``key_env``), else litellm's own (OPENAI_API_KEY, ANTHROPIC_API_KEY, ...); an ``api_key`` in
params is dropped before the call and never stored. litellm's own retries are off; the gateway
retries, honouring Retry-After. A request with a ``json_schema`` climbs the structured-output ladder
(``branchpoint/gateway/structured.py``), starting where litellm says the model can.
"""

from __future__ import annotations

import os
from typing import Any

from branchpoint.core.redaction import is_secret_key, redact_text
from branchpoint.gateway.completion import (
    Completion,
    GenParams,
    Message,
    ModelError,
    cache_usage,
)
from branchpoint.gateway.providers.base import RETRYABLE_STATUS, ProviderKind, retry_after_from
from branchpoint.gateway.structured import PIN_PARAM, Ladder, Mode, http_error, response_format

_litellm: Any = None


def _lib() -> Any:
    global _litellm
    if _litellm is None:
        import litellm

        litellm.suppress_debug_info = True
        litellm.telemetry = False
        litellm.turn_off_message_logging = True  # keep prompts out of litellm's own logs
        _litellm = litellm
    return _litellm


def _headers_of(exc: BaseException) -> dict[str, str]:
    for attr in ("litellm_response_headers", "headers"):
        headers = getattr(exc, attr, None)
        if headers:
            return dict(headers)
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers:
        return dict(headers)
    return {}


def to_model_error(exc: BaseException, *, sent_format: bool = False) -> ModelError:
    """A litellm/httpx exception as a one-line ModelError that says whether retrying can help.

    ``sent_format``: the request carried a ``response_format``, which the server may have refused.
    """
    status = getattr(exc, "status_code", None)
    name = type(exc).__name__
    timeout_like = name in {
        "Timeout",
        "APIConnectionError",
        "ServiceUnavailableError",
        "InternalServerError",
        "BadGatewayError",
    } or isinstance(exc, (TimeoutError, ConnectionError))
    retryable = timeout_like or (isinstance(status, int) and status in RETRYABLE_STATUS)
    message = " ".join(str(getattr(exc, "message", None) or exc).split())
    head = f"{name} {status}" if status else name
    if isinstance(status, int) and status >= 400:
        detail = redact_text(message)[:1000]
        failure = http_error(
            status,
            redact_text(f"{head}: {message}")[:1000],
            detail,
            sent_format=sent_format,
            retryable_status=RETRYABLE_STATUS,
            retry_after=retry_after_from(_headers_of(exc)),
        )
        if timeout_like and not failure.refused and not failure.retryable:
            failure.retryable = True  # an overloaded server whose status litellm did not keep
        return failure
    return ModelError(
        redact_text(f"{head}: {message}")[:1000],
        retryable=retryable,
        retry_after=retry_after_from(_headers_of(exc)) if retryable else None,
    )


class LiteLLMProvider:
    def __init__(self) -> None:
        _lib()  # import litellm (seconds) now, not inside the first call's latency
        self.ladder = Ladder()

    def first_mode(self, model: str, params: GenParams) -> Mode:
        """Where the ladder starts: what litellm knows of the model (any server at an api_base
        gets ``json_schema`` first, since litellm cannot know it)."""
        litellm = _lib()
        if params.api_base:
            return "json_schema"
        try:
            if litellm.supports_response_schema(model=model):
                return "json_schema"
            supported = litellm.get_supported_openai_params(model=model) or []
        except Exception:  # an unknown model: let the server say what it takes
            return "json_schema"
        return "json_object" if "response_format" in supported else "prompt"

    def kwargs(
        self,
        model: str,
        messages: list[Message],
        params: GenParams,
        mode: Mode | None = None,
    ) -> dict[str, Any]:
        """litellm's arguments; ``mode`` is the structured-output shape (default: ``first_mode``)."""
        explicit = explicit_cache(model)
        kw: dict[str, Any] = {
            "model": model,
            "messages": [
                {"role": m.role, "content": cache_blocks(m) if explicit else m.content}
                for m in messages
            ],
            "num_retries": 0,
            "drop_params": True,  # e.g. seed on providers without it: drop rather than fail the sweep
        }
        for name in ("temperature", "top_p", "max_tokens", "seed", "stop", "api_base"):
            value = getattr(params, name)
            if value is not None:
                kw[name] = value
        key_env = params.extra.get("api_key_env")
        if key_env:  # the variable the manifest names is the key that authenticates
            value = os.environ.get(str(key_env))
            if not value:
                raise ModelError(f"${key_env} is not set (expected this model's API key in it)")
            kw["api_key"] = value
        elif (
            params.api_base and model.startswith("openai/") and not os.environ.get("OPENAI_API_KEY")
        ):
            # Local OpenAI-compatible servers need no key, but the OpenAI client insists on one.
            kw["api_key"] = "EMPTY"
        for name, value in params.extra.items():
            if name not in (PIN_PARAM, "api_key_env") and not is_secret_key(name):
                kw[name] = value  # keys come from the environment only
        if params.json_schema is not None:
            shape = response_format(mode or self.first_mode(model, params), params.json_schema)
            if shape is None:
                kw.pop("response_format", None)  # prompt mode: nothing to refuse
            else:
                kw["response_format"] = shape
        return kw

    async def complete(self, model: str, messages: list[Message], params: GenParams) -> Completion:
        if params.json_schema is None:
            return await self._send(model, messages, params, None)

        async def send(mode: Mode, shaped: list[Message]) -> Completion:
            return await self._send(model, shaped, params, mode)

        endpoint = params.api_base or model.split("/", 1)[0]
        start = self.first_mode(model, params)
        return await self.ladder.complete(endpoint, model, messages, params, send, start=start)

    async def _send(
        self, model: str, messages: list[Message], params: GenParams, mode: Mode | None
    ) -> Completion:
        litellm = _lib()
        kw = self.kwargs(model, messages, params, mode)
        try:
            response = await litellm.acompletion(**kw)
        except ModelError:
            raise
        except Exception as exc:
            raise to_model_error(exc, sent_format="response_format" in kw) from None
        try:
            choice = response.choices[0]
            message = choice.message
            usage = getattr(response, "usage", None)
            text = message.content or ""
        except (AttributeError, IndexError) as exc:
            raise ModelError(f"malformed response from {model}: {exc}", retryable=True) from None
        reasoning = getattr(message, "reasoning_content", None) or None
        cached, written = cache_usage(usage)
        return Completion(
            text=text,
            reasoning=reasoning,
            tokens_in=int(getattr(usage, "prompt_tokens", 0) or 0),
            tokens_out=int(getattr(usage, "completion_tokens", 0) or 0),
            tokens_cached=cached,
            tokens_cache_write=written,
            cost=_cost(response),
            finish_reason=getattr(choice, "finish_reason", None),
            request_id=getattr(response, "id", None),
            model=model,
        )

    async def aclose(self) -> None:
        return None


def explicit_cache(model: str) -> bool:
    """Whether the model's provider caches a prompt prefix only where the request marks it
    (Anthropic's ``cache_control``; OpenAI, DeepSeek and others cache prefixes by themselves)."""
    return model.startswith("anthropic/") or "claude" in model.lower()


def cache_blocks(message: Message) -> str | list[dict[str, Any]]:
    """A message's content with a cache breakpoint after its ``cache_prefix`` (text blocks are
    read joined, so the model sees the same text); the plain text where there is none."""
    k = message.cache_prefix
    if not k or k < 0 or not message.content:
        return message.content
    head, tail = message.content[:k], message.content[k:]
    blocks: list[dict[str, Any]] = [
        {"type": "text", "text": head, "cache_control": {"type": "ephemeral"}}
    ]
    if tail:
        blocks.append({"type": "text", "text": tail})
    return blocks


def _cost(response: Any) -> float | None:
    # litellm prices the call while logging it; an unknown model (a local server) has no price.
    hidden = getattr(response, "_hidden_params", None) or {}
    cost = hidden.get("response_cost") if isinstance(hidden, dict) else None
    try:
        return float(cost) if cost is not None else None
    except (TypeError, ValueError):
        return None


def _limit_key(model: str, params: GenParams) -> str:
    # One limit per API provider (its rate limits are per account) or per server.
    return f"litellm:{params.api_base or model.split('/', 1)[0]}"


def _check_model(model: str) -> str | None:
    if "/" in model:
        return None
    # litellm guesses a provider for bare names; being explicit avoids surprise routing.
    return f"write litellm:PROVIDER/MODEL, e.g. litellm:openai/{model}"


def _create(model: str) -> LiteLLMProvider:
    return LiteLLMProvider()


PROVIDER = ProviderKind(
    prefix="litellm",
    usage="litellm:PROVIDER/MODEL",
    create=_create,
    default_concurrency=64,
    limit_key=_limit_key,
    check_model=_check_model,
)
