"""``request_hash`` keeps its bytes: stored cache keys and ``model_calls.request_hash`` values
were made by the canonical JSON below, so the prefix-hashing shortcut must give the same digest."""

from __future__ import annotations

import hashlib
import json

from branchpoint.gateway.cache import KEY_VERSION, _PrefixHashes, key_params, request_hash
from branchpoint.gateway.completion import GenParams, Message


def _canonical(spec: str, messages: list[Message], params: GenParams) -> str:
    payload = {
        "spec": spec,
        "messages": [(m.role, m.content) for m in messages],
        "params": key_params(params),
        "v": KEY_VERSION,
    }
    blob = json.dumps(
        payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def test_the_hash_is_the_canonical_json_hash_for_growing_and_diverging_histories() -> None:
    text = 'é "q" \\ \n \u2028 😀 \x00'
    history = [Message(role="system", content="p" * 300)]
    params = [
        GenParams(),
        GenParams(seed=1, temperature=0.5, stop=["\n"], api_base="http://x/v1"),
        GenParams(json_schema={"b": 1, "a": [2]}, extra={"z": {"y": 1}, "api_key": "k"}),
    ]
    for i in range(8):
        history.append(Message(role="user" if i % 2 else "assistant", content=f"{text}{i}"))
        other = [*history[:-1], Message(role="user", content="a different last message")]
        for messages in (history, other, history[1:], []):
            for p in params:
                for spec in ("oai:m", 'litellm:é/"x"'):
                    assert request_hash(spec, messages, p) == _canonical(spec, messages, p)


def test_a_full_trie_starts_again_and_still_hashes_right() -> None:
    trie = _PrefixHashes(limit=3)
    msgs = [Message(role="user", content=str(i)) for i in range(6)]
    first = trie.state(msgs).hexdigest()
    assert trie.nodes <= 7
    assert trie.state(msgs).hexdigest() == first  # after the reset
    assert trie.nodes <= 7


def test_the_key_covers_what_selects_the_model_and_nothing_else() -> None:
    msgs = [Message(role="user", content="hi")]

    def key(spec: str = "oai:m", **params: object) -> str:
        return request_hash(spec, msgs, GenParams(**params))  # type: ignore[arg-type]

    base = key(api_base="http://a:1/v1", seed=1)
    # another server, deployment, provider, structured mode or generation param: another key
    assert base != key(api_base="http://b:1/v1", seed=1)
    assert base != key("litellm:m", api_base="http://a:1/v1", seed=1)
    assert base != key(api_base="http://a:1/v1", seed=1, extra={"deployment_id": "d2"})
    assert base != key(api_base="http://a:1/v1", seed=1, extra={"structured": "json_object"})
    assert base != key(api_base="http://a:1/v1", seed=1, max_tokens=5)
    assert base != key(seed=1, extra={"api_base": "http://b:1/v1"})
    # how the server is reached, waited for or authenticated: the same key
    assert base == key(api_base="http://a:1/v1/", seed=1)
    assert base == key(api_base="http://user:pw@a:1/v1", seed=1)
    assert base == key(
        api_base="http://a:1/v1", seed=1,
        extra={"api_key_env": "K2", "timeout": 9, "api_key": "sk-x", "extra_headers": {"a": "b"}},
    )  # fmt: skip
