"""How long `branchpoint labels import` takes on 100,000 labels (issue 45, Build 7).

    python benchmarks/labels_import.py [--rows 100000] [--scenarios 40]

Writes a synthetic teen store (``write_teen_store``), a labels CSV of ``--rows`` labels on its
judged criteria (one annotator per pass over the judgments), then times the whole command (read
and check the file, store the labels) and, apart, ``save_labels`` alone. Target: a few seconds
for 100,000 rows (it was 42 s, an ORM merge per row). Prints CPU time next to wall time: on a
shared machine the wall time measures the neighbours too.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--scenarios", type=int, default=40)
    args = ap.parse_args()

    import sqlite3

    from typer.testing import CliRunner

    from branchpoint.analysis.testing.synthetic import TeenDesign, write_teen_store
    from branchpoint.core.human_labels import LabelRow, save_labels
    from branchpoint.core.store import open_store
    from branchpoint.tui.cli import app
    from branchpoint.tui.commands.labels_cmds import write_label_file

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "labels.db"
        write_teen_store(db, TeenDesign(n_scenarios=args.scenarios), seed=0)
        open_store(db).close()  # migrated to this schema, as the command would find it
        con = sqlite3.connect(db)
        keys = con.execute(
            "SELECT conversation_id, turn_index, rubric_id, criterion_id FROM judgments"
        ).fetchall()
        con.close()
        rows = []
        verdicts = ("pass", "partial", "fail")
        for i in range(args.rows):
            conv, turn, rubric, criterion = keys[i % len(keys)]
            rows.append(
                LabelRow(
                    conversation_id=conv,
                    turn_index=turn,
                    rubric_id=rubric,
                    criterion_id=criterion,
                    annotator=f"rater{i // len(keys)}",
                    verdict=verdicts[i % 3],
                    confidence="high",
                )
            )
        csv_path = Path(tmp) / "labels.csv"
        write_label_file(rows, csv_path)
        print(f"{len(rows):,} labels over {len(keys):,} judgments")

        t0, c0 = time.perf_counter(), time.process_time()
        done = CliRunner().invoke(app, ["labels", "import", str(csv_path), "--db", str(db)])
        whole, cpu = time.perf_counter() - t0, time.process_time() - c0
        if done.exit_code != 0:
            raise SystemExit(f"labels import failed: {done.output}")
        print(f"{'labels import (read, check, store)':44} {whole:7.2f} s  ({cpu:.2f} s CPU)")

        store = open_store(db)
        try:
            t0, c0 = time.perf_counter(), time.process_time()
            save_labels(store, rows)  # the same keys again: every row an update
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            print(f"{'save_labels alone (all updates)':44} {wall:7.2f} s  ({cpu:.2f} s CPU)")
        finally:
            store.close()


if __name__ == "__main__":
    main()
