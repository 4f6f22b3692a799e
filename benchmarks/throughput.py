"""A sweep as a user runs it: is it bound by the provider, or by branchpoint?

    python benchmarks/throughput.py                       # 1,000 conversations, 256 and 1,000 in flight
    python benchmarks/throughput.py --conversations 200 --skip-wide --skip-litellm   # a quick look

Starts the loopback OpenAI-compatible server (``branchpoint.gateway.testing.openai_server``) in its own
process with a fixed delay (100 ms), then runs ``branchpoint run`` as a subprocess on the teen
library, ``--fork independent``, with persona and chatbot both served by that server: replicates
(``-n``) of as many of its files as make exactly ``--conversations`` conversations (1,000: 8
replicates of 19 files; ``workload``). For each run it prints:

- wall time of the process, and from the server's first request to the process's exit;
- the latency-bound ideal: calls per conversation x latency x ceil(conversations / in flight),
  and the two ratios to it;
- CPU ms per model call of the ``branchpoint run`` process (user + system, load-independent);
- peak RSS of that process, and the most calls the server had in flight at once;
- store bytes per conversation (a SQLite file, after a WAL checkpoint);
- the fixed costs around the calls: process start to the first request (imports, planning,
  the fork server with ``--processes``) and the last answer to the process's exit;
- the loopback server's own CPU per call (Linux): it runs on the same cores, so with
  ``--processes`` the workers and the server share the machine's CPU between them.

``--budget USD`` runs the same workload as ``branchpoint sweep`` instead (a manifest of the same
files, replicates, exchanges and concurrency, the model priced at $1 per million tokens, and a
``budget`` of USD that does not bind): each call then reserves its bound durably before it is
sent (``spend_reservations``). Its cost: against ``--budget`` run from a copy of an earlier tree,
or the same sweep without a budget (``--budget 0``).

Store growth is measured on a second, smaller pair of runs at 10 and 20 exchanges. The machine's
load average is printed too: other work on the cores stretches wall time, not CPU time.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from branchpoint.gateway.testing.openai_server import spawn as start_server  # noqa: E402

LIBRARY = ROOT / "branchpoint" / "scenarios" / "library" / "teen"


def arms_by_file() -> dict[str, int]:
    """Conversations one replicate of each teen library file makes with ``--fork independent``."""
    from branchpoint.simulator.plan import plan_run
    from branchpoint.simulator.run_config import RunConfig

    plan = plan_run(RunConfig(scenarios=[str(LIBRARY)], fork="independent", targets=["oai:x"]))
    arms: dict[str, int] = {}
    for tree in plan.trees:
        assert tree.scenario_path is not None
        arms[tree.scenario_path] = arms.get(tree.scenario_path, 0) + len(tree.arms)
    return dict(sorted(arms.items()))


def workload(conversations: int, arms: dict[str, int]) -> tuple[list[str], int]:
    """Scenario files and replicates that make exactly ``conversations`` conversations: the whole
    library where its arms divide the number, else the fewest replicates of the largest subset of
    files whose arms do (the library makes 198 a replicate: 1,000 is 8 x 125 arms of 19 files).
    Where no subset does, the whole library at the nearest number of replicates."""
    files = list(arms)
    for replicates in range(1, conversations + 1):
        if conversations % replicates:
            continue
        target = conversations // replicates
        if target > sum(arms.values()):
            continue
        # subset sum, keeping for each reachable sum the subset with the most files
        best: dict[int, list[str]] = {0: []}
        for f in files:
            for total, subset in list(best.items()):
                grown = total + arms[f]
                if grown <= target and (grown not in best or len(best[grown]) <= len(subset)):
                    best[grown] = [*subset, f]
        if target in best:
            return best[target], replicates
    return files, max(1, round(conversations / sum(arms.values())))


def reference_ms() -> float:
    """CPU ms of a fixed piece of Python work (dicts, JSON, hashing, small objects: what the
    engine does). On a shared VM the same code's CPU per call moves with the host (measured here:
    0.9 to 1.6 ms within ten minutes); figures from runs whose reference differs are scaled by it
    before they are compared."""
    import hashlib

    started = time.process_time()
    for i in range(60_000):
        row = {"id": f"c{i}", "role": "user", "content": "hello " * (i % 7), "n": i}
        text = json.dumps(row)
        hashlib.sha256(text.encode()).hexdigest()
        json.loads(text)
    return (time.process_time() - started) * 1000


def cpu_seconds(pid: int) -> float | None:
    """A live process's user + system CPU so far (Linux /proc), or None where there is none."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_stats(url: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{url}/_stats", timeout=30) as response:
        return json.loads(response.read())


