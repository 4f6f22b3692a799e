"""A small OpenAI-compatible chat server on 127.0.0.1, for tests, benchmarks and offline demos.

    python -m branchpoint.gateway.testing.openai_server --port 0 --model scripted-echo --delay-ms 100
    python -m branchpoint.gateway.testing.openai_server --model embedded          # the offline SmolLM2 over HTTP

Serves ``POST /v1/chat/completions`` and ``GET /v1/models``, and OpenAI's Batch API
(``/v1/files``, ``/v1/batches``: ``branchpoint/gateway/testing/batch_endpoints.py``; ``--batch-delay-ms``
keeps a batch pending, ``--no-batch-api`` leaves it out). The reply comes from any gateway spec
(``scripted:echo`` echoes the last message; ``embedded`` and ``hf:...`` run a real model), after an
optional fixed delay. To exercise clients' retry paths it can answer 429 with ``Retry-After``:
for the first K requests overall (``--fail-first K``), or, per model name, for the first K requests
that carry the header ``x-fail-first: K``. It never binds anything but 127.0.0.1.

``--structured`` imitates what servers accept as ``response_format``, to exercise clients'
structured-output ladders: ``json_schema`` (default: every type), ``json_object`` (json_object,
with or without a schema, and text; json_schema is refused as llama-cpp-python does) or ``none``
(only text). A refusal is answered with ``--refuse-status`` (400, or 500 as some servers do). An
accepted schema (json_schema's, or json_object's ``schema``) reaches the answering model as
``GenParams.json_schema``, so that ``embedded`` decodes guided by it like a real server would.
Every request's ``response_format`` type is kept in ``formats``, and refusals are counted.

Limits and faults, so that tests and benchmarks can check clients' limiters and retries:
``--rpm R`` and ``--tpm T`` answer 429 with a Retry-After (when the window frees a request) to
requests over R requests / T tokens (prompt + completion of the requests answered) in any
sliding window of ``--window-s`` seconds (default 60; the limits scale with it). ``--fault-429``,
``--fault-500``, ``--fault-hang`` (no answer for ``--hang-s``, past any client's timeout) and
``--fault-malformed`` (a 200 whose body is not JSON) each fault that share of the requests, drawn
from ``--fault-seed``, so that a run is reproducible. ``GET /v1/_stats`` counts each answer and
reports the most requests that arrived in any window (and in any 60 s), with each arrival's time
(``time.time()``) and each 429's time and Retry-After, and ``billed``: per model name, the prompt
and completion tokens of every answer made (``bill_usd`` prices them). ``--prefix-cache`` caches
prompt prefixes as OpenAI does (``branchpoint/gateway/testing/prefix_cache.py``) and reports and
bills the tokens it served as cached. An answer is billed when it
is made, before any delay, as a provider bills a call whose client went away before the reply:
what a test that kills its client compares the client's recorded spend with.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import itertools
import random
import subprocess
import sys
import threading
import time
from collections import defaultdict, deque
from collections.abc import Mapping
from typing import Any, Literal

import orjson

from branchpoint.gateway.completion import Completion, GenParams, Message, ModelError
from branchpoint.gateway.providers.scripted import BUILTIN, ScriptedModel
from branchpoint.gateway.testing.http_server import HTTPServer, Ready, Reply, Request
from branchpoint.gateway.testing.prefix_cache import PrefixCache, prompt_tokens
from branchpoint.gateway.thinking import split_reasoning

HOST = "127.0.0.1"
ALIASES = {"scripted-echo": "scripted:echo", "echo": "scripted:echo"}
Structured = Literal["json_schema", "json_object", "none"]
STRUCTURED: tuple[Structured, ...] = ("json_schema", "json_object", "none")
ACCEPTS: dict[str, set[str]] = {
    "json_schema": {"text", "json_schema", "json_object"},
    "json_object": {"text", "json_object"},
    "none": {"text"},
}
# What the imitated servers say when they refuse: the first is pydantic's message on
# llama-cpp-python's request model, the second that of a server without the field at all.
REFUSALS: dict[str, str] = {
    "json_object": (
        "1 validation error for CreateChatCompletionRequest\nresponse_format.type\n"
        "  Input should be 'text' or 'json_object' [type=literal_error, input_value={got!r}]"
    ),
    "none": "response_format is not supported by this server",
}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multi-part content: keep the text parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


# path -> the one method it answers
_ROUTES = {
    "/v1/chat/completions": "POST",
    "/chat/completions": "POST",
    "/v1/models": "GET",
    "/models": "GET",
    "/v1/_stats": "GET",
}
_CHATS = {path for path, method in _ROUTES.items() if method == "POST"}
_ROLES = {"developer": "system", "system": "system", "assistant": "assistant"}


def _role(role: Any) -> str:
    return _ROLES.get(str(role), "user")


# Each request resends the conversation so far: validating every message again was the biggest
# part of this server's CPU per call.
@functools.lru_cache(maxsize=1 << 16)
def _message(role: str, content: str) -> Message:
    return Message(role=role, content=content)


def _messages(raw: list[dict[str, Any]]) -> list[Message]:
    return [_message(_role(m.get("role")), _text(m.get("content"))) for m in raw]


class ChatServer:
    def __init__(
        self,
        model: str = "scripted:echo",
        *,
        delay_s: float = 0.0,
        fail_first: int = 0,
        retry_after: float = 1.0,
        reasoning: str | None = None,
        require_key: str | None = None,
        structured: Structured = "json_schema",
        refuse_status: int = 400,
        models: Mapping[str, Any] | None = None,
        routes: Mapping[str, str] | None = None,
        rpm: float | None = None,
        tpm: float | None = None,
        window_s: float = 60.0,
        fault_429: float = 0.0,
        fault_500: float = 0.0,
        fault_hang: float = 0.0,
        fault_malformed: float = 0.0,
        fault_seed: int = 0,
        hang_s: float = 3600.0,
        batch_api: bool = True,
        batch_delay_s: float = 0.0,
        prefix_cache: bool = False,
        keep_bodies: bool = False,
    ) -> None:
        from branchpoint.gateway.gateway import Gateway
        from branchpoint.gateway.testing.batch_endpoints import BatchEndpoints

        if structured not in STRUCTURED:
            raise ValueError(f"structured={structured!r}: expected one of {', '.join(STRUCTURED)}")
        self.spec = ALIASES.get(model, model)
        self.gateway = Gateway(cache=False, max_attempts=1, timeout_s=None)
        for spec, provider in (models or {}).items():  # e.g. a scripted judge, for tests
            self.gateway.register(spec, provider)
        self._registered = set(models or {})
        self.structured = structured
        self.refuse_status = refuse_status
        self.formats: list[str] = []  # each request's response_format type ("text" when none)
        self.refusals = 0
        self.delay_s = delay_s
        self.fail_first = fail_first
        self.retry_after = retry_after
        self.reasoning = reasoning
        self.require_key = require_key
        self.requests = 0
        # What throughput benchmarks read from GET /v1/_stats: how many chats were answered at
        # once at most, and when the first arrived and the last was answered (time.time()).
        self.in_flight = 0
        self.peak_in_flight = 0
        self.first_at: float | None = None
        self.last_at: float | None = None
        self.failed_by_model: dict[str, int] = defaultdict(int)
        # model name -> {"prompt_tokens", "cached_tokens", "completion_tokens", "answers"}: what
        # was billed (cached_tokens: the part of prompt_tokens the prefix cache served)
        self.billed: dict[str, dict[str, int]] = {}
        # OpenAI-style automatic prompt caching (branchpoint/gateway/testing/prefix_cache.py), one
        # cache per model name; None: no cache, no cached_tokens in any answer
        self.prefix_caches: dict[str, PrefixCache] | None = {} if prefix_cache else None
        # every chat request's body as it arrived (keep_bodies): what a test rebuilds a stored
        # call's request against, byte for byte
        self.bodies: list[bytes] | None = [] if keep_bodies else None
        # a request's model name -> the spec that answers it (default: ``model``)
        self.routes = dict(routes or {})
        faults = (fault_429, fault_500, fault_hang, fault_malformed)
        if any(p < 0 for p in faults) or sum(faults) > 1:
            raise ValueError("fault shares must be >= 0 and sum to at most 1")
        self.faults = dict(zip(("429", "500", "hang", "malformed"), faults, strict=True))
        self.rng = random.Random(fault_seed)
        self.hang_s = hang_s
        self.window_s = window_s
        self.rpm, self.tpm = rpm, tpm
        self.per_window = rpm * window_s / 60 if rpm else None
        self.tokens_per_window = tpm * window_s / 60 if tpm else None
        self._accepted: deque[float] = deque()  # monotonic times of requests within the rpm limit
        self._spent: deque[tuple[float, int]] = deque()  # (monotonic time, tokens) answered
        self.arrivals: list[float] = []  # time.time() of every chat request
        self.throttled_at: list[tuple[float, float]] = []  # (time.time(), Retry-After) of 429s
        self.counts: dict[str, int] = defaultdict(int)  # answer kind -> how many
        self._last_headers: Mapping[str, str] = {}
        self._ids = itertools.count(1)
        self._direct_models: dict[str, ScriptedModel | None] = {}
        # what only chat() does: a key to check, limits, faults
        self._general = bool(
            require_key is not None
            or fail_first
            or rpm
            or tpm
            or any(self.faults.values())
            or keep_bodies
        )
        # OpenAI's /v1/files and /v1/batches, answered by chat() (None: a server without them)
        self.batch = BatchEndpoints(self.chat, delay_s=batch_delay_s) if batch_api else None

    @property
    def last_headers(self) -> dict[str, str]:
        """The headers of the last chat request, names in lower case."""
        return {k.lower(): v for k, v in self._last_headers.items()}

    async def handle(self, request: Request) -> Reply:
        """Route one HTTP request."""
        path = request.path.rstrip("/")
        if self.batch is not None and self.batch.handles(path):
            if (
                self.require_key is not None
                and request.headers.get("authorization") != f"Bearer {self.require_key}"
            ):
                return self._error(401, "invalid api key", "authentication_error")
            return await self.batch.handle(request)
        method = _ROUTES.get(path)
        if method is None:
            return Reply(404, b"404: Not Found", "text/plain")
        if request.method != method:
            return Reply(405, b"405: Method Not Allowed", "text/plain")
        if method == "POST":
            return await self.chat(request)
        return self.stats() if path.endswith("_stats") else self.models()

    async def aclose(self) -> None:
        if self.batch is not None:
            await self.batch.aclose()
        await self.gateway.aclose()

    def models(self) -> Reply:
        return _json_response(
            {
                "object": "list",
                "data": [{"id": self.spec, "object": "model", "owned_by": "branchpoint"}],
            }
        )

    def stats(self) -> Reply:
        return _json_response(
            {
                "requests": self.requests,
                "peak_in_flight": self.peak_in_flight,
                "first_at": self.first_at,
                "last_at": self.last_at,
                "counts": dict(self.counts),
                "window_s": self.window_s,
                "max_in_window": max_in_window(self.arrivals, self.window_s),
                "max_per_60s": max_in_window(self.arrivals, 60.0),
                "arrivals": self.arrivals,
                "throttled_at": self.throttled_at,
                "batches_created": self.batch.created if self.batch is not None else 0,
                "billed": self.billed,
            }
        )

    def _error(
        self, status: int, message: str, kind: str, headers: dict[str, str] | None = None
    ) -> Reply:
        body = {"error": {"message": message, "type": kind, "code": status}}
        return _json_response(body, status, headers)

    async def chat(self, request: Request) -> Reply:
        if self.bodies is not None:
            self.bodies.append(request.body)
        self._arrive(request)
        try:
            return await self._chat(request)
        finally:
            self._leave()

    def _arrive(self, request: Request) -> None:
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        now = time.time()
        if self.first_at is None:
            self.first_at = now
        self.requests += 1
        self.arrivals.append(now)
        self._last_headers = request.headers  # copied only when read: most never are

    def _leave(self) -> None:
        self.in_flight -= 1
        self.last_at = time.time()

    def ready(self, request: Request) -> Ready | None:
        """The answer to a plain chat request, made at once, with the delay to hold it back
        (``HTTPServer``'s fast path), where nothing on the way can differ from ``chat``'s: a
        built-in scripted model answers, and neither a key, a limit, a fault nor a structured
        format is asked for. None sends the request down ``chat``."""
        if self._general or request.method != "POST" or request.path.rstrip("/") not in _CHATS:
            return None
        if "x-fail-first" in request.headers:
            return None
        try:
            body = orjson.loads(request.body)
            raw = body["messages"]
            if body.get("response_format") is not None:
                return None
            model = str(body.get("model") or self.spec)
            direct = self._direct(self.routes.get(model, self.spec))
            if direct is None:
                return None
            messages = _messages(raw)
        except (ValueError, KeyError, TypeError, AttributeError):
            return None  # chat() says what is wrong with it
        self._arrive(request)
        self.formats.append("text")
        try:
            completion = split_reasoning(direct.reply_for(messages, _params(body, None)))
        except ModelError as exc:
            self.counts["error_500"] += 1
            return self._error(500, exc.reason, "server_error"), self.delay_s, self._leave
        self.counts["ok"] += 1
        return self._answered(model, completion, messages), self.delay_s, self._leave

    async def _chat(self, request: Request) -> Reply:
        if (
            self.require_key is not None
            and request.headers.get("authorization") != f"Bearer {self.require_key}"
        ):
            return self._error(401, "invalid api key", "authentication_error")
        try:
            body = orjson.loads(request.body)
            messages = _messages(body["messages"])
        except (ValueError, KeyError, TypeError, AttributeError) as exc:  # JSONDecodeError too
            return self._error(400, f"bad request body: {exc}", "invalid_request_error")
        model = str(body.get("model") or self.spec)

        limit = int(request.headers.get("x-fail-first", "0") or 0)
        if self.requests <= self.fail_first or self.failed_by_model[model] < limit:
            if self.requests > self.fail_first:
                self.failed_by_model[model] += 1
            return self._throttle("fail_first", self.retry_after)
        wait = self._over_limits()
        if wait is not None:
            return self._throttle(wait[0], wait[1])
        fault = self._fault()
        if fault == "429":
            return self._throttle("fault_429", self.retry_after)
        if fault == "500":
            self.counts["fault_500"] += 1
            return self._error(500, "injected server error", "server_error")
        if fault == "hang":
            self.counts["fault_hang"] += 1
            await asyncio.sleep(self.hang_s)  # the client gives up first
            return self._error(504, "hung", "server_error")

        shape = body.get("response_format")
        kind = str(shape.get("type", "")) if isinstance(shape, dict) else "text"
        self.formats.append(kind)
        if kind not in ACCEPTS[self.structured]:
            self.refusals += 1
            said = REFUSALS.get(self.structured, "response_format type {got!r} is unknown")
            kind_name = "invalid_request_error" if self.refuse_status < 500 else "server_error"
            return self._error(self.refuse_status, said.format(got=kind), kind_name)
        schema = _schema_of(shape) if kind != "text" else None

        params = _params(body, schema)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        try:
            spec = self.routes.get(model, self.spec)
            direct = self._direct(spec)
            if direct is not None:
                completion = split_reasoning(direct.reply_for(messages, params))
            else:
                completion, _ = await self.gateway.complete(
                    spec, messages, params, purpose="server"
                )
        except ModelError as exc:
            self.counts["error_500"] += 1
            return self._error(500, exc.reason, "server_error")
        if self.tokens_per_window is not None:
            self._spent.append((time.monotonic(), completion.tokens_in + completion.tokens_out))
        if fault == "malformed":
            self.counts["fault_malformed"] += 1
            return Reply(200, b'{"id": "chatcmpl-broken", "choices": [{"mess')
        self.counts["ok"] += 1
        return self._answered(model, completion, messages)

    def _answered(self, model: str, completion: Completion, messages: list[Message]) -> Reply:
        bill = self.billed.setdefault(
            model, {"prompt_tokens": 0, "cached_tokens": 0, "completion_tokens": 0, "answers": 0}
        )
        usage: dict[str, Any] = {
            "prompt_tokens": completion.tokens_in,
            "completion_tokens": completion.tokens_out,
            "total_tokens": completion.tokens_in + completion.tokens_out,
        }
        if self.prefix_caches is not None:
            cache = self.prefix_caches.setdefault(model, PrefixCache())
            _, cached = cache.serve(prompt_tokens((m.role, m.content) for m in messages))
            cached = min(cached, completion.tokens_in)
            usage["prompt_tokens_details"] = {"cached_tokens": cached}
            bill["cached_tokens"] += cached
        bill["prompt_tokens"] += completion.tokens_in
        bill["completion_tokens"] += completion.tokens_out
        bill["answers"] += 1
        message: dict[str, Any] = {"role": "assistant", "content": completion.text}
        reasoning = completion.reasoning or self.reasoning
        if reasoning:
            message["reasoning_content"] = reasoning
        return _json_response(
            {
                "id": f"chatcmpl-bp{next(self._ids)}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": completion.finish_reason or "stop",
                    }
                ],
                "usage": usage,
            }
        )

    def _direct(self, spec: str) -> ScriptedModel | None:
        """A built-in scripted model answers without the gateway: its reply is the same, and the
        gateway's work per call (hash, limiter, timeout) would make this server, not the client
        a benchmark measures, the bottleneck at thousands of requests a second."""
        if spec in self._direct_models:
            return self._direct_models[spec]
        model: ScriptedModel | None = None
        kind, _, name = spec.partition(":")
        if kind == "scripted" and name in BUILTIN and spec not in self._registered:
            model = BUILTIN[name]()
        self._direct_models[spec] = model
        return model

    def _throttle(self, why: str, retry_after: float) -> Reply:
        self.counts[why] += 1
        self.counts["429"] += 1
        self.throttled_at.append((time.time(), max(retry_after, 0.001)))
        return self._error(
            429,
            "rate limited, slow down",
            "rate_limit_error",
            headers={"Retry-After": f"{max(retry_after, 0.001):g}"},
        )

    def _over_limits(self) -> tuple[str, float] | None:
        """(which limit, seconds until it frees) when this request is over --rpm or --tpm."""
        now = time.monotonic()
        start = now - self.window_s
        while self._accepted and self._accepted[0] <= start:
            self._accepted.popleft()
        while self._spent and self._spent[0][0] <= start:
            self._spent.popleft()
        if self.per_window is not None and len(self._accepted) >= self.per_window:
            return "rpm_429", self._accepted[0] - start
        spent = sum(n for _, n in self._spent)
        if self.tokens_per_window is not None and self._spent and spent >= self.tokens_per_window:
            return "tpm_429", self._spent[0][0] - start
        self._accepted.append(now)
        return None

    def _fault(self) -> str | None:
        if not any(self.faults.values()):
            return None
        u = self.rng.random()  # one draw a request: the same seed faults the same requests
        for kind, share in self.faults.items():
            if u < share:
                return kind
            u -= share
        return None


def _params(body: dict[str, Any], schema: dict[str, Any] | None) -> GenParams:
    stop = body.get("stop")
    return GenParams(
        temperature=body.get("temperature"),
        top_p=body.get("top_p"),
        max_tokens=body.get("max_tokens") or body.get("max_completion_tokens"),
        seed=body.get("seed"),
        stop=[stop] if isinstance(stop, str) else stop,
        json_schema=schema,
    )


def _json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Reply:
    return Reply(status, orjson.dumps(body), headers=headers or {})


def bill_usd(
    billed: Mapping[str, Mapping[str, int]],
    input_per_mtok: float,
    output_per_mtok: float,
    cached_per_mtok: float | None = None,
) -> float:
    """USD of ``billed`` (``ChatServer.billed``, or ``billed`` of ``GET /v1/_stats``) at one
    price per million tokens, every model name together; the prefix cache's tokens at
    ``cached_per_mtok`` (None: as any input token)."""
    cached_rate = input_per_mtok if cached_per_mtok is None else cached_per_mtok
    total = 0.0
    for b in billed.values():
        cached = b.get("cached_tokens", 0)
        total += (b["prompt_tokens"] - cached) * input_per_mtok / 1e6
        total += cached * cached_rate / 1e6 + b["completion_tokens"] * output_per_mtok / 1e6
    return total


def max_in_window(times: list[float], window_s: float) -> int:
    """The most of ``times`` (sorted) in any half-open window ``[t, t + window_s)``."""
    best, lo = 0, 0
    for hi, t in enumerate(times):
        while times[lo] <= t - window_s:
            lo += 1
        best = max(best, hi - lo + 1)
    return best


def _schema_of(shape: dict[str, Any]) -> dict[str, Any] | None:
    """The schema a request's response_format carries, where it carries one."""
    inner = shape.get("json_schema")
    schema = inner.get("schema") if isinstance(inner, dict) else shape.get("schema")
    return schema if isinstance(schema, dict) else None


class Listener:
    """A ChatServer listening on 127.0.0.1 (``start``); ``cleanup`` stops both."""

    def __init__(self, server: ChatServer) -> None:
        self.server = server
        self.http = HTTPServer(server.handle, server.ready)

    async def cleanup(self) -> None:
        await self.http.cleanup()
        await self.server.aclose()


async def start(server: ChatServer, port: int = 0) -> tuple[Listener, str]:
    """Start serving on 127.0.0.1; returns the listener and the base URL (``http://127.0.0.1:PORT/v1``)."""
    listener = Listener(server)
    bound = await listener.http.start(HOST, port)
    return listener, f"http://{HOST}:{bound}/v1"


class ServerThread:
    """The server on its own event loop in a daemon thread (for tests in a synchronous process)."""

    def __init__(self, model: str = "scripted:echo", port: int = 0, **kw: Any) -> None:
        self.server_args = (model, kw)
        self.port = port
        self.server: ChatServer | None = None
        self.base_url = ""
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="openai-server", daemon=True)
        self._runner: Listener | None = None

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            model, kw = self.server_args
            self.server = ChatServer(model, **kw)
            self._runner, self.base_url = self._loop.run_until_complete(
                start(self.server, self.port)
            )
        except BaseException as exc:  # reported to the starting thread
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()

    def start(self) -> str:
        self._thread.start()
        self._ready.wait(60)
        if self._error is not None:
            raise self._error
        return self.base_url

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def spawn(delay_ms: float = 0.0, *args: str) -> tuple[subprocess.Popen[str], str]:
    """This server in a process of its own (benchmarks: its CPU is not the client's), on a free
    port; returns the process and its base URL. ``args`` are more command-line flags."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "branchpoint.gateway.testing.openai_server", "--port", "0"]
        + ["--delay-ms", str(delay_ms), *args],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    if not url.startswith(f"http://{HOST}:"):
        proc.kill()
        raise RuntimeError(f"the loopback server did not start: {url!r}")
    return proc, url


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m branchpoint.gateway.testing.openai_server",
        description="OpenAI-compatible chat server on 127.0.0.1 (tests, benchmarks, offline demos).",
    )
    parser.add_argument("--port", type=int, default=0, help="port to bind (0: any free port)")
    parser.add_argument(
        "--model",
        default="scripted:echo",
        help="gateway spec that answers: scripted-echo (default), embedded, hf:PATH, ...",
    )
    parser.add_argument("--delay-ms", type=float, default=0.0, help="fixed delay before each reply")
    parser.add_argument(
        "--fail-first", type=int, default=0, help="answer 429 to the first K requests"
    )
    parser.add_argument(
        "--retry-after", type=float, default=1.0, help="Retry-After seconds sent with 429s"
    )
    parser.add_argument("--reasoning", default=None, help="reasoning_content to add to every reply")
    parser.add_argument(
        "--structured",
        choices=STRUCTURED,
        default="json_schema",
        help="response_format types accepted: json_schema (all), json_object (no json_schema), "
        "none (text only)",
    )
    parser.add_argument(
        "--refuse-status",
        type=int,
        default=400,
        help="HTTP status of a refused response_format (400, or 500 like some servers)",
    )
    parser.add_argument("--rpm", type=float, default=None, help="requests per minute at most")
    parser.add_argument("--tpm", type=float, default=None, help="tokens per minute at most")
    parser.add_argument(
        "--window-s", type=float, default=60.0, help="sliding window of --rpm/--tpm (seconds)"
    )
    for kind, what in (
        ("429", "a 429 with Retry-After"),
        ("500", "a 500"),
        ("hang", "no answer for --hang-s"),
        ("malformed", "a 200 whose body is not JSON"),
    ):
        parser.add_argument(
            f"--fault-{kind}", type=float, default=0.0, metavar="P", help=f"share answered {what}"
        )
    parser.add_argument("--fault-seed", type=int, default=0, help="seed of the fault draws")
    parser.add_argument("--hang-s", type=float, default=3600.0, help="how long a hang lasts")
    parser.add_argument(
        "--batch-delay-ms",
        type=float,
        default=0.0,
        help="how long a batch (/v1/batches) stays in_progress before its results are ready",
    )
    parser.add_argument(
        "--no-batch-api",
        action="store_true",
        help="answer 404 to /v1/files and /v1/batches, as a server without a batch API",
    )
    parser.add_argument(
        "--prefix-cache",
        action="store_true",
        help="cache prompt prefixes as OpenAI does (128-token blocks from 1,024 tokens) and "
        "report them as usage.prompt_tokens_details.cached_tokens",
    )
    args = parser.parse_args(argv)

    async def serve() -> None:
        server = ChatServer(
            args.model,
            delay_s=args.delay_ms / 1000,
            fail_first=args.fail_first,
            retry_after=args.retry_after,
            reasoning=args.reasoning,
            structured=args.structured,
            refuse_status=args.refuse_status,
            rpm=args.rpm,
            tpm=args.tpm,
            window_s=args.window_s,
            fault_429=args.fault_429,
            fault_500=args.fault_500,
            fault_hang=args.fault_hang,
            fault_malformed=args.fault_malformed,
            fault_seed=args.fault_seed,
            hang_s=args.hang_s,
            batch_api=not args.no_batch_api,
            batch_delay_s=args.batch_delay_ms / 1000,
            prefix_cache=args.prefix_cache,
        )
        runner, url = await start(server, args.port)
        print(url, flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    try:
        from branchpoint.gateway import event_loop

        with asyncio.Runner(loop_factory=event_loop.loop_factory()) as runner:
            runner.run(serve())
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
