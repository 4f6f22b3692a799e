"""How long the labelling queues take to open on 35,000 conversations (issue 37, Build 1).

    python benchmarks/label_queue.py [--db /tmp/branchpoint-bench/tui_startup.db] [--rebuild]

Uses (or builds, as ``benchmarks/tui_startup.py`` does) the synthetic teen store of 35,040
conversations and 1.68 million judgments, then times, each in a copy of the store so that no
earlier draw is found: the first draw of the blind queue (30 items, target x condition strata;
then by criterion), its resume (the stored draw looked up), the realism queue's first draw and
resume, and the labelled-already lookup a resume does. Target: well under 1 s to
open, for the draws as for the resume; the strata's sizes (for the inclusion probabilities) are
counted apart, once, by `branchpoint labels plan`.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_DB = Path("/tmp/branchpoint-bench/tui_startup.db")


def timed(name: str, fn, repeat: int = 1):  # type: ignore[no-untyped-def]
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    print(f"{name:58} {best:7.3f} s")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", type=Path, default=DEFAULT_DB)
    ap.add_argument("--rebuild", action="store_true")
    args = ap.parse_args()
    if args.rebuild or not args.db.exists():
        from branchpoint.analysis.testing.synthetic import TeenDesign, write_teen_store

        args.db.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        write_teen_store(args.db, TeenDesign(n_scenarios=438), seed=0)
        print(f"built {args.db} in {time.perf_counter() - t0:.1f} s")

    from branchpoint.core.human_labels import (
        design_population,
        labelled,
        realism_queue,
        sample_queue,
    )
    from branchpoint.core.store import open_store

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "copy.db"
        shutil.copy(args.db, db)
        store = open_store(db)
        with store.engine.connect() as conn:
            n = conn.exec_driver_sql("SELECT count(*) FROM conversations").scalar_one()
            j = conn.exec_driver_sql("SELECT count(*) FROM judgments").scalar_one()
        print(f"{n} conversations, {j} judgments")
        queue = timed("blind queue, first draw (30 items)", lambda: sample_queue(store, n=30))
        timed("blind queue, resume (stored draw)", lambda: sample_queue(store, n=30), repeat=3)
        timed("labelled already (30 lookups)", lambda: labelled(store, "alice", queue), repeat=3)
        timed(
            "blind queue by criterion, first draw (30 items)",
            lambda: sample_queue(store, n=30, seed=1, by_criterion=True),
        )
        timed("realism queue, first draw (30 items)", lambda: realism_queue(store, n=30))
        timed("realism queue, resume", lambda: realism_queue(store, n=30), repeat=3)
        timed(
            "strata counted for the inclusion probabilities (once, later)",
            lambda: design_population(store, queue[0].design_id),
        )
        store.close()


if __name__ == "__main__":
    main()
