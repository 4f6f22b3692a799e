"""``branchpoint labels export`` / ``import``: a real CLI, a real store, CSV both ways."""

from __future__ import annotations

import csv
import sqlite3
from pathlib import Path

from fixtures.cli_in_process import run_in_process as run_cli  # output and exit status only
from fixtures.tui.helpers import small_teen_store

from branchpoint.core.human_labels import (
    REALISM_RUBRIC,
    REALISM_TURN,
    LabelRow,
    iter_labels,
    save_label,
)
from branchpoint.tui.commands.labels_cmds import field_columns


def _labelled_store(db: Path) -> list[LabelRow]:
    store = small_teen_store(db)
    cid = sqlite3.connect(db).execute("SELECT id FROM conversations ORDER BY id").fetchone()[0]
    rows = [
        LabelRow(conversation_id=cid, turn_index=1, rubric_id="teen", criterion_id="no_diagnosis",
                 annotator="alice", verdict="fail", note='said "you have depression", twice\nsecond line',
                 confidence="high", time_spent_s=12.5, blind=True),
        LabelRow(conversation_id=cid, turn_index=3, rubric_id="teen", criterion_id="no_diagnosis",
                 annotator="bob", verdict=None, blind=False),
        LabelRow(conversation_id=cid, turn_index=None, rubric_id="teen", criterion_id="emotional_dependence",
                 annotator="bob", verdict="partial"),
        LabelRow(conversation_id=cid, turn_index=2, rubric_id=REALISM_RUBRIC, criterion_id=REALISM_TURN,
                 annotator="alice", verdict="mixed", blind=True),
    ]  # fmt: skip
    for row in rows:
        save_label(store, row)
    store.close()
    return rows


def test_export_then_import_gives_back_the_same_labels(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    rows = _labelled_store(db)
    out = tmp_path / "labels.csv"
    done = run_cli("labels", "export", "--out", str(out), "--db", str(db))
    assert done.returncode == 0, done.stderr
    assert "wrote 4 labels" in done.stdout
    with out.open(newline="", encoding="utf-8") as f:
        exported = list(csv.DictReader(f))
    assert len(exported) == 4 and exported[0]["blind"] in ("true", "false", "")

    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM human_labels")
    done = run_cli("labels", "import", str(out), "--db", str(db))
    assert done.returncode == 0, done.stderr
    assert "imported 4 labels" in done.stdout
    from branchpoint.core.store import open_store

    store = open_store(db)
    back = sorted(iter_labels(store), key=lambda r: (r.annotator, r.turn_index or -1))
    store.close()
    assert back == sorted(rows, key=lambda r: (r.annotator, r.turn_index or -1))

    # importing the same file again replaces, it does not duplicate
    run_cli("labels", "import", str(out), "--db", str(db))
    assert sqlite3.connect(db).execute("SELECT count(*) FROM human_labels").fetchone()[0] == 4


def test_a_bad_labels_file_is_reported_line_by_line_and_nothing_is_stored(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    small_teen_store(db).close()
    cid = sqlite3.connect(db).execute("SELECT id FROM conversations ORDER BY id").fetchone()[0]
    bad = tmp_path / "bad.csv"
    bad.write_text(
        "conversation_id,turn_index,rubric_id,criterion_id,annotator,verdict,confidence\n"
        f"{cid},1,teen,no_diagnosis,alice,fail,high\n"
        f"{cid},one,teen,no_diagnosis,alice,maybe,sure\n"
        "nosuchconversation,3,teen,no_diagnosis,,pass,\n"
        f"{cid},5,realism,persona_realism,alice,,\n",
        encoding="utf-8",
    )
    done = run_cli("labels", "import", str(bad), "--db", str(db))
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().removeprefix("error: ").splitlines()
    col = field_columns(f"{cid},one,teen,no_diagnosis,alice,maybe,sure")
    assert f"{bad}:3:{col[1]}: turn_index: 'one' is not a turn index" in lines[0]
    assert any(
        line.startswith(
            f"{bad}:3:{col[5]}: verdict: 'maybe' is not a level of 'teen' (expected pass / partial / fail"
        )
        for line in lines
    )
    assert any(line.startswith(f"{bad}:3:{col[6]}: confidence: 'sure'") for line in lines)
    assert any(
        line.startswith(f"{bad}:4:1: conversation_id: 'nosuchconversation' is not in the store")
        for line in lines
    )
    assert any(f"{bad}:4:" in line and "annotator: empty" in line for line in lines)
    assert any(
        f"{bad}:5:" in line and "verdict: empty (expected a realism level" in line for line in lines
    )
    assert all(line.startswith(f"{bad}:") for line in lines)  # one line per problem
    assert sqlite3.connect(db).execute("SELECT count(*) FROM human_labels").fetchone()[0] == 0

    unknown = tmp_path / "unknown.csv"
    unknown.write_text("conversation_id,rubric,criterion_id,annotator,verdict\n", encoding="utf-8")
    done = run_cli("labels", "import", str(unknown), "--db", str(db))
    assert done.returncode == 2
    assert f"{unknown}:1:17: rubric: unknown column" in done.stderr
    assert f"{unknown}:1:1: rubric_id: missing column" in done.stderr


def test_field_columns_respects_quotes() -> None:
    assert field_columns('a,"b,c",d') == [1, 3, 9]


def test_a_label_whose_rubric_or_criterion_no_judgment_has_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    small_teen_store(db).close()
    with sqlite3.connect(db) as conn:
        cid = conn.execute("SELECT id FROM conversations ORDER BY id").fetchone()[0]
        judged = {r for (r,) in conn.execute("SELECT DISTINCT criterion_id FROM judgments")}
    assert "no_diagnosis" in judged  # what the good row names
    bad = tmp_path / "bad.csv"
    line = f"{cid},1,teen,no_diagnosis,alice,fail\n"
    bad.write_text(
        "conversation_id,turn_index,rubric_id,criterion_id,annotator,verdict\n"
        + line
        + f"{cid},1,teeen,no_diagnosis,alice,fail\n"
        + f"{cid},1,teen,no_diagnosis_,alice,fail\n",
        encoding="utf-8",
    )
    done = run_cli("labels", "import", str(bad), "--db", str(db))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    col = field_columns(line)
    assert done.stderr.strip().removeprefix("error: ").splitlines() == [
        f"{bad}:3:{col[2]}: rubric_id: 'teeen' is the rubric of no judgment in this store "
        "(expected one of: realism, teen)",
        f"{bad}:4:{col[3]}: criterion_id: 'no_diagnosis_' is no criterion of 'teen' judged here "
        "(did you mean 'no_diagnosis'?)",
    ]
    assert sqlite3.connect(db).execute("SELECT count(*) FROM human_labels").fetchone()[0] == 0
