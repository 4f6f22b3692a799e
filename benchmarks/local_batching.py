"""Generated tokens/s of the embedded model with 1 and with 8 conversations in flight.

    python benchmarks/local_batching.py [--max-tokens 120] [--rounds 1]

Both runs send the same 8 prompts through the gateway with the same fixed length (min = max new
tokens, so every reply has exactly that many tokens; by default the embedded model's own default
reply length). "1 in flight" sends them one after another;
"8 in flight" sends them together, so the hf provider batches them into one generate call.
Target: at least 4x the tokens/s with 8.
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

from simulator.completion import GenParams, Message  # noqa: E402
from simulator.gateway import Gateway  # noqa: E402
from simulator.providers.embedded import DEFAULTS, embedded_provider  # noqa: E402

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


async def measure(gw: Gateway, in_flight: int, params: GenParams, rounds: int) -> tuple[int, float, float]:
    tokens, started, cpu = 0, time.perf_counter(), time.process_time()
    for r in range(rounds):
        for i in range(0, len(PROMPTS), in_flight):
            group = PROMPTS[i : i + in_flight]
            results = await asyncio.gather(*[
                gw.complete("embedded", [Message(role="user", content=p)], params.merged({"seed": r * 100 + i + k}))
                for k, p in enumerate(group)
            ])
            tokens += sum(c.tokens_out for c, _ in results)
    return tokens, time.perf_counter() - started, time.process_time() - cpu


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-tokens", type=int, default=DEFAULTS.max_tokens)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()

    provider = embedded_provider()
    t0 = time.perf_counter()
    provider.load()
    import torch

    print(f"embedded model loaded in {time.perf_counter() - t0:.1f}s on {provider.load().device}, "
          f"torch threads {torch.get_num_threads()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    params = GenParams(max_tokens=args.max_tokens, extra={"min_new_tokens": args.max_tokens})
    gw = Gateway(cache=False)
    await gw.complete("embedded", [Message(role="user", content="warm up")], GenParams(max_tokens=4))

    figures, per_cpu = {}, {}
    for in_flight in (1, 8):
        calls_before = provider.generate_calls
        tokens, seconds, cpu = await measure(gw, in_flight, params, args.rounds)
        figures[in_flight], per_cpu[in_flight] = tokens / seconds, tokens / cpu
        print(f"{in_flight} in flight: {tokens} tokens in {seconds:.1f}s = {tokens / seconds:.1f} tokens/s "
              f"({tokens / cpu:.1f} per CPU-second; {provider.generate_calls - calls_before} generate calls)")
    ratio = figures[8] / figures[1]
    print(f"ratio 8 vs 1: {ratio:.2f}x wall-clock (target >= 4x: {'met' if ratio >= 4 else 'NOT met'}); "
          f"{per_cpu[8] / per_cpu[1]:.2f}x per CPU-second (robust to other load on the machine)")
    await gw.aclose()


if __name__ == "__main__":
    asyncio.run(main())