@dataclass
class Figures:
    label: str
    conversations: int
    calls: int
    wall_s: float
    from_first_s: float
    ideal_s: float
    cpu_ms_per_call: float
    peak_rss_mb: float
    peak_in_flight: int
    bytes_per_conversation: float
    server_ms_per_call: float | None = None
    startup_s: float = 0.0  # process start to the server's first request
    winddown_s: float = 0.0  # the server's last answer to the process's exit

    def show(self) -> str:
        return (
            f"{self.label}: {self.conversations} conversations, {self.calls} calls\n"
            f"  wall {self.wall_s:.1f} s (from first call {self.from_first_s:.1f} s), "
            f"ideal {self.ideal_s:.1f} s: ratio {self.from_first_s / self.ideal_s:.2f} from the "
            f"first call, {self.wall_s / self.ideal_s:.2f} whole process\n"
            f"  CPU {self.cpu_ms_per_call:.2f} ms per model call, peak RSS "
            f"{self.peak_rss_mb:.0f} MB, peak calls in flight {self.peak_in_flight}, store "
            f"{self.bytes_per_conversation / 1024:.1f} KiB per conversation\n"
            f"  fixed costs: {self.startup_s:.2f} s from the process's start to the first call, "
            f"{self.winddown_s:.2f} s from the last answer to its exit"
            + (
                f"\n  the loopback server, on the same cores: {self.server_ms_per_call:.2f} ms "
                "CPU per call"
                if self.server_ms_per_call is not None
                else ""
            )
        )


def store_bytes(db: Path) -> int:
    with sqlite3.connect(db) as con:
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return sum(p.stat().st_size for p in db.parent.glob(db.name + "*"))


def count(db: Path, sql: str) -> int:
    with sqlite3.connect(db) as con:
        return int(con.execute(sql).fetchone()[0])


def sweep_argv(
    db: Path,
    spec: str,
    url: str,
    scenarios: list[str],
    replicates: int,
    max_turns: int,
    concurrency: int,
    budget: float,
) -> list[str]:
    """``branchpoint sweep`` of the workload ``run_once`` gives ``run``, the model priced, with a
    budget of ``budget`` USD (0: none)."""
    manifest = db.with_suffix(".yaml")  # JSON is YAML
    body = {
        "name": "bench",
        "scenarios": {"paths": scenarios},
        "targets": [
            {
                "spec": spec,
                "params": {"api_base": url},
                "price": {"input_per_mtok": 1.0, "output_per_mtok": 1.0},
            }
        ],
        "simulators": [spec],  # the target's price prices it
        "simulator_params": {"api_base": url},
        "replicates": replicates,
        "max_exchanges": max_turns,
        "fork": "independent",
        "execution": {"concurrency": concurrency},
        "store": str(db),
        **({"budget": {"usd_total": budget}} if budget else {}),
    }
    manifest.write_text(json.dumps(body), encoding="utf-8")
    return [sys.executable, "-m", "branchpoint.tui.cli", "sweep", str(manifest), "--yes"]


