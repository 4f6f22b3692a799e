"""Per-call overhead of the gateway: calls/s and client CPU ms per call, litellm vs the raw aiohttp path.

    python benchmarks/gateway_overhead.py [--calls 400] [--concurrency 128] [--delay-ms 100]

Starts the loopback OpenAI-compatible server in a subprocess (so its CPU is not counted) with a
fixed 100 ms delay, then sends N concurrent calls through the gateway for ``litellm:openai/...``
and ``oai:...``, without and with a SQLite store (a ModelCall row per call). Unseeded: no cache.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("OPENAI_API_KEY", "sk-benchmark-dummy-key")

from branchpoint.gateway.completion import GenParams, Message  # noqa: E402
from branchpoint.gateway.gateway import Gateway  # noqa: E402
from branchpoint.gateway.limits import ProviderLimits  # noqa: E402
from branchpoint.gateway.testing.openai_server import spawn as start_server  # noqa: E402


async def sweep(
    spec: str, url: str, calls: int, concurrency: int, store_path: str | None
) -> tuple[float, float]:
    store = None
    if store_path:
        from branchpoint.core.store import open_store

        store = open_store(store_path)
    gw = Gateway(store=store, limits={"*": ProviderLimits(max_concurrency=concurrency)})
    params = GenParams(api_base=url, temperature=0.7, max_tokens=32)
    messages = [
        Message(role="system", content="You are a helpful assistant."),
        Message(role="user", content="hello, how are you doing today?"),
    ]
    await gw.complete(spec, messages, params)  # warm: imports, connection pool
    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(
        *[gw.complete(spec, messages, params, purpose="target") for _ in range(calls)]
    )
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    await gw.aclose()
    if store is not None:
        store.close()
    return calls / wall, cpu * 1000 / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=128)
    parser.add_argument("--delay-ms", type=float, default=100.0)
    args = parser.parse_args()
    proc, url = start_server(args.delay_ms)
    ideal = args.concurrency / (args.delay_ms / 1000)
    print(
        f"server {url}, {args.delay_ms:g} ms per reply; {args.calls} calls, {args.concurrency} in flight "
        f"(ceiling {ideal:.0f} calls/s)"
    )
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for spec in ("oai:bench", "litellm:openai/bench"):
                for label, store_path in (
                    ("no store", None),
                    ("sqlite store", f"{tmp}/{spec[:3]}.db"),
                ):
                    rate, cpu_ms = asyncio.run(
                        sweep(spec, url, args.calls, args.concurrency, store_path)
                    )
                    print(f"{spec:22s} {label:12s} {rate:7.1f} calls/s  {cpu_ms:6.2f} CPU ms/call")
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()
