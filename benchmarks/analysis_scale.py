"""Scale benchmark of the analysis: 35,000 conversations x 20 chatbot turns x 22 criteria.

    .venv/bin/python benchmarks/analysis_scale.py [--design flat|forks|both] [--db PATH]
        [--rebuild] [--n-boot 2000] [--scenarios N]

``--scenarios 40 --db /tmp/small.db`` builds a store a fifth of the size (3.5 M judgments, about
70 s) to iterate on. A store built by an earlier version (schema 8) is upgraded when opened with
``branchpoint.core.store.open_store``, which fills its judgment summaries (about 60 s and 1.5 GB for the
forks store); the analysis of a store opened read-only before that counts from every judgment row.

Two stores (``--design both``, the default, times each in its own process and prints both):

* ``flat``: 35,100 independent conversations, one judge, one simulator (15.4 M judgments).
* ``forks``: the same 35,100 conversations as a real study stores them: each option arm is a fork
  of its scenario's baseline arm (sharing its turns up to the branch point; one arm in ten never
  forked and is a copy), two simulators, and a second judge on one conversation in ten (16.9 M
  judgments). Its analysis counts each copied turn once, cuts contrasts at the fork and compares
  the simulators: what ``branchpoint analyze`` does on it (``branchpoint.analysis.pairing.fork_summaries.fork_tables``, from
  the judgment summaries: ``branchpoint.core.judgment_summaries``).

Builds (once, cached under /tmp) a real store of ~15.4 million judgment rows with known effects,
then times what ``branchpoint analyze`` does: read the store (SQL aggregation to conversation x
criterion counts), failure rates with cluster-bootstrap intervals at the turn and conversation
levels, every matched branch-point contrast (McNemar, Wilcoxon, Friedman, Holm, per-target
intervals) and the prompt-condition contrast. Prints wall time per step and the peak resident
memory of the process (``resource.getrusage``; the build runs in a child process so that it does
not count). Target: under 10 s and 2 GB (issue 37).

The store is generated inside SQLite (INSERT ... SELECT with a deterministic integer hash for the
draws) so that building 15 million rows takes minutes, not an hour of Python tuples.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import resource
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_DB = Path("/tmp/branchpoint-bench/analysis_scale.db")
FORKS_DB = Path("/tmp/branchpoint-bench/analysis_scale_forks.db")
BUILD_MARK = "analysis_scale_v2"
FORKS_MARK = "analysis_scale_forks_v1"
N_TARGETS = 18
CONDITIONS = ("none", "teen_aware")
# x 5 variants x 18 targets x 2 conditions = 35,100 conversations (--scenarios: a smaller store)
N_SCENARIOS = int(os.environ.get("ANALYSIS_SCALE_SCENARIOS", "195"))
N_EXCHANGES = 20
AREAS = ("acute_harm", "medical_boundaries", "relational_safety")
CRITERIA = [f"crit{i:02d}" for i in range(22)]
BRANCH_POINTS = {  # baseline first; "limit" has three options, so Friedman runs too
    "disclosure": ["guarded", "open"],
    "help": ["accept", "decline"],
    "limit": ["accept_limit", "push_back", "argue"],
}
JUDGE = "litellm:judge/model"
# forks design: 9 targets x 2 simulators keep 35,100 conversations
FORK_TARGETS = 9
SIMULATORS = ("litellm:sim/model-a", "litellm:sim/model-b")
SECOND_JUDGE = "litellm:judge2/model"
# The turn each branch point forks at (the persona message after it fired), as the engine stores it.
FORK_TURN = {"disclosure": 4, "help": 8, "limit": 12}


def _built(path: Path, mark: str = BUILD_MARK) -> bool:
    if not path.exists():
        return False
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        row = con.execute("SELECT value FROM schema_info WHERE key = ?", (mark,)).fetchone()
        con.close()
        return row is not None and row[0] == "complete"
    except sqlite3.Error:
        return False


def build(path: Path) -> None:
    from branchpoint.analysis.testing.synthetic import NOW, variants
    from branchpoint.core.judgment_summaries import drop_triggers
    from branchpoint.core.store import open_store

    t0 = time.perf_counter()
    path.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    open_store(path).close()
    con = sqlite3.connect(str(path))
    con.execute("PRAGMA journal_mode=OFF")
    con.execute("PRAGMA synchronous=OFF")
    con.execute("PRAGMA cache_size=-1500000")  # 1.5 GB page cache for the build
    con.execute("PRAGMA temp_store=MEMORY")
    # Secondary indexes are rebuilt after the bulk insert (sorting once beats 15M b-tree inserts).
    idx = con.execute(
        "SELECT name, sql FROM sqlite_master WHERE type='index' AND sql IS NOT NULL AND tbl_name IN ('judgments','turns')"
    ).fetchall()
    for name, _ in idx:
        con.execute(f'DROP INDEX "{name}"')
    drop_triggers(con)  # the summaries are filled once after the bulk insert (_summaries)

    rng = np.random.default_rng(7)
    run_id = "bench-scale"
    con.execute(
        "INSERT INTO runs (id, kind, name, status, config, branchpoint_version, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?)",
        (run_id, "sweep", "synthetic scale benchmark", "completed", "{}", "bench", NOW, NOW),
    )
    base = {"acute_harm": 0.45, "medical_boundaries": 0.30, "relational_safety": 0.35}
    areas = [AREAS[i % 3] for i in range(len(CRITERIA))]
    scen_re = rng.normal(0, 0.04, size=(N_SCENARIOS, len(CRITERIA)))
    target_re = rng.normal(0, 0.03, size=N_TARGETS)
    p_app = rng.uniform(0.3, 0.8, size=len(CRITERIA))
    conv_rows, p_rows = [], []
    crow = 0
    for s in range(N_SCENARIOS):
        for ch in variants(BRANCH_POINTS, "one_at_a_time"):
            vid = f"v{s:03d}-" + "-".join(ch.values())
            for t in range(N_TARGETS):
                for cond in CONDITIONS:
                    cid = f"{crow:08d}"
                    conv_rows.append(
                        (cid, run_id, f"scn{s:03d}", "h", None, vid, json.dumps(ch), f"litellm:p/target{t:02d}", "{}",
                         cond, "litellm:sim/model", "{}", 0, 0, "completed", 2 * N_EXCHANGES, NOW, NOW)
                    )  # fmt: skip
                    for k, crit in enumerate(CRITERIA):
                        p = (
                            base[areas[k]]
                            + scen_re[s, k]
                            + target_re[t]
                            - (0.18 if cond == "teen_aware" else 0.0)
                        )
                        if (
                            ch["limit"] == "push_back"
                            and areas[k] == "medical_boundaries"
                            and t < 16
                        ):
                            p += 0.11
                        if ch["help"] == "decline" and areas[k] == "relational_safety":
                            p += 0.18
                        p_rows.append(
                            (
                                crow,
                                cid,
                                k,
                                crit,
                                areas[k],
                                float(p_app[k]),
                                float(np.clip(p, 0.01, 0.8)),
                            )
                        )
                    crow += 1
    from branchpoint.analysis.testing.synthetic import CONV_COLS

    con.executemany(
        f"INSERT INTO conversations ({', '.join(CONV_COLS)}) VALUES ({', '.join('?' * len(CONV_COLS))})",
        conv_rows,
    )
    con.execute(
        "CREATE TEMP TABLE bp (crow INTEGER, cid TEXT, k INTEGER, crit TEXT, area TEXT, p_app REAL, p_fail REAL)"
    )
    con.executemany("INSERT INTO bp VALUES (?,?,?,?,?,?,?)", p_rows)
    con.execute("CREATE TEMP TABLE ex (e INTEGER)")
    con.executemany("INSERT INTO ex VALUES (?)", [(e,) for e in range(1, N_EXCHANGES + 1)])
    con.execute("CREATE TEMP TABLE ix (i INTEGER)")
    con.executemany("INSERT INTO ix VALUES (?)", [(i,) for i in range(2 * N_EXCHANGES)])
    print(f"  conversations and probabilities: {time.perf_counter() - t0:.1f}s", flush=True)
    con.execute(
        'INSERT INTO turns (id, conversation_id, "index", exchange, role, content, reasoning, branch_state, fired, events, '
        "model, tokens_in, tokens_out, latency_s, retries, retry_reasons, created_at) "
        "SELECT c.id || ':' || ix.i, c.id, ix.i, ix.i / 2 + 1, CASE ix.i % 2 WHEN 0 THEN 'user' ELSE 'assistant' END, "
        "CASE ix.i % 2 WHEN 0 THEN 'persona message number ' || ix.i ELSE 'chatbot reply number ' || ix.i END, NULL, "
        "'{}', '[]', '[]', c.target, 50, 120, 0.5, 0, '[]', c.created_at FROM conversations c CROSS JOIN ix"
    )
    print(f"  turns: {time.perf_counter() - t0:.1f}s", flush=True)
    # Two independent uniforms per row from a multiply-xorshift-multiply hash of (conversation,
    # exchange, criterion); SQLite has no XOR, so a ^ b = (a | b) - (a & b).
    x = "((bp.crow * 32 + ex.e) * 32 + bp.k)"
    h1 = f"(({x} * 2654435761) % 4294967296)"
    mix = f"((({h1} | ({h1} >> 15)) - ({h1} & ({h1} >> 15))) * 2246822519 % 4294967296)"
    h2 = f"((({x} + 7919) * 3266489917) % 4294967296)"
    mix2 = f"((({h2} | ({h2} >> 13)) - ({h2} & ({h2} >> 13))) * 668265263 % 4294967296)"
    con.execute(
        "INSERT INTO judgments (id, run_id, conversation_id, turn_id, turn_index, rubric_id, rubric_hash, criterion_id, "
        "risk_area, judge, prompt_version, applicable, verdict, score, rationale, evidence, members, created_at) "
        "SELECT id, ?, cid, tid, ti, 'teen', 'rh', crit, area, ?, 'v1', app, verdict, "
        "CASE verdict WHEN 'pass' THEN 1.0 WHEN 'partial' THEN 0.5 WHEN 'fail' THEN 0.0 END, '', '[]', '[]', ? FROM ("
        "  SELECT bp.cid || ':' || (2 * ex.e - 1) || ':' || bp.crit || ':' || ? AS id, bp.cid AS cid, "
        "  bp.cid || ':' || (2 * ex.e - 1) AS tid, 2 * ex.e - 1 AS ti, bp.crit AS crit, bp.area AS area, "
        f"  ({mix} / 4294967296.0 < bp.p_app) AS app, "
        f"  CASE WHEN {mix} / 4294967296.0 >= bp.p_app THEN NULL "
        f"       WHEN {mix2} / 4294967296.0 > 0.995 THEN 'error' "
        f"       WHEN {mix2} / 4294967296.0 < bp.p_fail THEN 'fail' "
        f"       WHEN {mix2} / 4294967296.0 < bp.p_fail + 0.15 THEN 'partial' ELSE 'pass' END AS verdict "
        "  FROM bp CROSS JOIN ex)",
        (run_id, JUDGE, NOW, JUDGE),
    )
    print(f"  judgments: {time.perf_counter() - t0:.1f}s", flush=True)
    for _name, sql in idx:
        con.execute(sql)
    _summaries(con, path, t0)
    print(f"  indexes: {time.perf_counter() - t0:.1f}s", flush=True)
    con.execute("INSERT INTO schema_info (key, value) VALUES (?, 'complete')", (BUILD_MARK,))
    con.commit()
    con.execute("PRAGMA journal_mode=WAL")
    con.close()
    print(
        f"built {path} in {time.perf_counter() - t0:.1f}s ({path.stat().st_size / 1e9:.2f} GB)",
        flush=True,
    )


def _summaries(con: sqlite3.Connection, path: Path, t0: float) -> None:
    """The judgment summaries of the bulk-inserted rows (their triggers were off), as migration 8
    fills them."""
    from branchpoint.core.judgment_summaries import backfill

    con.commit()
    backfill(con, str(path))
    print(f"  judgment summaries: {time.perf_counter() - t0:.1f}s", flush=True)


def _hash_verdict(x: str, p_app: str, p_fail: str) -> tuple[str, str]:
    """SQL for (applicable, verdict) drawn from the integer ``x`` (two independent uniforms from a
    multiply-xorshift-multiply hash; SQLite has no XOR, so a ^ b = (a | b) - (a & b))."""
    h1 = f"((({x}) * 2654435761) % 4294967296)"
    mix = f"((({h1} | ({h1} >> 15)) - ({h1} & ({h1} >> 15))) * 2246822519 % 4294967296)"
    h2 = f"(((({x}) + 7919) * 3266489917) % 4294967296)"
    mix2 = f"((({h2} | ({h2} >> 13)) - ({h2} & ({h2} >> 13))) * 668265263 % 4294967296)"
    app = f"({mix} / 4294967296.0 < {p_app})"
    verdict = (
        f"CASE WHEN {mix} / 4294967296.0 >= {p_app} THEN NULL "
        f"WHEN {mix2} / 4294967296.0 > 0.995 THEN 'error' "
        f"WHEN {mix2} / 4294967296.0 < {p_fail} THEN 'fail' "
        f"WHEN {mix2} / 4294967296.0 < {p_fail} + 0.15 THEN 'partial' ELSE 'pass' END"
    )
    return app, verdict


def build_forks(path: Path) -> None:
    """The forks design: fork trees, copies, two simulators, a second judge on a tenth."""
    from branchpoint.analysis.testing.synthetic import CONV_COLS, NOW, variants
    from branchpoint.core.judgment_summaries import drop_triggers
    from branchpoint.core.store import open_store

    t0 = time.perf_counter()
    path.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    open_store(path).close()
    con = sqlite3.connect(str(path))
    con.execute("PRAGMA journal_mode=OFF")
    con.execute("PRAGMA synchronous=OFF")
    con.execute("PRAGMA cache_size=-1500000")
    con.execute("PRAGMA temp_store=MEMORY")
    idx = con.execute(
        "SELECT name, sql FROM sqlite_master WHERE type='index' AND sql IS NOT NULL AND tbl_name IN ('judgments','turns')"
    ).fetchall()
    for name, _ in idx:
        con.execute(f'DROP INDEX "{name}"')
    drop_triggers(con)  # the summaries are filled once after the bulk insert (_summaries)
    rng = np.random.default_rng(7)
    run_id = "bench-forks"
    con.execute(
        "INSERT INTO runs (id, kind, name, status, config, branchpoint_version, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?)",
        (run_id, "sweep", "synthetic scale benchmark, forks", "completed", "{}", "bench", NOW, NOW),
    )
    base = {"acute_harm": 0.45, "medical_boundaries": 0.30, "relational_safety": 0.35}
    areas = [AREAS[i % 3] for i in range(len(CRITERIA))]
    scen_re = rng.normal(0, 0.04, size=(N_SCENARIOS, len(CRITERIA)))
    target_re = rng.normal(0, 0.03, size=FORK_TARGETS)
    p_app = rng.uniform(0.3, 0.8, size=len(CRITERIA))
    arms = variants(BRANCH_POINTS, "one_at_a_time")
    per_arm = FORK_TARGETS * len(CONDITIONS) * len(SIMULATORS)
    conv_rows, p_rows = [], []
    crow = 0

    def p_fail(s: int, k: int, t: int, cond: str, sim: int, ch: dict[str, str]) -> float:
        p = base[areas[k]] + scen_re[s, k] + target_re[t] - (0.18 if cond == "teen_aware" else 0)
        p += 0.03 * sim  # the second simulator draws slightly more failures
        if ch["limit"] == "push_back" and areas[k] == "medical_boundaries" and t < 8:
            p += 0.11
        if ch["help"] == "decline" and areas[k] == "relational_safety":
            p += 0.18
        return float(np.clip(p, 0.01, 0.8))

    for s in range(N_SCENARIOS):
        for vi, ch in enumerate(arms):
            vid = f"v{s:03d}-" + "-".join(ch.values())
            moved = [bp for bp, opt in ch.items() if opt != BRANCH_POINTS[bp][0]]
            for t in range(FORK_TARGETS):
                for cond in CONDITIONS:
                    for si, sim in enumerate(SIMULATORS):
                        cid = f"{crow:08d}"
                        src = crow - vi * per_arm  # the tree's baseline arm
                        copy = bool(moved) and crow % 10 == 0
                        fork = None if not moved or copy else FORK_TURN[moved[0]]
                        conv_rows.append(
                            (cid, run_id, f"scn{s:03d}", "h", None, vid, json.dumps(ch),
                             f"litellm:p/target{t:02d}", "{}", cond, sim, "{}", 0, 0, "completed",
                             2 * N_EXCHANGES, NOW, NOW,
                             f"{src:08d}" if moved else None, fork)
                        )  # fmt: skip
                        shared = 0 if not moved else (1000 if copy else fork)
                        b_ch = dict(arms[0])
                        for k, crit in enumerate(CRITERIA):
                            p_rows.append(
                                (crow, cid, k, crit, areas[k], float(p_app[k]),
                                 p_fail(s, k, t, cond, si, ch), src, shared,
                                 p_fail(s, k, t, cond, si, b_ch))
                            )  # fmt: skip
                        crow += 1
    cols = [*CONV_COLS, "parent_id", "fork_turn"]
    con.executemany(
        f"INSERT INTO conversations ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
        conv_rows,
    )
    con.execute(
        "CREATE TEMP TABLE bp (crow INTEGER, cid TEXT, k INTEGER, crit TEXT, area TEXT, "
        "p_app REAL, p_fail REAL, src INTEGER, shared INTEGER, p_fail0 REAL)"
    )
    con.executemany("INSERT INTO bp VALUES (?,?,?,?,?,?,?,?,?,?)", p_rows)
    con.execute("CREATE TEMP TABLE ex (e INTEGER)")
    con.executemany("INSERT INTO ex VALUES (?)", [(e,) for e in range(1, N_EXCHANGES + 1)])
    con.execute("CREATE TEMP TABLE ix (i INTEGER)")
    con.executemany("INSERT INTO ix VALUES (?)", [(i,) for i in range(2 * N_EXCHANGES)])
    print(f"  conversations and probabilities: {time.perf_counter() - t0:.1f}s", flush=True)
    con.execute(
        'INSERT INTO turns (id, conversation_id, "index", exchange, role, content, reasoning, branch_state, fired, events, '
        "model, tokens_in, tokens_out, latency_s, retries, retry_reasons, created_at) "
        "SELECT c.id || ':' || ix.i, c.id, ix.i, ix.i / 2 + 1, CASE ix.i % 2 WHEN 0 THEN 'user' ELSE 'assistant' END, "
        "CASE ix.i % 2 WHEN 0 THEN 'persona message number ' || ix.i ELSE 'chatbot reply number ' || ix.i END, NULL, "
        "'{}', '[]', '[]', c.target, 50, 120, 0.5, 0, '[]', c.created_at FROM conversations c CROSS JOIN ix"
    )
    print(f"  turns: {time.perf_counter() - t0:.1f}s", flush=True)
    # A turn before the fork is the baseline's turn copied: the baseline's draw, verdict and all.
    for judge, salt, where in ((JUDGE, 0, ""), (SECOND_JUDGE, 1_000_003, "WHERE crow % 10 = 3")):
        app, verdict = _hash_verdict(f"(xs * 32 + e) * 32 + k + {salt}", "pa", "pf")
        con.execute(
            "INSERT INTO judgments (id, run_id, conversation_id, turn_id, turn_index, rubric_id, rubric_hash, criterion_id, "
            "risk_area, judge, prompt_version, applicable, verdict, score, rationale, evidence, members, created_at) "
            "SELECT id, ?, cid, tid, ti, 'teen', 'rh', crit, area, ?, 'v1', app, verdict, "
            "CASE verdict WHEN 'pass' THEN 1.0 WHEN 'partial' THEN 0.5 WHEN 'fail' THEN 0.0 END, '', '[]', '[]', ? FROM ("
            f"  SELECT id, cid, tid, ti, crit, area, {app} AS app, {verdict} AS verdict FROM ("
            "    SELECT bp.cid || ':' || (2 * ex.e - 1) || ':' || bp.crit || ':' || ? AS id, bp.cid AS cid, "
            "    bp.cid || ':' || (2 * ex.e - 1) AS tid, 2 * ex.e - 1 AS ti, bp.crit AS crit, bp.area AS area, "
            "    ex.e AS e, bp.k AS k, bp.p_app AS pa, "
            "    CASE WHEN 2 * ex.e - 1 < bp.shared THEN bp.src ELSE bp.crow END AS xs, "
            "    CASE WHEN 2 * ex.e - 1 < bp.shared THEN bp.p_fail0 ELSE bp.p_fail END AS pf "
            f"    FROM bp CROSS JOIN ex {where}))",
            (run_id, judge, NOW, judge),
        )
        print(f"  judgments ({judge}): {time.perf_counter() - t0:.1f}s", flush=True)
    for _name, sql in idx:
        con.execute(sql)
    _summaries(con, path, t0)
    print(f"  indexes: {time.perf_counter() - t0:.1f}s", flush=True)
    con.execute("INSERT INTO schema_info (key, value) VALUES (?, 'complete')", (FORKS_MARK,))
    con.commit()
    con.execute("PRAGMA journal_mode=WAL")
    con.close()
    print(
        f"built {path} in {time.perf_counter() - t0:.1f}s ({path.stat().st_size / 1e9:.2f} GB)",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--design", choices=("flat", "forks", "both"), default="both")
    ap.add_argument(
        "--db", type=Path, default=None, help="the store (default: per design, in /tmp)"
    )
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument("--n-boot", type=int, default=2000)
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument(
        "--scenarios",
        type=int,
        default=None,
        help="build with this many scenarios instead of 195 (a smaller store to iterate on; "
        "pair it with --db)",
    )
    ap.add_argument(
        "--report", type=Path, default=None, help="Also time write_report into this directory."
    )
    args = ap.parse_args()
    if args.scenarios is not None:  # read at import by the build process (spawned)
        os.environ["ANALYSIS_SCALE_SCENARIOS"] = str(args.scenarios)
        global N_SCENARIOS
        N_SCENARIOS = args.scenarios
    if args.design == "both":  # each in its own process: its own peak RSS
        for design in ("flat", "forks"):
            print(f"=== design: {design} ===", flush=True)
            argv = [a for a in sys.argv[1:] if not a.startswith("--design")]
            argv = [a for i, a in enumerate(argv) if not (i and argv[i - 1] == "--design")]
            argv = [a for a in argv if a not in ("flat", "forks", "both")]
            done = subprocess.run([sys.executable, __file__, "--design", design, *argv])
            if done.returncode:
                raise SystemExit(done.returncode)
        return
    forks = args.design == "forks"
    db = args.db or (FORKS_DB if forks else DEFAULT_DB)
    if args.rebuild or not _built(db, FORKS_MARK if forks else BUILD_MARK):
        print(f"building the synthetic store at {db} (once; cached) ...", flush=True)
        proc = mp.get_context("spawn").Process(target=build_forks if forks else build, args=(db,))
        proc.start()
        proc.join()
        if proc.exitcode != 0:
            raise SystemExit(f"build failed (exit {proc.exitcode})")
    if args.build_only:
        return
    if forks:
        analyse_forks(db, args.n_boot)
        return
    args.db = db

    from branchpoint.analysis.contrasts.matched import condition_contrast, matched_contrasts
    from branchpoint.analysis.outcomes.rates import failure_rates
    from branchpoint.analysis.tables.judgments import conversation_criterion_table

    steps: list[tuple[str, float]] = []
    print(
        f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (other work on the machine slows every figure); {speed_check()}"
    )
    t_all = time.perf_counter()
    cpu_all = cpu_s()

    cpu_mark = [cpu_s()]

    def step(name: str, t: float) -> None:
        steps.append((name, time.perf_counter() - t))
        cpu = cpu_s() - cpu_mark[0]
        cpu_mark[0] = cpu_s()
        print(
            f"{name:<48} {steps[-1][1]:7.2f} s wall {cpu:7.2f} s CPU   peak RSS {peak_gb():.2f} GB",
            flush=True,
        )

    t = time.perf_counter()
    cc = conversation_criterion_table(args.db)
    step(f"read store -> {len(cc):,} conversation x criterion rows", t)
    n_judgments = None
    con = sqlite3.connect(f"file:{args.db}?mode=ro", uri=True)
    n_judgments = con.execute("SELECT MAX(rowid) FROM judgments").fetchone()[0]
    con.close()
    t = time.perf_counter()
    rates = failure_rates(cc, n_boot=args.n_boot)
    step(f"failure rates (turn level, {len(rates)} groups, B={args.n_boot})", t)
    t = time.perf_counter()
    conv_rates = failure_rates(cc, level="conversation", n_boot=args.n_boot)
    step(f"failure rates (conversation level, {len(conv_rates)} groups)", t)
    t = time.perf_counter()
    mc = matched_contrasts(cc, n_boot=args.n_boot)
    step(
        f"matched contrasts ({len(mc.contrasts)} + {len(mc.per_target)} per target, Friedman {len(mc.friedman)})",
        t,
    )
    t = time.perf_counter()
    cond = condition_contrast(cc, n_boot=args.n_boot)
    step(f"condition contrast ({len(cond.contrasts)} rows)", t)
    total = time.perf_counter() - t_all
    cpu_total = cpu_s() - cpu_all
    if args.report is not None:
        from branchpoint.analysis.report.write import write_report

        t = time.perf_counter()
        files = write_report(args.db, args.report, n_boot=args.n_boot)
        step(f"full report (re-reads the store) -> {files.html}", t)
    print("-" * 80)
    print(f"load average after: {os.getloadavg()[0]:.1f}; {speed_check()}")
    print(
        f"judgment rows in store: {n_judgments:,}; conversations: {cc['conversation_id'].nunique():,}"
    )
    print(
        f"TOTAL wall time: {total:.1f} s (target < 10 s); peak RSS: {peak_gb():.2f} GB (target < 2 GB)"
    )
    print(f"CPU time of the analysis (all threads; load-independent): {cpu_total:.1f} s")
    top = mc.contrasts.sort_values("p_scenario_holm").head(3)
    for r in top.itertuples():
        print(
            f"  {r.contrast} / {r.criterion_id}: diff {r.diff:+.3f} [{r.ci_low:+.3f}, {r.ci_high:+.3f}] n={r.n_pairs} p_scenario_holm={r.p_scenario_holm:.2g}"
        )


def analyse_forks(db: Path, n_boot: int) -> None:
    """What ``branchpoint analyze`` computes on a store with forks, versions and simulators: the
    fork-aware counts (copied turns once, whole-arm copies left out at the conversation level,
    per-turn counts for the cut at the fork), rates at both levels, post-fork matched contrasts,
    the condition contrast and the simulator comparisons."""
    from branchpoint.analysis.contrasts.matched import (
        condition_contrast,
        matched_contrasts,
        simulator_sensitivity,
    )
    from branchpoint.analysis.contrasts.sensitivity import conclusions_by_simulator
    from branchpoint.analysis.outcomes.rates import failure_rates
    from branchpoint.analysis.pairing.fork_summaries import fork_tables

    print(
        f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs (other work on the machine slows every figure); {speed_check()}"
    )
    t_all, cpu_all, mark = time.perf_counter(), cpu_s(), [cpu_s()]

    def step(name: str, t: float) -> None:
        cpu = cpu_s() - mark[0]
        mark[0] = cpu_s()
        print(
            f"{name:<58} {time.perf_counter() - t:7.2f} s wall {cpu:7.2f} s CPU   peak RSS {peak_gb():.2f} GB",
            flush=True,
        )

    t = time.perf_counter()
    ft = fork_tables(str(db), None)
    assert ft is not None
    n_rows = ft.n_judgments
    step(f"read store -> fork counts ({n_rows:,} judgments)", t)
    t = time.perf_counter()
    rates = failure_rates(ft.cc, n_boot=n_boot)
    step(f"failure rates (turn level, copies once, {len(rates)} groups)", t)
    t = time.perf_counter()
    conv_rates = failure_rates(ft.cc_conversation, level="conversation", n_boot=n_boot)
    step(f"failure rates (conversation level, {len(conv_rates)} groups)", t)
    t = time.perf_counter()
    mc = matched_contrasts(ft.paired, n_boot=n_boot)
    step(
        f"matched contrasts after the fork ({len(mc.contrasts)} + {len(mc.per_target)} per target)",
        t,
    )
    t = time.perf_counter()
    cond = condition_contrast(ft.paired, n_boot=n_boot)
    step(f"condition contrast ({len(cond.contrasts)} rows)", t)
    t = time.perf_counter()
    sims = simulator_sensitivity(ft.paired, n_boot=n_boot)
    step(f"simulator contrast ({0 if sims is None else len(sims.contrasts)} rows)", t)
    t = time.perf_counter()
    moved = conclusions_by_simulator(ft.paired, n_boot=n_boot)
    step(f"conclusions by simulator ({len(moved)} rows)", t)
    total = time.perf_counter() - t_all
    print("-" * 80)
    print(f"load average after: {os.getloadavg()[0]:.1f}; {speed_check()}")
    cc = ft.cc
    print(
        f"judgment rows in store: {n_rows:,}; conversations: {ft.cc_conversation['conversation_id'].nunique():,} "
        f"distinct (+ copies), judges: {', '.join(sorted(cc['judge'].unique()))}"
    )
    print(
        f"TOTAL wall time: {total:.1f} s (target < 10 s); peak RSS: {peak_gb():.2f} GB (target < 2 GB)"
    )
    print(f"CPU time of the analysis (all threads; load-independent): {cpu_s() - cpu_all:.1f} s")
    top = mc.contrasts.sort_values("p_scenario_holm").head(3)
    for r in top.itertuples():
        print(
            f"  {r.contrast} / {r.criterion_id}: diff {r.diff:+.3f} [{r.ci_low:+.3f}, {r.ci_high:+.3f}] n={r.n_pairs} p_scenario_holm={r.p_scenario_holm:.2g}"
        )


def speed_check() -> str:
    """How fast this machine runs Python now. A shared virtual machine can run at half speed
    with a load average under 1 (another tenant on the host): this fixed loop says so."""
    t = time.perf_counter()
    sum(range(30_000_000))
    return f"a fixed 3e7-step loop took {time.perf_counter() - t:.2f} s (0.45-0.55 s quiet here)"


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def peak_gb() -> float:
    # ru_maxrss is in kilobytes on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


if __name__ == "__main__":
    main()
