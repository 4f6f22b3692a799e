"""A sweep on Ray with 1 and with 2 workers: conversations/s and model calls/s.

    .ci/with-postgres .venv/bin/python benchmarks/ray_scaling.py            # 56 conversations
    .ci/with-postgres .venv/bin/python benchmarks/ray_scaling.py --replicates 16 --exchanges 8

Starts the loopback OpenAI-compatible server (``branchpoint.gateway.testing.openai_server``) in its own
process, ``--delay-ms`` a call (100), which plays both persona and chatbot (``oai:``), and runs the
same manifest (one teen scenario, ``fork: independent``, ``--replicates`` trees of 7 arms) on a
local Ray cluster, each time into a fresh PostgreSQL database (``$BRANCHPOINT_TEST_POSTGRES``, or
``--postgres URL``: a server where the user may create databases). Each worker keeps
``--concurrency`` trees going. Printed per run: the whole wall time (Ray's start and the workers'
included) and, from the server's first request to its last, conversations/s and calls/s. A
third run gives 1 worker the 2 workers' concurrency: with no limit configured a provider may
have workers x concurrency calls in flight, so that run separates what a second worker adds
from what more calls in flight add.

The workers, the server, PostgreSQL and the driver share this machine's cores: on 2 cores the
second worker has no core of its own, so what it adds here is concurrency, not compute.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from branchpoint.gateway.testing.openai_server import spawn as start_server  # noqa: E402

SCENARIO = ROOT / "branchpoint" / "scenarios" / "library" / "teen" / "teen-ah-rail-bridge-jump.yaml"


def stats(url: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{url}/_stats", timeout=30) as response:
        data = json.loads(response.read())
    return {k: data[k] for k in ("requests", "first_at", "last_at", "peak_in_flight")}


def fresh_database(base: str) -> str:
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"ray_bench_{uuid.uuid4().hex[:10]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return make_url(base).set(database=name).render_as_string(hide_password=False)


def run_once(
    workers: int, concurrency: int, args: argparse.Namespace, base_db: str, workdir: Path
) -> str:
    import ray

    from branchpoint.core.store import open_store
    from branchpoint.study.manifest import load_manifest
    from branchpoint.study.plan import plan_sweep
    from branchpoint.study.ray_exec import run_sweep_ray

    server, url = start_server(args.delay_ms)
    db = fresh_database(base_db)
    manifest = workdir / f"ray-{workers}-{concurrency}.yaml"
    manifest.write_text(
        f"""
name: ray-bench
scenarios: {{paths: ["{SCENARIO}"]}}
targets:
  - spec: oai:bench-bot
    params: {{api_base: "{url}", max_tokens: 64}}
simulators: [oai:bench-persona]
simulator_params: {{api_base: "{url}"}}
replicates: {args.replicates}
max_exchanges: {args.exchanges}
fork: independent
execution: {{mode: ray, workers: {workers}, concurrency: {concurrency}}}
store: "{db}"
""",
        encoding="utf-8",
    )
    store = open_store(db)
    try:
        plan = plan_sweep(load_manifest(manifest), manifest, "ray-bench", store=store)
        started = time.time()
        result = asyncio.run(run_sweep_ray(plan, store, num_cpus=max(2, workers)))
        wall = time.time() - started
        s = stats(url)
    finally:
        store.close()
        server.terminate()
        server.wait(10)
        if ray.is_initialized():
            ray.shutdown()
    span = max(1e-9, s["last_at"] - s["first_at"])
    return (
        f"{workers} worker(s) x {concurrency} trees: {result.conversations} conversations "
        f"({result.completed} completed), {int(s['requests'])} calls; wall {wall:.1f} s, first "
        f"to last call {span:.1f} s: {result.conversations / span:.2f} conversations/s, "
        f"{s['requests'] / span:.1f} calls/s (peak {int(s['peak_in_flight'])} in flight)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicates", type=int, default=8, help="trees (7 arms each)")
    parser.add_argument("--exchanges", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=4, help="trees in flight per worker")
    parser.add_argument("--delay-ms", type=float, default=100.0)
    parser.add_argument("--postgres", default=os.environ.get("BRANCHPOINT_TEST_POSTGRES"))
    args = parser.parse_args()
    if not args.postgres:
        raise SystemExit(
            "no PostgreSQL server: run under .ci/with-postgres, or pass --postgres URL"
        )
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.path.insert(0, str(ROOT))
    print(
        f"cores: {os.cpu_count()}, load average {os.getloadavg()[0]:.1f}; {args.delay_ms:g} ms a call"
    )
    with tempfile.TemporaryDirectory() as tmp:
        # the same sweep on 1 and 2 workers, and on 1 worker with the 2 workers' concurrency:
        # what a second worker adds beyond more calls in flight
        c = args.concurrency
        for workers, concurrency in ((1, c), (2, c), (1, 2 * c)):
            print(run_once(workers, concurrency, args, args.postgres, Path(tmp)), flush=True)


if __name__ == "__main__":
    main()
