"""``litellm:PROVIDER/MODEL``: any model litellm knows, or any OpenAI-compatible server via ``api_base``.

Keys come from the environment only (OPENAI_API_KEY, ANTHROPIC_API_KEY, ...): an ``api_key`` in
params is dropped before the call and never stored. litellm's own retries are off; the gateway
retries, honouring Retry-After.
"""

from __future__ import annotations

import os
from typing import Any

from core.redaction import is_secret_key, redact_text
from simulator.completion import Completion, GenParams, Message, ModelError
from simulator.providers.base import RETRYABLE_STATUS, retry_after_from

# Before litellm is imported: no cost-map download, no telemetry.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_TELEMETRY", "False")

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


def to_model_error(exc: BaseException) -> ModelError:
    """A litellm/httpx exception as a one-line ModelError that says whether retrying can help."""
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
    return ModelError(
        redact_text(f"{head}: {message}")[:1000],
        retryable=retryable,
        retry_after=retry_after_from(_headers_of(exc)) if retryable else None,
    )


class LiteLLMProvider:
    default_concurrency = 64

    def __init__(self) -> None:
        _lib()  # import litellm (seconds) now, not inside the first call's latency

    def kwargs(self, model: str, messages: list[Message], params: GenParams) -> dict[str, Any]:
        kw: dict[str, Any] = {
            "model": model,
            "messages": [{"role": m.role, "content": m.content} for m in messages],
            "num_retries": 0,
            "drop_params": True,  # e.g. seed on providers without it: drop rather than fail the sweep
        }
        for name in ("temperature", "top_p", "max_tokens", "seed", "stop", "api_base"):
            value = getattr(params, name)
            if value is not None:
                kw[name] = value
        if params.api_base and model.startswith("openai/") and not os.environ.get("OPENAI_API_KEY"):
            # Local OpenAI-compatible servers need no key, but the OpenAI client insists on one.
            kw["api_key"] = "EMPTY"
        if params.json_schema is not None and (
            params.api_base or _lib().supports_response_schema(model=model)
        ):
            kw["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "output", "schema": params.json_schema},
            }
        for name, value in params.extra.items():
            if not is_secret_key(name):  # keys come from the environment only
                kw[name] = value
        return kw

    async def complete(self, model: str, messages: list[Message], params: GenParams) -> Completion:
        litellm = _lib()
        try:
            response = await litellm.acompletion(**self.kwargs(model, messages, params))
        except ModelError:
            raise
        except Exception as exc:
            raise to_model_error(exc) from None
        try:
            choice = response.choices[0]
            message = choice.message
            usage = getattr(response, "usage", None)
            text = message.content or ""
        except (AttributeError, IndexError) as exc:
            raise ModelError(f"malformed response from {model}: {exc}", retryable=True) from None
        reasoning = getattr(message, "reasoning_content", None) or None
        return Completion(
            text=text,
            reasoning=reasoning,
            tokens_in=int(getattr(usage, "prompt_tokens", 0) or 0),
            tokens_out=int(getattr(usage, "completion_tokens", 0) or 0),
            cost=_cost(response),
            finish_reason=getattr(choice, "finish_reason", None),
            request_id=getattr(response, "id", None),
            model=model,
        )

    async def aclose(self) -> None:
        return None


def _cost(response: Any) -> float | None:
    # litellm prices the call while logging it; an unknown model (a local server) has no price.
    hidden = getattr(response, "_hidden_params", None) or {}
    cost = hidden.get("response_cost") if isinstance(hidden, dict) else None
    try:
        return float(cost) if cost is not None else None
    except (TypeError, ValueError):
        return None
