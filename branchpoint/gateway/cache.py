"""Content-addressed completion cache.

The key is a sha256 over everything that selects the model and shapes its answer, and nothing
else (``key_params`` is the rule, written once):

- in: the spec (provider kind, model or deployment name), the messages, every generation param
  (temperature, top_p, max_tokens, seed, stop, json_schema), the endpoint (``api_base``, without
  any ``user:password@`` and trailing ``/``: two servers answering under one model name are two
  models), and every ``extra`` the provider sends on (``structured`` mode pins, ``api_version``,
  ``deployment_id``, ``repetition_penalty``, ...);
- out: secrets (keys, tokens, headers: never hashed into anything stored) and settings that only
  say how to reach or wait for a model (``_TRANSPORT``: ``api_key_env``, timeouts, retries).

``KEY_VERSION`` is hashed in too: keys made under an earlier rule (version 1 left ``api_base``
out) never equal a current key, so a store written before a change of rule is never served a
reply the current rule would tell apart; its calls are simply misses and are made again.

A cache hit is only sound when the output is a function of those inputs: a fixed ``seed`` or
``temperature == 0``. Unseeded sampling must not be cached, or replicates of the same prefix
would collapse into one.
"""

from __future__ import annotations

import hashlib
import json
import json.encoder
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from sqlalchemy import and_, select

from branchpoint.core.records import ModelCall
from branchpoint.core.redaction import is_secret_key
from branchpoint.gateway.completion import Completion, GenParams, Message

if TYPE_CHECKING:
    from branchpoint.core.store import Store
    from branchpoint.gateway.write_behind import BatchWriter

# Bump when ``key_params`` changes what a key covers: older keys then never match (see above).
KEY_VERSION = 2
# ``extra`` settings that say how to reach or wait for a model, not which model answers or what it
# generates; with secrets (``is_secret_key``, and headers, which carry them) they stay out of keys.
_TRANSPORT = frozenset(
    {"api_key_env", "timeout", "request_timeout", "num_retries", "max_retries", "headers",
     "extra_headers"}
)  # fmt: skip


def endpoint(api_base: str) -> str:
    """``api_base`` as the key sees it: no credentials, no trailing slash (same server, same key)."""
    parts = urlsplit(api_base.strip())
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme.lower(), host.lower(), parts.path.rstrip("/"), parts.query, ""))


def key_params(params: GenParams) -> dict[str, Any]:
    """The params a cache key covers: the rule of this module's docstring."""
    data = params.model_dump(exclude_none=True)
    extra = {
        k: v
        for k, v in (data.pop("extra", None) or {}).items()
        if k not in _TRANSPORT and not is_secret_key(k)
    }
    if isinstance(extra.get("api_base"), str):
        extra["api_base"] = endpoint(extra["api_base"])
    if extra:
        data["extra"] = extra
    if "api_base" in data:
        data["api_base"] = endpoint(data["api_base"])
    return data


def request_hash(spec: str, messages: list[Message], params: GenParams) -> str:
    """sha256 of the canonical JSON of (spec, messages, key params, version): sorted keys, no
    spaces, UTF-8.

    The bytes are those of ``json.dumps({"spec", "messages": [[role, content], ...], "params",
    "v": KEY_VERSION},
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)``; stored hashes
    (cache keys, ``model_calls.request_hash``) depend on it. "messages" sorts first, so the
    hash of a message list extends the hash of its prefix: ``_PREFIXES`` keeps those states,
    and a call at exchange 20 hashes its two new messages, not the whole conversation again."""
    digest = _PREFIXES.state(messages)
    tail = (
        '],"params":' + _KEY_JSON.encode(key_params(params)) + ',"spec":' + _encode(spec)
        + ',"v":' + str(KEY_VERSION) + "}"
    )  # fmt: skip
    digest.update(tail.encode("utf-8"))
    return digest.hexdigest()


class _PrefixHashes:
    """A trie of sha256 states over message lists: node -> {(role, content): child node}.

    Each node holds the hash of ``{"messages":[`` and the messages up to it; a list whose prefix
    was hashed before (the same conversation one exchange earlier) costs one dict look-up per
    old message. Bounded: past ``limit`` nodes the trie starts again (only speed is lost)."""

    def __init__(self, limit: int = 200_000) -> None:
        self.limit = limit
        self._reset()

    def _reset(self) -> None:
        self.root: tuple[Any, dict[Any, Any]] = (hashlib.sha256(b'{"messages":['), {})
        self.nodes = 1

    def state(self, messages: list[Message]) -> Any:
        if self.nodes > self.limit:
            self._reset()
        node = self.root
        first = True
        for m in messages:
            key = (m.role, m.content)
            child = node[1].get(key)
            if child is None:
                digest = node[0].copy()
                item = "[" + _encode(m.role) + "," + _encode(m.content) + "]"
                digest.update((item if first else "," + item).encode("utf-8"))
                child = node[1][key] = (digest, {})
                self.nodes += 1
            node = child
            first = False
        return node[0].copy()


