"""``oai:MODEL``: an OpenAI-compatible server over raw aiohttp, the fast path for big sweeps.

litellm spends milliseconds of CPU per call on logging and cost bookkeeping; against a local vLLM
or llama.cpp server at thousands of calls that dominates. This client keeps one ClientSession with
a large connector and does nothing per call beyond JSON. Needs ``api_base``. The key, if any, is
read from the environment variable named by ``extra.api_key_env`` (default OPENAI_API_KEY).
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from core.errors import UserError
from core.redaction import is_secret_key, redact_text
from simulator.completion import Completion, GenParams, Message, ModelError
from simulator.providers.base import RETRYABLE_STATUS, retry_after_from

_CONTROL = {"api_key_env"}


class OpenAICompatProvider:
    default_concurrency = 64

    def __init__(self, connector_limit: int = 1024) -> None:
        self.connector_limit = connector_limit
        self._session: Any = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _client(self) -> Any:
        import aiohttp

        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            # One session per event loop: aiohttp sessions cannot cross loops (tests run several).
            connector = aiohttp.TCPConnector(limit=self.connector_limit, ttl_dns_cache=300)
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=aiohttp.ClientTimeout(total=None)
            )
            self._loop = loop
        return self._session

    def body(self, model: str, messages: list[Message], params: GenParams) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": model,
            "messages": [{"role": m.role, "content": m.content} for m in messages],
        }
        for name in ("temperature", "top_p", "max_tokens", "seed", "stop"):
            value = getattr(params, name)
            if value is not None:
                body[name] = value
        if params.json_schema is not None:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "output", "schema": params.json_schema},
            }
        for name, value in params.extra.items():
            if name not in _CONTROL and not is_secret_key(name):
                body[name] = value
        return body

    async def complete(self, model: str, messages: list[Message], params: GenParams) -> Completion:
        import aiohttp

        if not params.api_base:
            raise UserError(
                f"oai:{model} needs an api_base param, e.g. api_base=http://127.0.0.1:8000/v1"
            )
        url = params.api_base.rstrip("/") + "/chat/completions"
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(str(params.extra.get("api_key_env", "OPENAI_API_KEY")))
        if key:
            headers["Authorization"] = f"Bearer {key}"
        payload = json.dumps(self.body(model, messages, params))
        try:
            async with self._client().post(url, data=payload, headers=headers) as response:
                raw = await response.read()
                if response.status >= 400:
                    retryable = response.status in RETRYABLE_STATUS
                    detail = raw[:500].decode("utf-8", "replace")
                    raise ModelError(
                        redact_text(
                            " ".join(f"HTTP {response.status} from {url}: {detail}".split())
                        ),
                        retryable=retryable,
                        retry_after=retry_after_from(response.headers) if retryable else None,
                    )
        except (TimeoutError, aiohttp.ClientError, ConnectionError) as exc:
            raise ModelError(
                redact_text(f"{type(exc).__name__} calling {url}: {exc}"), retryable=True
            ) from None
        try:
            data = json.loads(raw)
            choice = data["choices"][0]
            message = choice["message"]
            usage = data.get("usage") or {}
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise ModelError(
                f"malformed response from {url}: {type(exc).__name__} {exc}", retryable=True
            ) from None
        return Completion(
            text=message.get("content") or "",
            reasoning=message.get("reasoning_content") or message.get("reasoning") or None,
            tokens_in=int(usage.get("prompt_tokens") or 0),
            tokens_out=int(usage.get("completion_tokens") or 0),
            finish_reason=choice.get("finish_reason"),
            request_id=data.get("id"),
            model=model,
        )

    async def aclose(self) -> None:
        if self._session is not None and not self._session.closed:
            try:
                await self._session.close()
            except RuntimeError:
                pass  # its loop is gone (a test's asyncio.run ended); nothing left to release
        self._session = None
