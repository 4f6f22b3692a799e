"""``oai:MODEL``: an OpenAI-compatible server over a lean HTTP/1.1 client, the fast path for big sweeps.

litellm spends milliseconds of CPU per call on logging and cost bookkeeping; against a local vLLM
or llama.cpp server at thousands of calls that dominates. This client keeps its connections alive
(``branchpoint/gateway/providers/http1.py``, leaner per request than aiohttp's ClientSession) and does
nothing per call beyond JSON, each message's JSON made once. Needs ``api_base``. The key, if any, is
read from the environment variable named by ``extra.api_key_env`` (default OPENAI_API_KEY).
A request with a ``json_schema`` climbs the structured-output ladder (``branchpoint/gateway/structured.py``).
Where HTTP_PROXY / HTTPS_PROXY name a proxy for the server (and NO_PROXY does not exempt it), its
requests go through the proxy instead (``branchpoint/gateway/providers/proxied.py``).
"""

from __future__ import annotations

import asyncio
import json
import json.encoder
import os
from typing import Any

import orjson

from branchpoint.core.errors import UserError
from branchpoint.core.redaction import is_secret_key, redact_text
from branchpoint.gateway.completion import (
    Completion,
    GenParams,
    Message,
    ModelError,
    cache_usage,
)
from branchpoint.gateway.providers.base import RETRYABLE_STATUS, ProviderKind, retry_after_from
from branchpoint.gateway.providers.http1 import HTTPClient
from branchpoint.gateway.providers.proxied import ProxiedClient, proxy_for
from branchpoint.gateway.structured import PIN_PARAM, Ladder, Mode, http_error, response_format

_ascii = json.encoder.encode_basestring_ascii  # json.dumps of a str, ensure_ascii as by default
_CONTROL = {"api_key_env", PIN_PARAM}
_FRAGMENTS_KEPT = 50_000  # messages whose JSON is kept: the conversations in flight, a few times


