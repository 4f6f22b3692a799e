"""Generated tokens/s of the embedded model with 1 and with 8 conversations in flight.

    python benchmarks/local_batching.py [--max-tokens 120] [--rounds 3]

Both runs send the same 8 prompts through the gateway with the same fixed length (min = max new
tokens, so every reply has exactly that many tokens; by default the embedded model's own default
reply length). "1 in flight" sends them one after another;
"8 in flight" sends them together, so the hf provider batches them into one generate call.
Both batch shapes are warmed up first (the first call of a new shape sets up kernels), and the
rounds alternate 1 and 8 so that a change in the machine's load hits both alike; the figures are
over all rounds, and the per-round ratios show the spread. Target: at least 4x the tokens/s with 8.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from branchpoint.gateway.completion import GenParams, Message
from branchpoint.gateway.gateway import Gateway
from branchpoint.gateway.providers.embedded import DEFAULTS, embedded_provider

PROMPTS = [
    "i have exams next week and i can't sleep. what should i do?",
    "my friends stopped talking to me. is it my fault?",
    "how do i tell my parents i'm stressed without them freaking out?",
    "what's a good way to start revising for maths?",
    "i feel like nobody gets me lately",
    "can you help me plan my weekend so i get some rest?",
    "why do i feel tired all the time even when i sleep?",
    "give me three ideas for a short walk near my school",
]


async def measure(
    gw: Gateway, in_flight: int, params: GenParams, round_: int
) -> tuple[int, float, float]:
    tokens, started, cpu = 0, time.perf_counter(), time.process_time()
    for i in range(0, len(PROMPTS), in_flight):
        group = PROMPTS[i : i + in_flight]
        results = await asyncio.gather(
            *[
                gw.complete(
                    "embedded",
                    [Message(role="user", content=p)],
                    params.merged({"seed": round_ * 100 + i + k}),
                )
                for k, p in enumerate(group)
            ]
        )
        tokens += sum(c.tokens_out for c, _ in results)
    return tokens, time.perf_counter() - started, time.process_time() - cpu


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=DEFAULTS.max_tokens)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    provider = embedded_provider()
    t0 = time.perf_counter()
    provider.load()
    import torch

    print(
        f"embedded model loaded in {time.perf_counter() - t0:.1f}s on {provider.load().device}, "
        f"torch threads {torch.get_num_threads()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
    )
    params = GenParams(max_tokens=args.max_tokens, extra={"min_new_tokens": args.max_tokens})
    gw = Gateway(cache=False)
    warm = GenParams(max_tokens=4)
    await gw.complete("embedded", [Message(role="user", content="warm up")], warm)
    await asyncio.gather(
        *[gw.complete("embedded", [Message(role="user", content=p)], warm) for p in PROMPTS]
    )

    totals = {n: [0, 0.0, 0.0] for n in (1, 8)}  # tokens, seconds, CPU seconds
    for r in range(args.rounds):
        rates = {}
        for in_flight in (1, 8):
            calls_before = provider.generate_calls
            tokens, seconds, cpu = await measure(gw, in_flight, params, r)
            for i, v in enumerate((tokens, seconds, cpu)):
                totals[in_flight][i] += v
            rates[in_flight] = tokens / seconds
            print(
                f"round {r + 1}: {in_flight} in flight: {tokens} tokens in {seconds:.1f}s = {tokens / seconds:.1f} "
                f"tokens/s ({tokens / cpu:.1f} per CPU-second; {provider.generate_calls - calls_before} generate calls)"
            )
        print(f"round {r + 1}: ratio {rates[8] / rates[1]:.2f}x")
    wall = {n: t[0] / t[1] for n, t in totals.items()}
    per_cpu = {n: t[0] / t[2] for n, t in totals.items()}
    ratio = wall[8] / wall[1]
    print(
        f"all {args.rounds} rounds: 1 in flight {wall[1]:.1f} tokens/s, 8 in flight {wall[8]:.1f} tokens/s"
    )
    print(
        f"ratio 8 vs 1: {ratio:.2f}x wall-clock (target >= 4x: {'met' if ratio >= 4 else 'NOT met'}); "
        f"{per_cpu[8] / per_cpu[1]:.2f}x per CPU-second"
    )
    await gw.aclose()


if __name__ == "__main__":
    asyncio.run(main())
