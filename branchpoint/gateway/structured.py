"""Structured output on any OpenAI-compatible server: a ladder of request shapes, and its memory.

Servers differ in what ``response_format`` they take: some accept ``json_schema``, some only
``json_object`` (with or without a schema), some neither, and they refuse the others with a 400,
a 422 or a 500. A request with ``GenParams.json_schema`` climbs down this ladder:

1. ``json_schema``: ``{"type": "json_schema", "json_schema": {"name": "output", "schema": ...}}``;
2. ``json_object``: ``{"type": "json_object", "schema": ...}`` (servers such as llama.cpp's
   Python server enforce that schema; others ignore it), with the schema also in the prompt;
3. ``prompt``: no ``response_format``; the schema and an instruction to answer with JSON only are
   added to the system message.

The caller validates every answer with pydantic whatever the mode: no mode is trusted.

It steps down only when the server refuses the shape (``refusal``): a 4xx other than auth, not
found, too large, timeout or rate limit, or a 5xx whose body names ``response_format`` (or one
of its types, ``json_schema``/``json_object``, as llama.cpp's servers do). Any other
error is an error of that call, retried or not by the gateway as usual. The mode that works is
remembered per endpoint and model (``Ladder``) for the life of the provider, i.e. of the gateway
(one run or one judging job), and while it is not yet known only one call at a time probes, so
the run pays at most one refused call per mode. A mode that has worked is only abandoned when
a refusal names ``response_format`` (a plain 400 then is about that one request, e.g. its length).

``extra.structured`` pins a mode (``--judge-param structured=json_object``); ``auto`` (the
default) climbs. A refused pinned mode is an error, not retried. Each call records the mode used
(``Completion.structured``) and the refusals it met on the way (``Completion.structured_refused``).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from branchpoint.core.errors import UserError
from branchpoint.gateway.completion import Completion, GenParams, Message, ModelError

Mode = Literal["json_schema", "json_object", "prompt"]
MODES: tuple[Mode, ...] = ("json_schema", "json_object", "prompt")
PIN_PARAM = "structured"  # the name under GenParams.extra that pins a mode
PIN_VALUES = ("auto", *MODES)

# 4xx that say nothing about the request's shape: wrong key, wrong model, too big, slow down.
_NOT_A_REFUSAL = {401, 402, 403, 404, 408, 409, 413, 425, 429}
_NAMES_FORMAT = re.compile(r"response[_ ]?format", re.I)
_NAMES_JSON_OBJECT = re.compile(r"json[_ ]?object", re.I)
_NAMES_JSON_SCHEMA = re.compile(r"json[_ ]?schema", re.I)

SCHEMA_NOTE = (
    "Answer with one JSON object and nothing else: no prose before or after it, no code fence. "
    "It must be valid against this JSON Schema:\n{schema}"
)


# ------------------------------------------------------------------------------- request shapes


def pinned_mode(params: GenParams | Mapping[str, Any], *, where: str = "params") -> Mode | None:
    """The mode pinned by ``extra.structured``, or None for ``auto``. UserError for other values."""
    if isinstance(params, GenParams):
        value = params.extra.get(PIN_PARAM)
    else:  # a mapping as users write it: the name at the top or under extra
        value = params.get(PIN_PARAM, (params.get("extra") or {}).get(PIN_PARAM))
    if value is None or value == "auto":
        return None
    if value not in MODES:
        raise UserError(
            f"{where}: {PIN_PARAM}: {value!r} is not a structured-output mode "
            f"(expected one of {', '.join(PIN_VALUES)})"
        )
    return cast(Mode, value)


def response_format(mode: Mode | None, schema: dict[str, Any]) -> dict[str, Any] | None:
    """The ``response_format`` body field for ``mode`` (None for ``prompt`` or no mode)."""
    if mode == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": "output", "schema": schema}}
    if mode == "json_object":
        return {"type": "json_object", "schema": schema}
    return None


def messages_for(
    mode: Mode | None, messages: list[Message], schema: dict[str, Any]
) -> list[Message]:
    """The messages to send in ``mode``: below ``json_schema`` the schema is spelt out in the prompt."""
    if mode not in ("json_object", "prompt"):
        return messages
    note = SCHEMA_NOTE.format(schema=json.dumps(schema, ensure_ascii=False, sort_keys=True))
    # One system message, first: some chat templates reject a second one or one further down.
    if messages and messages[0].role == "system":
        head = Message(role="system", content=f"{messages[0].content}\n\n{note}")
        return [head, *messages[1:]]
    return [Message(role="system", content=note), *messages]


# ------------------------------------------------------------------------------- refusals


def is_refusal(status: int, body: str) -> bool:
    """Does this HTTP failure of a request that carried ``response_format`` refuse its shape?"""
    if 400 <= status < 500:
        return status not in _NOT_A_REFUSAL
    return status >= 500 and _names_format(body)


def http_error(
    status: int,
    reason: str,
    body: str,
    *,
    sent_format: bool,
    retryable_status: set[int],
    retry_after: float | None,
) -> ModelError:
    """The ModelError for an HTTP failure; a refused request shape is never retryable."""
    refused = sent_format and is_refusal(status, body)
    retryable = status in retryable_status and not refused
    return ModelError(
        reason,
        retryable=retryable,
        retry_after=retry_after if retryable else None,
        status=status,
        detail=body[:1000],
        refused=refused,
    )


def _names_format(text: str) -> bool:
    return any(p.search(text) for p in (_NAMES_FORMAT, _NAMES_JSON_OBJECT, _NAMES_JSON_SCHEMA))


def _definite(exc: ModelError) -> bool:
    """A refusal that says it is about response_format, not only a bare 4xx."""
    return _names_format(exc.detail or exc.reason)


def _next_mode(mode: Mode, exc: ModelError) -> Mode:
    if mode != "json_schema":
        return "prompt"
    text = exc.detail or exc.reason
    if _NAMES_JSON_OBJECT.search(text):
        return "json_object"  # e.g. "Input should be 'text' or 'json_object'"
    if _NAMES_FORMAT.search(text) and not _NAMES_JSON_SCHEMA.search(text):
        return "prompt"  # the field itself is refused ("response_format is not supported")
    return "json_object"


# ------------------------------------------------------------------------------- the ladder


@dataclass
class _Endpoint:
    start: Mode
    settled: Mode | None = None
    refused: dict[Mode, str] = field(default_factory=dict)
    next: Mode | None = None
    lock: asyncio.Lock | None = None
    loop: asyncio.AbstractEventLoop | None = None

    def current(self) -> Mode:
        if self.next is not None:
            return self.next
        return next(m for m in MODES[MODES.index(self.start) :] if m not in self.refused)

    def probe_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self.lock is None or self.loop is not loop:  # a lock cannot cross event loops
            self.lock, self.loop = asyncio.Lock(), loop
        return self.lock


Send = Callable[[Mode, list[Message]], Awaitable[Completion]]


class Ladder:
    """The modes known to work, per (endpoint, model); one per provider instance."""

    def __init__(self) -> None:
        self._endpoints: dict[tuple[str, str], _Endpoint] = {}

    def settled(self, endpoint: str, model: str) -> Mode | None:
        found = self._endpoints.get((endpoint, model))
        return found.settled if found is not None else None

    async def complete(
        self,
        endpoint: str,
        model: str,
        messages: list[Message],
        params: GenParams,
        send: Send,
        *,
        start: Mode = "json_schema",
    ) -> Completion:
        """``send(mode, messages)`` once or down the ladder; returns the completion of the mode used."""
        schema = params.json_schema
        assert schema is not None, "only requests with a json_schema climb the ladder"
        pinned = pinned_mode(params)
        if pinned is not None:
            return await self._pinned(pinned, messages, schema, send)
        state = self._endpoints.setdefault((endpoint, model), _Endpoint(start=start))
        refusals: list[str] = []
        while True:
            mode = state.settled
            if mode is None:
                async with state.probe_lock():
                    if state.settled is None:
                        return await self._probe(state, messages, schema, send, refusals)
                    mode = state.settled
            try:
                completion = await send(mode, messages_for(mode, messages, schema))
            except ModelError as exc:
                if not (exc.refused and mode != "prompt" and _definite(exc)):
                    raise _with_refusals(exc, mode, refusals) from None
                # The server changed its mind (a different replica, a restart): climb again.
                refusals.append(_refusal_note(mode, exc))
                state.refused[mode] = exc.reason
                state.next = _next_mode(mode, exc)
                state.settled = None
                continue
            return _mark(completion, mode, refusals)

    async def _probe(
        self,
        state: _Endpoint,
        messages: list[Message],
        schema: dict[str, Any],
        send: Send,
        refusals: list[str],
    ) -> Completion:
        # Refusals that did not name response_format are only believed once a lower mode works:
        # a 400 for an oversized request would otherwise cost the whole run its best mode.
        tentative: dict[Mode, str] = {}
        mode = state.current()
        while True:
            try:
                completion = await send(mode, messages_for(mode, messages, schema))
            except ModelError as exc:
                if not exc.refused or mode == "prompt":
                    state.next = None
                    raise _with_refusals(exc, mode, refusals) from None
                refusals.append(_refusal_note(mode, exc))
                lower = _next_mode(mode, exc)
                skipped = MODES[MODES.index(mode) : MODES.index(lower)]
                for gone in skipped:  # the field itself refused: json_object goes with json_schema
                    (state.refused if _definite(exc) else tentative)[gone] = exc.reason
                mode = state.next = lower
                continue
            state.refused.update(tentative)
            state.settled, state.next = mode, None
            return _mark(completion, mode, refusals)

    async def _pinned(
        self, mode: Mode, messages: list[Message], schema: dict[str, Any], send: Send
    ) -> Completion:
        try:
            completion = await send(mode, messages_for(mode, messages, schema))
        except ModelError as exc:
            if exc.refused:
                raise ModelError(
                    f"{exc.reason} (structured output {mode} is pinned by {PIN_PARAM}={mode} "
                    f"and the server refused it; try {PIN_PARAM}=auto)",
                    status=exc.status,
                    detail=exc.detail,
                    refused=True,
                ) from None
            raise
        return _mark(completion, mode, [])


def _refusal_note(mode: Mode, exc: ModelError) -> str:
    return f"{mode} refused: {exc.reason}"[:500]


def _mark(completion: Completion, mode: Mode, refusals: list[str]) -> Completion:
    completion.structured = mode
    completion.structured_refused = list(refusals)
    return completion


def _with_refusals(exc: ModelError, mode: Mode, refusals: list[str]) -> ModelError:
    if not refusals:
        return exc
    return ModelError(
        f"{exc.reason} (structured output {mode}, after: {'; '.join(refusals)})",
        retryable=exc.retryable,
        retry_after=exc.retry_after,
        status=exc.status,
        detail=exc.detail,
        refused=exc.refused,
    )


def call_record(completion: Completion) -> dict[str, Any]:
    """What a ModelCall row's params add about structured output: the mode, and refusals met."""
    if completion.structured is None:
        return {}
    out: dict[str, Any] = {"structured": completion.structured}
    if completion.structured_refused and not completion.cached:
        out["structured_refused"] = list(completion.structured_refused)
    return out


# ------------------------------------------------------------------------------- reading answers

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.S)


def extract_json(text: str) -> Any:
    """The JSON object in ``text``: the whole text, a fenced block, or the first object in prose.

    Raises ValueError when there is none. Plain-prompt answers come wrapped in all three ways.
    """
    stripped = text.strip()
    if not stripped:
        raise ValueError("the reply is empty")
    try:
        return json.loads(stripped)
    except json.JSONDecodeError:
        pass
    for block in _FENCE.findall(text):
        try:
            return json.loads(block.strip())
        except json.JSONDecodeError:
            continue
    decoder = json.JSONDecoder()
    for m in re.finditer(r"\{", text):
        try:
            obj, _ = decoder.raw_decode(text, m.start())
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            return obj
    raise ValueError("no JSON object found in the reply")
