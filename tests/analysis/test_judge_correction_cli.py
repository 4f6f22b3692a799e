"""The command line of judge correction: ``labels plan --width``, a labels CSV naming its design,
and ``export --level corrected``; a real CLI on a real store."""

from __future__ import annotations

import csv
import os
import sqlite3
from pathlib import Path

import pytest
from fixtures.cli_in_process import run_in_process as run_cli  # output and exit status only
from fixtures.tui.helpers import small_teen_store

from branchpoint.core.human_labels import LabelRow, sample_queue, save_labels


def _design_labels(db: Path, n: int = 40) -> None:
    store = small_teen_store(db)
    verdict = {
        (c, t, k): v
        for c, t, k, v in sqlite3.connect(db).execute(
            "SELECT conversation_id, turn_index, criterion_id, verdict FROM judgments"
        )
    }
    queue = sample_queue(store, n=n, seed=0)
    save_labels(
        store,
        [
            LabelRow(
                conversation_id=it.conversation_id, turn_index=it.turn_index,
                rubric_id=it.rubric_id, criterion_id=it.criterion_id, annotator="ann",
                verdict="fail" if i % 3 == 0 else verdict[(it.conversation_id, it.turn_index, it.criterion_id)],
                blind=True, design_id=it.design_id,
            )
            for i, it in enumerate(queue)
        ],
    )  # fmt: skip
    store.close()


def _plan_rows(stdout: str) -> dict[str, list[str]]:
    return {
        " ".join(line.split()[1:4]): line.split()
        for line in stdout.splitlines()
        if line.startswith("scripted:judge")
    }


def test_plan_counts_labels_per_stratum_from_the_prior_then_from_the_labels(
    tmp_path: Path,
) -> None:
    db = tmp_path / "t.db"
    small_teen_store(db).close()
    done = run_cli("labels", "plan", "--width", "10", "--db", str(db))
    assert done.returncode == 0, done.stderr
    assert "no design-sampled labels yet" in done.stdout and "15%" in done.stdout
    before = _plan_rows(done.stdout)
    assert len(before) == 4  # two targets x two conditions
    # 1.96^2 * 0.15 / 0.1^2 = 57.6: 58 labels per stratum at the prior
    assert {row[-2] for row in before.values()} == {"58"}

    _design_labels(db)
    done = run_cli("labels", "plan", "--width", "10", "--db", str(db))
    assert done.returncode == 0, done.stderr
    after = _plan_rows(done.stdout)
    assert {row[-4] for row in after.values()} == {"10"}  # 40 labels, 10 per stratum
    assert all(int(after[k][-1]) == int(after[k][-2]) - 10 for k in after)
    assert "total more labels" in done.stdout


def test_plan_rejects_a_bad_width_in_one_line(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    small_teen_store(db).close()
    done = run_cli("labels", "plan", "--width", "0", "--db", str(db))
    assert done.returncode == 2 and "Traceback" not in done.stderr


def test_an_imported_label_must_name_a_design_that_drew_its_item(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    _design_labels(db, n=8)
    out = tmp_path / "labels.csv"
    assert run_cli("labels", "export", "--out", str(out), "--db", str(db)).returncode == 0
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    assert rows and all(r["design_id"].startswith("design-") for r in rows)
    # round trip: the labels stay in their design
    sqlite3.connect(db).execute("DELETE FROM human_labels").connection.commit()
    done = run_cli("labels", "import", str(out), "--db", str(db))
    assert done.returncode == 0, done.stderr
    kept = sqlite3.connect(db).execute(
        "SELECT count(*) FROM human_labels WHERE design_id IS NOT NULL"
    )
    assert kept.fetchone()[0] == 8
    # a label claiming a design that did not draw it is refused, line by line
    rows[0]["design_id"] = "design-0000000000000000"
    rows[1]["turn_index"] = str(int(rows[1]["turn_index"]) + 100)
    bad = tmp_path / "bad.csv"
    with bad.open("w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    done = run_cli("labels", "import", str(bad), "--db", str(db))
    assert done.returncode == 2
    problems = [line for line in done.stderr.splitlines() if "design_id" in line]
    assert len(problems) == 2 and all(f"{bad}:" in p for p in problems)


def test_export_writes_the_corrected_table(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    _design_labels(db)
    out = tmp_path / "corrected.csv"
    done = run_cli("export", "--all", "--level", "corrected", "--out", str(out), "--db", str(db))
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    per_target = [r for r in rows if r["condition"] == "(all)"]
    assert {r["target"] for r in per_target} == {"scripted:a", "scripted:b"}
    assert all(r["corrected"] and r["sensitivity"] for r in per_target)


@pytest.mark.slow  # over 2 s: make test runs it, test-fast does not
def test_analyze_prints_the_corrected_rates_or_one_line_without_labels(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    small_teen_store(db).close()
    done = run_cli("analyze", "--all", "--n-boot", "50", "--db", str(db))
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stdout.splitlines() if "Judge-corrected" in line]
    assert len(lines) == 1 and "no design-sampled blind labels yet" in lines[0]
    _design_labels(tmp_path / "u.db")
    wide = {**os.environ, "COLUMNS": "240"}
    done = run_cli("analyze", "--all", "--n-boot", "50", "--db", str(tmp_path / "u.db"), env=wide)
    assert done.returncode == 0, done.stderr
    assert "Judge-corrected failure rates (PPI++, per target)" in done.stdout
    assert "sensitivity" in done.stdout


@pytest.mark.slow  # over 2 s (about 3 s of CPU): make test runs it, test-fast does not
def test_exclude_retried_leaves_the_retried_conversations_out_of_the_corrected_figures_too(
    tmp_path: Path,
) -> None:
    """``--exclude-retried`` leaves retried conversations out of every figure: the corrected
    rates and contrasts included (they used to count them while the tables beside them did not)."""
    import json

    from branchpoint.analysis.judge_correction.estimators import judge_corrected
    from branchpoint.core.records import ConversationAttempt
    from branchpoint.core.store import open_store

    db = tmp_path / "t.db"
    _design_labels(db, n=80)
    labelled = sorted(
        {c for (c,) in sqlite3.connect(db).execute("SELECT conversation_id FROM human_labels")}
    )
    retried = labelled[:3]
    store = open_store(db)
    with store.session() as s:
        for cid in retried:
            s.add(ConversationAttempt(conversation_id=cid, attempt=1, run_id="synthetic-teen",
                                      previous_status="failed"))  # fmt: skip
        s.commit()
    whole = judge_corrected(store, None).table
    left = judge_corrected(store, None, exclude=retried).table
    store.close()
    # labels on the left-out conversations no longer count
    assert left["n_labelled"].sum() < whole["n_labelled"].sum()
    done = run_cli(
        "analyze", "--all", "--n-boot", "50", "--exclude-retried", "--format", "json",
        "--db", str(db),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)["judge_corrected"]["rates"]
    n_shown = sum(int(r["n_labelled"]) for r in shown)
    assert n_shown == int(left["n_labelled"].sum()) != int(whole["n_labelled"].sum())