def run_once(
    label: str,
    spec: str,
    url: str,
    *,
    scenarios: list[str],
    replicates: int,
    max_turns: int,
    concurrency: int,
    delay_ms: float,
    workdir: Path,
    extra: list[str],
    server_pid: int | None = None,
    env_extra: dict[str, str] | None = None,
    budget: float | None = None,
) -> Figures:
    db = workdir / f"{label.replace(' ', '_').replace(':', '')}.db"
    param = "api_base=" + url
    if budget is not None:
        argv = sweep_argv(db, spec, url, scenarios, replicates, max_turns, concurrency, budget)
    else:
        argv = [
            sys.executable,  # `branchpoint run`, from this tree (BEFORE figures run a copy of it)
            "-m",
            "branchpoint.tui.cli",
            "run",
            *scenarios,
            "-n",
            str(replicates),
            "--max-turns",
            str(max_turns),
            "--fork",
            "independent",
            "--concurrency",
            str(concurrency),
            "--target",
            spec,
            "--target-param",
            param,
            "--simulator",
            spec,
            "--simulator-param",
            param,
            "--db",
            str(db),
            *extra,
        ]
    env = dict(os.environ, OPENAI_API_KEY="sk-benchmark-dummy-key", **(env_extra or {}))
    env.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    server_before = cpu_seconds(server_pid) if server_pid is not None else None
    started = time.time()
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)
        # wait4: this child's own CPU and peak RSS, not the server's
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        ended = time.time()
        if proc.returncode != 0:
            err.seek(0)
            raise SystemExit(f"{label}: branchpoint run failed ({proc.returncode}):\n{err.read()}")
    stats = server_stats(url)
    server_after = cpu_seconds(server_pid) if server_pid is not None else None
    calls = int(stats["requests"])
    conversations = count(db, "SELECT count(*) FROM conversations")
    failed = count(db, "SELECT count(*) FROM conversations WHERE status != 'completed'")
    if failed:
        print(f"  warning: {failed} conversations did not complete", file=sys.stderr)
    per_conversation = calls / max(conversations, 1)
    ideal = per_conversation * delay_ms / 1000 * math.ceil(conversations / concurrency)
    from_first = ended - (stats["first_at"] or started)  # each run has a fresh server
    cpu = usage.ru_utime + usage.ru_stime
    return Figures(
        label=label,
        conversations=conversations,
        calls=calls,
        wall_s=ended - started,
        from_first_s=from_first,
        ideal_s=ideal,
        cpu_ms_per_call=cpu * 1000 / max(calls, 1),
        peak_rss_mb=usage.ru_maxrss / 1024,
        peak_in_flight=int(stats["peak_in_flight"]),
        bytes_per_conversation=store_bytes(db) / max(conversations, 1),
        server_ms_per_call=(server_after - server_before) * 1000 / max(calls, 1)
        if server_before is not None and server_after is not None
        else None,
        startup_s=(stats["first_at"] or started) - started,
        winddown_s=ended - (stats["last_at"] or ended),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--delay-ms", type=float, default=100.0)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--wide", type=int, default=1000, help="the second, wider concurrency")
    parser.add_argument("--growth-conversations", type=int, default=200)
    parser.add_argument("--litellm-conversations", type=int, default=1000)
    parser.add_argument("--skip-wide", action="store_true")
    parser.add_argument("--skip-litellm", action="store_true")
    parser.add_argument("--skip-growth", action="store_true")
    parser.add_argument("--only-litellm", action="store_true")
    parser.add_argument(
        "--client-ab",
        action="store_true",
        help="also run oai: with every request through aiohttp (the proxy route), right after the "
        "lean client's run at the same concurrency: what the hand-written client buys",
    )
    parser.add_argument("--extra", action="append", default=[], help="more `run` arguments")
    parser.add_argument(
        "--budget",
        type=float,
        default=None,
        metavar="USD",
        help="run each workload as `branchpoint sweep` with this budget (0: a sweep without one)",
    )
    parser.add_argument(
        "--processes",
        default="1",
        metavar="N|auto",
        help="`run --processes`: worker processes (CPU and peak RSS are then the parent's and "
        "its waited-for workers' together: CPU summed, RSS the largest one)",
    )
    args = parser.parse_args()
    args.extra = [*args.extra, "--processes", args.processes]

    arms = arms_by_file()
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"reference work before: {reference_ms():.0f} ms of CPU")
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        jobs: list[tuple[str, str, int, tuple[list[str], int], dict[str, str]]] = []
        n, n_litellm = (
            workload(args.conversations, arms),
            workload(args.litellm_conversations, arms),
        )
        if not args.only_litellm:
            jobs.append((f"oai @{args.concurrency}", "oai:bench", args.concurrency, n, {}))
            if args.client_ab:
                aiohttp = {"BRANCHPOINT_OAI_CLIENT": "aiohttp"}
                label = f"oai @{args.concurrency} aiohttp"
                jobs.append((label, "oai:bench", args.concurrency, n, aiohttp))
            if not args.skip_wide:
                jobs.append((f"oai @{args.wide}", "oai:bench", args.wide, n, {}))
        if not args.skip_litellm:
            spec = "litellm:openai/bench"
            jobs.append((f"litellm @{args.concurrency}", spec, args.concurrency, n_litellm, {}))
        for label, spec, concurrency, (scenarios, replicates), env_extra in jobs:
            print(f"{label}: {len(scenarios)} of {len(arms)} files x {replicates} replicates")
            server, url = start_server(args.delay_ms)  # a fresh server: its first call is ours
            try:
                figures = run_once(
                    label,
                    spec,
                    url,
                    scenarios=scenarios,
                    replicates=replicates,
                    max_turns=10,
                    concurrency=concurrency,
                    delay_ms=args.delay_ms,
                    workdir=workdir,
                    extra=args.extra,
                    server_pid=server.pid,
                    env_extra=env_extra,
                    budget=args.budget,
                )
            finally:
                server.kill()
                server.wait()
            print(figures.show(), flush=True)
        if not args.skip_growth:
            scenarios, replicates = workload(args.growth_conversations, arms)
            sizes: dict[int, float] = {}
            for turns in (10, 20):
                server, url = start_server(0)
                try:
                    figures = run_once(
                        f"growth {turns}",
                        "oai:bench",
                        url,
                        scenarios=scenarios,
                        replicates=replicates,
                        max_turns=turns,
                        concurrency=args.concurrency,
                        delay_ms=1,
                        workdir=workdir,
                        extra=args.extra,
                    )
                finally:
                    server.kill()
                    server.wait()
                sizes[turns] = figures.bytes_per_conversation
            print(
                f"store per conversation: {sizes[10] / 1024:.1f} KiB at 10 exchanges, "
                f"{sizes[20] / 1024:.1f} KiB at 20: {sizes[20] / sizes[10]:.2f}x"
            )
    print(f"reference work after: {reference_ms():.0f} ms of CPU")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
