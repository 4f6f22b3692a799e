"""The gateway's logic over a scripted provider: records, retries, cache, limits, secrets."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time

import pytest
from sqlmodel import select

from branchpoint.core.errors import UserError
from branchpoint.core.records import CacheEntry, ModelCall
from branchpoint.gateway.completion import Completion, GenParams, Message, ModelError
from branchpoint.gateway.gateway import Gateway, stored_params
from branchpoint.gateway.limits import ProviderLimits, SharedLimiters
from branchpoint.gateway.providers.scripted import ScriptedModel

MSGS = [Message(role="system", content="be kind"), Message(role="user", content="hello there")]


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def calls(store) -> list[ModelCall]:  # type: ignore[no-untyped-def]
    with store.session() as s:
        return list(s.exec(select(ModelCall)).all())


def test_scripted_rules_choose_reply_by_content() -> None:
    model = ScriptedModel(
        rules=[
            (r"(?i)hotline", "call 988"),
            (lambda msgs, p: len(msgs) > 3, "long chat"),
            (r"count", ["one", "two"]),
            (r"explode", ModelError("boom", retryable=False)),
        ],
        default=lambda msgs, p: f"echo:{msgs[-1].content}",
    )

    async def go() -> list[str]:
        gw = Gateway()
        gw.register("scripted:s", model)
        out = []
        for text in ["any HOTLINE?", "count", "count", "count", "what"]:
            c, _ = await gw.complete("scripted:s", [Message(role="user", content=text)])
            out.append(c.text)
        long = [Message(role="user", content="x")] * 4
        out.append((await gw.complete("scripted:s", long))[0].text)
        with pytest.raises(ModelError, match="boom"):
            await gw.complete("scripted:s", [Message(role="user", content="explode")])
        return out

    assert run(go()) == ["call 988", "one", "two", "two", "echo:what", "long chat"]
    assert model.calls == 7


def test_every_call_is_recorded_with_its_fields(store) -> None:  # type: ignore[no-untyped-def]
    model = ScriptedModel(
        rules=[(r"fail", ModelError("bad request: schema", retryable=False))], default="fine thanks"
    )

    async def go() -> str:
        gw = Gateway(store=store)
        gw.register("scripted:bot", model)
        c, call_id = await gw.complete(
            "scripted:bot",
            MSGS,
            GenParams(temperature=0.5),
            purpose="persona",
            run_id="r1",
            conversation_id="c1",
        )
        assert (
            c.text == "fine thanks"
            and c.tokens_out == 2
            and c.tokens_in == 4
            and c.model == "scripted:bot"
        )
        with pytest.raises(ModelError, match="schema"):
            await gw.complete(
                "scripted:bot", [Message(role="user", content="fail")], purpose="judge"
            )
        return call_id

    call_id = run(go())
    rows = {r.purpose: r for r in calls(store)}
    ok, failed = rows["persona"], rows["judge"]
    assert ok.id == call_id and ok.run_id == "r1" and ok.conversation_id == "c1"
    assert ok.messages == [
        {"role": "system", "content": "be kind"},
        {"role": "user", "content": "hello there"},
    ]
    assert ok.text == "fine thanks" and ok.error is None and ok.params == {"temperature": 0.5}
    assert ok.finish_reason == "stop" and ok.provider_request_id.startswith("scripted-")
    assert failed.error == "bad request: schema" and failed.text == "" and failed.attempts == 1
    assert model.calls == 2  # not retried: not retryable


def test_retry_honours_retry_after_and_counts_attempts(store) -> None:  # type: ignore[no-untyped-def]
    model = ScriptedModel(default="finally", fail_first=2, retry_after=0.3)

    async def go():  # type: ignore[no-untyped-def]
        gw = Gateway(store=store, backoff_s=0.01)
        gw.register("scripted:flaky", model)
        t0 = time.perf_counter()
        c, _ = await gw.complete("scripted:flaky", MSGS)
        return c, time.perf_counter() - t0

    c, elapsed = run(go())
    assert c.text == "finally" and c.attempts == 3 and model.calls == 3
    assert elapsed >= 0.6  # two waits of at least Retry-After, not the 10 ms backoff
    (row,) = calls(store)
    assert row.attempts == 3 and row.error is None
    # why the two attempts before the last failed, kept on the successful call's row
    assert row.params["earlier_errors"] == ["scripted failure 1 of 2", "scripted failure 2 of 2"]


def test_retries_are_bounded_and_failure_recorded(store) -> None:  # type: ignore[no-untyped-def]
    model = ScriptedModel(default="never", fail_first=100)

    async def go() -> None:
        gw = Gateway(store=store, max_attempts=3, backoff_s=0.001)
        gw.register("scripted:down", model)
        await gw.complete("scripted:down", MSGS)

    with pytest.raises(ModelError, match="after 3 attempts"):
        run(go())
    assert model.calls == 3
    (row,) = calls(store)
    assert row.attempts == 3 and "scripted failure 3" in row.error
    assert "earlier_errors" not in row.params  # the error names them: "(after 3 attempts; ...)"


def test_cache_serves_seeded_calls_and_not_sampled_ones(store) -> None:  # type: ignore[no-untyped-def]
    model = ScriptedModel(default=lambda m, p: f"reply {model.calls}")

    async def go():  # type: ignore[no-untyped-def]
        gw = Gateway(store=store)
        gw.register("scripted:c", model)
        seeded = GenParams(temperature=0.9, seed=7)
        a, _ = await gw.complete("scripted:c", MSGS, seeded)
        b, _ = await gw.complete("scripted:c", MSGS, seeded)
        other_seed, _ = await gw.complete("scripted:c", MSGS, GenParams(temperature=0.9, seed=8))
        greedy1, _ = await gw.complete("scripted:c", MSGS, GenParams(temperature=0))
        greedy2, _ = await gw.complete("scripted:c", MSGS, GenParams(temperature=0))
        s1, _ = await gw.complete("scripted:c", MSGS, GenParams(temperature=0.9))
        s2, _ = await gw.complete("scripted:c", MSGS, GenParams(temperature=0.9))
        return a, b, other_seed, greedy1, greedy2, s1, s2

    a, b, other, g1, g2, s1, s2 = run(go())
    assert (a.text, b.text, b.cached, a.cached) == ("reply 1", "reply 1", True, False)
    assert other.text == "reply 2" and g1.text == g2.text == "reply 3" and g2.cached
    assert (s1.text, s2.text) == (
        "reply 4",
        "reply 5",
    )  # unseeded sampling: replicates stay distinct
    assert model.calls == 5
    rows = calls(store)
    assert len(rows) == 7 and sum(r.cached for r in rows) == 2
    assert all(r.cost == 0.0 for r in rows if r.cached)
    with store.session() as s:
        # the calls' rows are the cache: nothing is written twice
        assert s.exec(select(CacheEntry)).all() == []

    # A new gateway on the same store reuses the stored calls: no provider call.
    async def again() -> tuple[Completion, Completion]:
        gw = Gateway(store=store)
        gw.register("scripted:c", model)
        c, _ = await gw.complete("scripted:c", MSGS, GenParams(temperature=0.9, seed=7))
        g, _ = await gw.complete("scripted:c", MSGS, GenParams(temperature=0))
        return c, g

    c, g = run(again())
    assert (c.cached, c.text, g.cached, g.text) == (True, "reply 1", True, "reply 3")
    assert model.calls == 5
    assert (c.tokens_in, c.tokens_out, c.finish_reason) == (a.tokens_in, a.tokens_out, "stop")


def test_failed_calls_are_not_cache_entries_and_a_version_1_store_is_not_served(store) -> None:  # type: ignore[no-untyped-def]
    flaky = ScriptedModel(rules=[("boom", ModelError("no", retryable=False))], default="fine")
    params = GenParams(seed=3)
    boom = [Message(role="user", content="boom")]

    async def go() -> tuple[str, int]:
        gw = Gateway(store=store)
        gw.register("scripted:f", flaky)
        with pytest.raises(ModelError):
            await gw.complete("scripted:f", boom, params)
        flaky.rules.clear()  # the same request now succeeds: the failed row answered nothing
        done, _ = await gw.complete("scripted:f", boom, params)
        await gw.aclose()
        return done.text, flaky.calls

    assert run(go()) == ("fine", 2)

    # a store written before the key covered the endpoint (key version 1): neither its `cache`
    # rows nor its call rows answer a request now, so no reply of another server is served
    v1 = _version_1_hash("scripted:old", MSGS, params)
    with store.session() as s:
        s.add(CacheEntry(key=v1, model="scripted:old", completion={"text": "from an old store"}))
        s.add(
            ModelCall(id="old-row", purpose="target", model="scripted:old", request_hash=v1,
                      text="from an old row", params={"seed": 3})
        )  # fmt: skip
        s.commit()
    fresh = ScriptedModel(default="asked afresh")

    async def legacy() -> Completion:
        gw = Gateway(store=store)
        gw.register("scripted:old", fresh)
        hit, _ = await gw.complete("scripted:old", MSGS, params)
        await gw.aclose()
        return hit

    hit = run(legacy())
    assert (hit.text, hit.cached, fresh.calls) == ("asked afresh", False, 1)


def _version_1_hash(spec: str, messages: list[Message], params: GenParams) -> str:
    """The request hash before KEY_VERSION 2: no version, and ``api_base`` left out."""
    data = params.model_dump(exclude_none=True, exclude={"api_base"})
    if not data.get("extra"):
        data.pop("extra", None)
    payload = {"spec": spec, "messages": [(m.role, m.content) for m in messages], "params": data}
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def test_concurrent_identical_seeded_calls_run_once() -> None:
    model = ScriptedModel(default="same", delay_s=0.05)

    async def go():  # type: ignore[no-untyped-def]
        gw = Gateway()
        gw.register("scripted:d", model)
        return await asyncio.gather(
            *[gw.complete("scripted:d", MSGS, GenParams(seed=1)) for _ in range(5)]
        )

    results = run(go())
    assert model.calls == 1 and sum(c.cached for c, _ in results) == 4
    assert len({cid for _, cid in results}) == 5


class Counting(ScriptedModel):
    """A scripted model that counts the calls it has in flight at once (``peak``)."""

    def __init__(self) -> None:
        super().__init__()
        self.in_flight = self.peak = 0

    async def complete(self, model, messages, params):  # type: ignore[no-untyped-def]
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        await asyncio.sleep(0.02)
        self.in_flight -= 1
        return await super().complete(model, messages, params)


def test_concurrency_limit_and_rpm() -> None:
    counting = Counting()

    async def go() -> float:
        gw = Gateway(
            limits={"scripted:lim": ProviderLimits(max_concurrency=3), "scripted:rpm": {"rpm": 600}}
        )
        gw.register("scripted:lim", counting)
        gw.register("scripted:rpm", ScriptedModel())
        await asyncio.gather(*[gw.complete("scripted:lim", MSGS) for _ in range(12)])
        t0 = time.perf_counter()
        await asyncio.gather(*[gw.complete("scripted:rpm", MSGS) for _ in range(4)])
        return time.perf_counter() - t0

    elapsed = run(go())
    assert counting.peak == 3
    assert elapsed >= 0.28  # 600/min = one every 100 ms after the first


@pytest.mark.parametrize("shared", [True, False])
def test_gateways_with_shared_limiters_hold_one_limit_between_them(shared: bool) -> None:
    model = Counting()

    async def go() -> None:
        limiters = SharedLimiters() if shared else None
        # a sweep's conversations and its judges: two gateways calling one provider
        gateways = [
            Gateway(limits={"scripted:m": {"max_concurrency": 2}}, limiter_factory=limiters)
            for _ in range(2)
        ]
        for gw in gateways:
            gw.register("scripted:m", model)
        await asyncio.gather(
            *[gw.complete("scripted:m", MSGS) for gw in gateways for _ in range(6)]
        )

    run(go())
    assert model.peak == (2 if shared else 4)


def test_secrets_never_stored(store, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-SECRET-123456789")
    model = ScriptedModel(
        rules=[(r"leak", ModelError("auth failed for key sk-test-SECRET-123456789"))]
    )
    params = GenParams(
        temperature=0,
        api_base="http://user:pw123@127.0.0.1:9/v1",
        extra={"api_key": "sk-other-XYZ987654321", "top_k": 5},
    )

    async def go() -> None:
        gw = Gateway(store=store)
        gw.register("scripted:k", model)
        await gw.complete("scripted:k", MSGS, params)
        with pytest.raises(ModelError) as info:
            await gw.complete("scripted:k", [Message(role="user", content="leak")], params)
        assert "SECRET" not in str(info.value)

    run(go())
    blob = " ".join(r.model_dump_json() for r in calls(store))
    assert "SECRET" not in blob and "XYZ987" not in blob and "pw123" not in blob
    assert '"top_k":5' in blob.replace(" ", "")
    assert stored_params(params)["extra"] == {"top_k": 5}


def test_unknown_or_unregistered_spec_is_a_user_error() -> None:
    async def go(spec: str) -> None:
        await Gateway().complete(spec, MSGS)

    with pytest.raises(UserError, match="expected one of: embedded, hf:.*litellm:.*scripted:"):
        run(go("gpt4"))
    with pytest.raises(UserError, match="no scripted model"):
        run(go("scripted:nobody"))
    # The built-in echo needs no registration.
    c, _ = run(Gateway().complete("scripted:echo", MSGS))
    assert c.text == "hello there"


def test_unexpected_provider_exception_becomes_recorded_model_error(store) -> None:  # type: ignore[no-untyped-def]
    def broken(msgs, params):  # type: ignore[no-untyped-def]
        raise KeyError("choices")

    model = ScriptedModel(default=broken)

    async def go() -> None:
        gw = Gateway(store=store)
        gw.register("scripted:b", model)
        await gw.complete("scripted:b", MSGS)

    with pytest.raises(ModelError, match="KeyError"):
        run(go())
    assert model.calls == 1 and calls(store)[0].error.startswith("KeyError")
