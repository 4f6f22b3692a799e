"""Human labels in ``branchpoint report``: judge-human agreement, and realism by simulator."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from fixtures.tui.helpers import small_teen_store

from branchpoint.analysis.raters.realism import realism_by_simulator, realism_ratings, wilson
from branchpoint.core.human_labels import REALISM_RUBRIC, REALISM_TURN, LabelRow, save_labels


@pytest.mark.slow
def test_report_shows_agreement_with_humans_and_realism_by_simulator(tmp_path: Path) -> None:
    from branchpoint.analysis.report.write import write_report

    db = tmp_path / "t.db"
    store = small_teen_store(db, simulators=("scripted:simA", "scripted:simB"))
    conn = sqlite3.connect(db)
    judged = conn.execute(
        "SELECT conversation_id, turn_index, criterion_id, verdict FROM judgments "
        "WHERE applicable AND verdict IN ('pass', 'partial', 'fail') ORDER BY id LIMIT 60"
    ).fetchall()
    flip = {"pass": "fail", "fail": "pass", "partial": "partial"}
    labels = [
        LabelRow(conversation_id=c, turn_index=t, rubric_id="teen", criterion_id=k,
                 annotator="alice", verdict=v if i % 4 else flip[v], blind=True)
        for i, (c, t, k, v) in enumerate(judged)
    ]  # fmt: skip
    personas = conn.execute(
        'SELECT t.conversation_id, t."index", c.simulator FROM turns t JOIN conversations c '
        "ON c.id = t.conversation_id WHERE t.role = 'user' ORDER BY t.id LIMIT 40"
    ).fetchall()
    for i, (c, t, sim) in enumerate(personas):
        level = ("very", "mostly") if sim.endswith("A") else ("mixed", "not", "mostly")
        labels.append(LabelRow(conversation_id=c, turn_index=t, rubric_id=REALISM_RUBRIC,
                               criterion_id=REALISM_TURN, annotator="bob",
                               verdict=level[i % len(level)], blind=True))  # fmt: skip
    save_labels(store, labels)

    table = realism_by_simulator(realism_ratings(store))
    by_sim = table.set_index("simulator")
    n_a = sum(1 for _, _, s in personas if s.endswith("A"))
    n_b = len(personas) - n_a
    assert by_sim.loc["scripted:simA", "n_ratings"] == n_a
    assert by_sim.loc["scripted:simA", "share_realistic"] == 1.0
    b_good = sum(1 for i, (_, _, s) in enumerate(personas) if not s.endswith("A") and i % 3 == 2)
    assert by_sim.loc["scripted:simB", "share_realistic"] == b_good / n_b
    low, high = wilson(b_good, n_b)
    assert by_sim.loc["scripted:simB", "ci_low"] == low < b_good / n_b < high

    files = write_report(store, tmp_path / "report", None, n_boot=0, seed=0)
    md = Path(files.markdown).read_text(encoding="utf-8")
    agreement = md.split("Judge agreement", 1)[1]
    assert "judge vs human" in agreement and "human:alice" in agreement
    assert "human:bob" not in agreement  # realism ratings are not verdicts on a criterion
    realism = md.split("Persona realism by simulator", 1)[1]
    assert "scripted:simA" in realism and "scripted:simB" in realism
    html = Path(files.html).read_text(encoding="utf-8")
    assert "Persona realism by simulator" in html
    store.close()


def test_wilson_interval() -> None:
    low, high = wilson(0, 10)
    assert low == 0.0 and 0.25 < high < 0.35
    low, high = wilson(5, 10)
    assert abs((low + high) / 2 - 0.5) < 1e-9


def test_agreement_between_two_annotators() -> None:
    import pandas as pd

    from branchpoint.analysis.raters.agreement import agreement_report

    key = {"conversation_id": "c", "rubric_id": "teen", "criterion_id": "k"}
    alice = ["pass", "fail", "fail", "partial"]
    bob = ["pass", "fail", "pass", "partial"]
    labels = pd.DataFrame(
        [{**key, "turn_index": i, "annotator": name, "verdict": v}
         for name, verdicts in (("alice", alice), ("bob", bob)) for i, v in enumerate(verdicts)]
    )  # fmt: skip
    judgments = pd.DataFrame(
        [{**key, "turn_index": i, "judge": "j", "applicable": True, "verdict": v}
         for i, v in enumerate(alice)]
    )  # fmt: skip
    pairs = agreement_report(judgments, labels).pairs
    people = pairs[(pairs["kind"] == "human vs human") & (pairs["criterion_id"] == "(all)")]
    assert len(people) == 1
    row = people.iloc[0]
    assert (row["rater_a"], row["rater_b"]) == ("human:alice", "human:bob")
    assert row["raw_agreement"] == 0.75 and row["over"] == 0.25  # alice saw more risk once