_encode = json.encoder.encode_basestring  # what json.dumps(ensure_ascii=False) writes for a str
# json.dumps(..., sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str) is this
# encoder's encode: json.dumps makes a new encoder on every call given any of these (7 us of the
# 24 a request hash cost)
_KEY_JSON = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
_PREFIXES = _PrefixHashes()


def cacheable(params: GenParams) -> bool:
    return params.seed is not None or params.temperature == 0


class CompletionCache:
    """Without a store, a dict in memory. With one, the store's own record of the calls.

    A call's ModelCall row (its request hash, text, tokens, finish reason) is its cache entry:
    nothing is written twice, and an entry is as durable as the call's record. Entries in the
    ``cache`` table, which earlier versions wrote, are not read: their keys were made under key
    version 1, which no current key equals (see ``KEY_VERSION``). The hashes of a model's
    successful calls are read once (one query per model and process), so a miss, nearly every
    call of a fresh sweep, costs no query; a hit costs one. A completion whose row is still in
    the write-behind queue is served from memory until its row is committed.
    """

    def __init__(self, store: Store | None = None, writer: BatchWriter | None = None) -> None:
        self.store = store
        self.writer = writer
        self._memory: dict[str, Completion] = {}
        self._known: dict[str, set[str]] = {}  # model -> hashes it can answer
        self._pending: dict[str, Completion] = {}  # put, its call row not yet committed

    def _keys(self, model: str) -> set[str]:
        known = self._known.get(model)
        if known is None:
            assert self.store is not None
            with self.store.engine.connect() as conn:
                calls = conn.execute(
                    select(_CALLS.c.request_hash).where(_CALLS.c.model == model, _ANSWERED)
                )
                known = {r[0] for r in calls}
            self._known[model] = known
        return known

    def get(self, key: str, model: str | None = None) -> Completion | None:
        if self.store is None:
            hit = self._memory.get(key)
            return hit.model_copy() if hit is not None else None
        pending = self._pending.get(key)
        if pending is not None:
            return pending.model_copy()
        if model is not None and key not in self._keys(model):
            return None
        with self.store.engine.connect() as conn:
            row = conn.execute(
                select(*_ENTRY).where(_CALLS.c.request_hash == key, _ANSWERED).limit(1)
            ).first()
        return None if row is None else _from_call(row._mapping)

    def put(
        self, key: str, model: str, completion: Completion
    ) -> Callable[[BaseException | None], None] | None:
        """Make ``completion`` the answer to ``key``. With a store, its call's row (which the
        gateway writes next) is the entry: the returned callback, run once that row is committed
        or has failed, stops serving it from memory."""
        if self.store is None:
            self._memory[key] = completion.model_copy()
            return None
        if model in self._known:
            self._known[model].add(key)
        self._pending[key] = completion.model_copy()

        def committed(_exc: BaseException | None) -> None:
            self._pending.pop(key, None)  # failed too: a later call is a miss, and calls again

        return committed


_CALLS = ModelCall.__table__  # type: ignore[attr-defined]
# a call's row answers its request when the call succeeded and was not itself served from cache
_ANSWERED = and_(_CALLS.c.error.is_(None), _CALLS.c.cached.is_(False))
_ENTRY = [
    _CALLS.c[name]
    for name in (
        "text",
        "reasoning",
        "tokens_in",
        "tokens_out",
        "cost",
        "latency_s",
        "finish_reason",
        "provider_request_id",
        "model",
        "params",
    )
]


def _from_call(row: Any) -> Completion:
    params = row["params"] or {}
    return Completion(
        text=row["text"] or "",
        reasoning=row["reasoning"],
        tokens_in=row["tokens_in"] or 0,
        tokens_out=row["tokens_out"] or 0,
        cost=row["cost"],
        latency_s=row["latency_s"] or 0.0,
        finish_reason=row["finish_reason"],
        request_id=row["provider_request_id"],
        model=row["model"],
        structured=params.get("structured"),
        structured_refused=list(params.get("structured_refused") or []),
    )