class OpenAICompatProvider:
    def __init__(self, connector_limit: int = 1024) -> None:
        self.connector_limit = connector_limit
        self._http: HTTPClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.ladder = Ladder()
        self._fragments: dict[tuple[str, str], str] = {}  # (role, content) -> its JSON
        self._proxies: dict[str, str | None] = {}  # URL -> the proxy the environment gives it
        self._proxied: ProxiedClient | None = None
        # every request through aiohttp, proxy or not: for benchmarks/throughput.py --client-ab
        self._aiohttp_only = os.environ.get("BRANCHPOINT_OAI_CLIENT") == "aiohttp"

    def _client(self) -> HTTPClient:
        loop = asyncio.get_running_loop()
        if self._http is None or self._loop is not loop:
            # One client per event loop: connections cannot cross loops (tests run several).
            if self._http is not None:
                self._http.close()
            self._http = HTTPClient(limit=self.connector_limit)
            self._loop = loop
        return self._http

    def body(
        self,
        model: str,
        messages: list[Message],
        params: GenParams,
        mode: Mode | None = "json_schema",
    ) -> dict[str, Any]:
        """The request body; ``mode`` is the structured-output shape when there is a json_schema."""
        body: dict[str, Any] = {
            "model": model,
            "messages": [{"role": m.role, "content": m.content} for m in messages],
        }
        for name in ("temperature", "top_p", "max_tokens", "seed", "stop"):
            value = getattr(params, name)
            if value is not None:
                body[name] = value
        for name, value in params.extra.items():
            if name not in _CONTROL and not is_secret_key(name):
                body[name] = value
        if params.json_schema is not None:
            shape = response_format(mode, params.json_schema)
            if shape is None:
                body.pop("response_format", None)  # prompt mode: nothing to refuse
            else:
                body["response_format"] = shape
        return body

    def payload(
        self,
        model: str,
        messages: list[Message],
        params: GenParams,
        mode: Mode | None = "json_schema",
    ) -> bytes:
        """``json.dumps(self.body(...))``, byte for byte, with each message's JSON made once.

        A conversation's call at exchange 20 repeats the 19 exchanges before it: encoding them
        again for every call was most of the client's own CPU on long conversations."""
        return self._encode(self.body(model, [], params, mode), messages)

    def _encode(self, body: dict[str, Any], messages: list[Message]) -> bytes:
        body = dict(body)
        body.pop("messages")
        fragments = self._fragments
        if len(fragments) > _FRAGMENTS_KEPT:
            fragments.clear()  # only speed is lost: the next calls encode their messages again
        parts = []
        for m in messages:
            key = (m.role, m.content)
            part = fragments.get(key)
            if part is None:
                # what json.dumps({"role": ..., "content": ...}) writes, without its set-up cost
                part = '{"role": ' + _ascii(m.role) + ', "content": ' + _ascii(m.content) + "}"
                fragments[key] = part
            parts.append(part)
        text = '{"model": ' + _ascii(body.pop("model")) + ', "messages": [' + ", ".join(parts)
        rest = json.dumps(body)  # the keys after "messages", in the order body() puts them
        text += "]}" if rest == "{}" else "], " + rest[1:]
        return text.encode("utf-8")

    async def complete(self, model: str, messages: list[Message], params: GenParams) -> Completion:
        if not params.api_base:
            raise UserError(
                f"oai:{model} needs an api_base param, e.g. api_base=http://127.0.0.1:8000/v1"
            )
        if params.json_schema is None:
            return await self._send(model, messages, params, None)
        api_base = params.api_base

        async def send(mode: Mode, shaped: list[Message]) -> Completion:
            return await self._send(model, shaped, params, mode)

        return await self.ladder.complete(api_base, model, messages, params, send)

    async def _send(
        self, model: str, messages: list[Message], params: GenParams, mode: Mode | None
    ) -> Completion:
        assert params.api_base is not None
        url = params.api_base.rstrip("/") + "/chat/completions"
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(str(params.extra.get("api_key_env", "OPENAI_API_KEY")))
        if key:
            headers["Authorization"] = f"Bearer {key}"
        body = self.body(model, [], params, mode)
        payload = self._encode(body, messages)
        # read once per server and provider: scanning the environment took 0.3-0.7 ms here
        if url not in self._proxies:
            self._proxies[url] = proxy_for(url)
        proxy = self._proxies[url]
        try:
            if proxy is None and not self._aiohttp_only:
                response = await self._client().post(url, payload, headers)
            else:
                if self._proxied is None:
                    self._proxied = ProxiedClient(self.connector_limit)
                response = await self._proxied.post(url, payload, headers, proxy)
        except (TimeoutError, OSError) as exc:  # refused, reset, DNS, TLS, a broken answer
            raise ModelError(
                redact_text(f"{type(exc).__name__} calling {url}: {exc}"),
                retryable=True,
                unsent=isinstance(exc, ConnectionRefusedError),  # never sent: not billed
            ) from None
        raw = response.body
        if response.status >= 400:
            detail = redact_text(raw[:1000].decode("utf-8", "replace"))
            raise http_error(
                response.status,
                " ".join(f"HTTP {response.status} from {url}: {detail[:500]}".split()),
                detail,
                sent_format="response_format" in body,
                retryable_status=RETRYABLE_STATUS,
                retry_after=retry_after_from(response.headers),
            )
        try:
            # orjson: a quarter of json's cost; its errors are ValueErrors
            return chat_completion(orjson.loads(raw), model)
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            raise ModelError(
                f"malformed response from {url}: {type(exc).__name__} {exc}", retryable=True
            ) from None

    async def aclose(self) -> None:
        if self._http is not None:
            self._http.close()
        self._http = None
        if self._proxied is not None:
            await self._proxied.aclose()


def chat_completion(data: Any, model: str) -> Completion:
    """The Completion in a ``/chat/completions`` answer (also a batch's output line's body).
    Raises KeyError, IndexError, TypeError or AttributeError where the body is not one."""
    choice = data["choices"][0]
    message = choice["message"]
    usage = data.get("usage") or {}
    cached, written = cache_usage(usage)
    return Completion(
        text=message.get("content") or "",
        reasoning=message.get("reasoning_content") or message.get("reasoning") or None,
        tokens_in=int(usage.get("prompt_tokens") or 0),
        tokens_out=int(usage.get("completion_tokens") or 0),
        tokens_cached=cached,
        tokens_cache_write=written,
        finish_reason=choice.get("finish_reason"),
        request_id=data.get("id"),
        model=model,
    )


def _limit_key(model: str, params: GenParams) -> str:
    return f"oai:{params.api_base}"  # one server, whatever models it serves


def _create(model: str) -> OpenAICompatProvider:
    return OpenAICompatProvider()


PROVIDER = ProviderKind(
    prefix="oai",
    usage="oai:MODEL (with api_base)",
    create=_create,
    default_concurrency=64,
    limit_key=_limit_key,
)
