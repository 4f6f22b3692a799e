"""Scale benchmark of the plan: the largest sweep manifest the schema allows (issue 33, Build 3).

    .venv/bin/python benchmarks/plan_scale.py [--replicates 1000] [--exchanges 200]
        [--targets 1] [--conditions 1] [--simulators 1] [--timeout 300] [--profile]

Writes a manifest of the bundled teen library (branchpoint/scenarios/library/teen, all 198 variants) x
``--targets`` scripted targets x ``--conditions`` known conditions x ``--simulators`` scripted
personas x ``--replicates`` (the schema's maximum: 1000) x ``--exchanges`` (maximum: 200): by
default 198,000 cells, the most the plan allows (``branchpoint.study.plan.MAX_CELLS``: a second target or
condition is refused with one line, which the script prints with its time), with a live
heuristic judge and an after-pass model judge, and times ``branchpoint.study.api.plan_study(...,
with_keys=False)`` on it in a child process (so that its peak resident memory is the plan's, and
a plan that does not finish is killed at ``--timeout``). Prints the cells, wall time and peak RSS
(``resource.getrusage`` of the child, which includes the interpreter and litellm's import, made
before the plan starts and timed apart: it is a fixed cost, seconds on a loaded machine).
Target: under 10 s and 500 MB. ``--profile`` prints the top of a cProfile of the plan.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def manifest_text(
    replicates: int, exchanges: int, targets: int, conditions: int, simulators: int
) -> str:
    from branchpoint.scenarios.conditions import load_conditions

    target_specs = ", ".join(f"scripted:t{i}" for i in range(targets))
    simulator_specs = ", ".join(f"scripted:p{i}" for i in range(simulators))
    condition_names = ", ".join(sorted(load_conditions())[:conditions])
    return (
        "name: plan-scale\n"
        f"scenarios:\n  paths: [{ROOT / 'branchpoint/scenarios/library/teen'}]\n"
        f"targets: [{target_specs}]\n"
        f"conditions: [{condition_names}]\n"
        f"simulators: [{simulator_specs}]\n"
        "judges:\n"
        "  - {spec: heuristic, rubrics: [teen], when: live}\n"
        "  - {spec: litellm:openai/gpt-4o, rubrics: [teen], when: after}\n"
        f"replicates: {replicates}\n"
        f"max_exchanges: {exchanges}\n"
        "store: plan-scale.db\n"  # never created: a plan of a sweep never run opens no store
    )


def child(manifest: str, profile: bool) -> int:
    from branchpoint.core.errors import UserError
    from branchpoint.study.api import plan_study

    start_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    import litellm  # noqa: F401  (the model judge's price: a fixed cost, timed apart)

    imported = time.perf_counter() - t0
    t0 = time.perf_counter()
    try:
        if profile:
            import cProfile
            import pstats

            prof = cProfile.Profile()
            plan = prof.runcall(plan_study, manifest, with_keys=False)
        else:
            plan = plan_study(manifest, with_keys=False)
    except UserError as exc:  # the schema's size limit: refused with one line
        print(f"refused in {time.perf_counter() - t0:.2f} s: {exc}")
        return 2
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    sweep = plan.sweep
    calls = [int(sweep.total("calls", k) or 0) for k in ("low", "expected", "high")]
    print(f"cells {sweep.cells:,}  trees {sum(len(p.trees) for _, p in sweep.runs):,}")
    print(f"model calls low/expected/high: {calls[0]:,} / {calls[1]:,} / {calls[2]:,}")
    print(f"litellm import {imported:.2f} s (the price map; before the plan, not in its wall)")
    print(f"plan wall {wall:.2f} s  peak RSS {peak:.0f} MB (at start {start_rss:.0f} MB)")
    if profile:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(30)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicates", type=int, default=1000)
    ap.add_argument("--exchanges", type=int, default=200)
    ap.add_argument("--targets", type=int, default=1)
    ap.add_argument("--conditions", type=int, default=1, help="how many of the known ones")
    ap.add_argument("--simulators", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.child, args.profile)
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "plan-scale.yaml"
        text = manifest_text(
            args.replicates, args.exchanges, args.targets, args.conditions, args.simulators
        )
        path.write_text(text)
        cmd = [sys.executable, __file__, "--child", str(path)]
        if args.profile:
            cmd.append("--profile")
        env = {**os.environ, "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        t0 = time.perf_counter()
        try:
            done = subprocess.run(cmd, env=env, timeout=args.timeout, check=False)
        except subprocess.TimeoutExpired:
            print(f"plan did not finish within {args.timeout:.0f} s (killed)")
            return 1
        print(f"child process wall (with imports) {time.perf_counter() - t0:.2f} s")
        return done.returncode


if __name__ == "__main__":
    raise SystemExit(main())
