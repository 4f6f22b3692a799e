"""How fast the exports write, and in how much memory: every level and format on one store.

    .venv/bin/python benchmarks/export_scale.py [--scenarios 40] [--targets 10] [--exchanges 8]
        [--forks] [--copies] [--levels unit,judgment]

Builds a synthetic teen store (``branchpoint.analysis.testing.synthetic``; the defaults give 3,200
conversations, 51,200 turns and 153,600 judgments), then writes each flat level (``unit``,
``turn``, ``judgment``, ``arm``) as csv, parquet and jsonl, and the transcripts as jsonl and
parquet, each in a fresh child process (the store and files are removed afterwards). Prints rows
(or records) written, seconds, rows per second, the file's size and the child's peak resident
memory (``resource.getrusage``). Exports read a batch of conversations at a time (the unit level a
batch of whole fork trees), so memory should stay flat as the store grows.

``--forks`` makes the store into fork trees that share prefixes (``make_fork_trees``: forks at
turn 2, 4 or 6, chains two deep, every third option arm a copy), ``--copies`` adds to every arm an
arm that never forked (``add_unforked_arms``: the store doubles); with either, the unit export
resolves copies and has fewer rows than the judgment export.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from branchpoint.analysis.export.tables import LEVELS  # noqa: E402 (after the path is set)


def _one(db: str, level: str, fmt: str, out: str, queue: mp.Queue) -> None:  # type: ignore[type-arg]
    from branchpoint.analysis.export import export_level, write_transcripts

    start = time.perf_counter()
    if level == "transcript":
        n = write_transcripts(db, out, fmt)
    else:
        n = export_level(db, level, out, fmt)
    seconds = time.perf_counter() - start
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    queue.put((n, seconds, peak_mb))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", type=int, default=40)
    parser.add_argument("--targets", type=int, default=10)
    parser.add_argument("--exchanges", type=int, default=8)
    parser.add_argument("--forks", action="store_true", help="fork trees with shared prefixes")
    parser.add_argument("--copies", action="store_true", help="an unforked copy of every arm")
    parser.add_argument("--levels", default=",".join([*LEVELS, "transcript"]))
    args = parser.parse_args()
    from branchpoint.analysis.testing.synthetic import (
        TeenDesign,
        add_unforked_arms,
        make_fork_trees,
        write_teen_store,
    )

    folder = Path(tempfile.mkdtemp(prefix="branchpoint-export-bench-"))
    db = folder / "teen.db"
    design = TeenDesign(
        n_scenarios=args.scenarios,
        targets=tuple(f"scripted:t{i}" for i in range(args.targets)),
        n_exchanges=args.exchanges,
        reasoning=True,
    )
    write_teen_store(db, design, seed=0)
    if args.forks:
        make_fork_trees(db)
    if args.copies:
        add_unforked_arms(db)
    print(f"store: {db} ({db.stat().st_size / 1e6:.1f} MB)")
    print(
        f"{'level':<11} {'format':<8} {'rows':>9} {'seconds':>8} {'rows/s':>9} {'MB out':>7} {'peak MB':>8}"
    )
    ctx = mp.get_context("spawn")
    levels = args.levels.split(",")
    runs = [(lv, f) for lv in levels if lv in LEVELS for f in ("csv", "parquet", "jsonl")]
    if "transcript" in levels:
        runs += [("transcript", "jsonl"), ("transcript", "parquet")]
    for level, fmt in runs:
        out = folder / f"{level}.{fmt}"
        queue = ctx.Queue()
        child = ctx.Process(target=_one, args=(str(db), level, fmt, str(out), queue))
        child.start()
        n, seconds, peak = queue.get()
        child.join()
        size = out.stat().st_size / 1e6
        print(
            f"{level:<11} {fmt:<8} {n:>9,} {seconds:>8.2f} {n / seconds:>9,.0f} {size:>7.1f} {peak:>8.0f}"
        )
    shutil.rmtree(folder)


if __name__ == "__main__":
    main()
