"""Judge-corrected matched contrasts (issue 34, build 3): the contrasts' own post-fork, realised
pairs, each side corrected by its own design labels; a judge that errs differently by arm is
removed; degenerate designs say why in one line; labels outside the design and arms that never
forked change nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from branchpoint.analysis.judge_correction.contrasts import (
    correct_contrast_frames,
    judge_corrected_contrasts,
    summary_line,
)
from branchpoint.analysis.judge_correction.estimators import ALL, ppi_contrast
from branchpoint.analysis.judge_correction.synthetic import (
    ContrastSetting,
    ContrastStudy,
    contrast_study,
)
from branchpoint.analysis.testing.synthetic import (
    TEEN_CRITERIA,
    Effect,
    TeenDesign,
    add_unforked_arms,
    write_teen_store,
)
from branchpoint.core.human_labels import LabelRow, sample_queue, save_labels
from branchpoint.core.store import open_store

CONTRAST = "help: accept → decline"


def _corrected(st: ContrastStudy) -> pd.DataFrame:
    c = correct_contrast_frames(st.judgments, st.judged, st.labels, st.designs, st.items)
    return c.table


@pytest.mark.slow
def test_the_corrected_contrast_covers_the_planted_difference_and_the_judge_only_one_does_not() -> (
    None
):
    """A decline arm that fails 20 points more after the fork, a judge that catches half its
    failures but 90% of the baseline arm's: the judge-only contrast is near zero, the corrected
    one covers +20 in >= 94% of seeded replications: 25 studies of 30 scenarios x 16 conditions,
    each condition its own contrast, per criterion and over both (about 1,200 rows, +20 in each).
    Measured with this seed 95.6% (judge-only 1.1%); seeds 1 and 2 gave 94.7% and 95.3%, so the
    margin over 94% is thin: the estimator is close to nominal, not conservative."""
    conditions = tuple(f"c{i}" for i in range(16))
    # 3,200 labels (1,600 before issue 44): a side needs 5 labels in a stratum now, not 2, and
    # with 1,600 a sixth of the per-criterion rows had fewer and were declined
    s = ContrastSetting(n_scenarios=30, n_labels=3200, conditions=conditions)
    rng = np.random.default_rng(34)
    covered = judge_covered = n = skipped = 0
    widths = {"corrected": 0.0, "human": 0.0}
    for _ in range(25):
        st = contrast_study(s, rng)
        rows = _corrected(st)
        assert len(rows) == 3 * len(conditions)
        skipped += int((rows["note"] != "").sum())  # a side with < 5 labels in a stratum
        rows = rows[rows["note"] == ""]
        n += len(rows)
        hit = (rows["corrected_low"] <= st.delta) & (st.delta <= rows["corrected_high"])
        judge_hit = (rows["judge_low"] <= st.delta) & (st.delta <= rows["judge_high"])
        covered, judge_covered = covered + int(hit.sum()), judge_covered + int(judge_hit.sum())
        for name in widths:
            widths[name] += float((rows[f"{name}_high"] - rows[f"{name}_low"]).sum())
    assert skipped < 0.02 * (n + skipped)
    assert covered / n >= 0.94
    assert judge_covered / n < 0.2
    assert widths["corrected"] < widths["human"]  # the judge is informative: a narrower interval


def _arms(st: ContrastStudy) -> pd.DataFrame:
    """Each judged design item with its arm, by hand: the option (decline) arm's own turns from
    the fork on, and the baseline (accept) arm's turns from the same index on."""
    from branchpoint.analysis.judge_correction.estimators import design_data

    d = design_data(st.judged, st.labels, st.designs, st.items).data
    assert d is not None
    conv = st.judgments.drop_duplicates("conversation_id").set_index("conversation_id")
    d = d.assign(arm=conv.loc[d["conversation_id"], "choice:help"].to_numpy())
    return d[d["turn_index"] >= 4]  # fork_exchange 2: turns 0-3 are shared


def test_the_corrected_value_equals_ppi_contrast_on_the_same_arrays() -> None:
    st = contrast_study(ContrastSetting(), np.random.default_rng(1))
    row = _corrected(st).set_index("criterion_id").loc["c1"]
    items = _arms(st)
    items = items[items["criterion_id"] == "c1"]
    cell = ["scenario_id", "target", "condition"]
    # a pair counts when both arms rated the criterion after the fork
    rated = items.groupby([*cell, "arm"]).size().unstack("arm").dropna().index
    items = items.set_index(cell).loc[lambda f: f.index.isin(rated)].reset_index()

    def side(arm: str) -> dict[str, np.ndarray]:
        g = items[items["arm"] == arm]
        return {"yhat": g["yhat"].to_numpy(), "y": g["y"].fillna(0).to_numpy(),
                "labelled": g["labelled"].to_numpy(), "stratum": g["stratum"].to_numpy(),
                "cluster": g["scenario_id"].to_numpy()}  # fmt: skip

    est = ppi_contrast(side("decline"), side("accept"))
    assert not isinstance(est, str)
    assert row["corrected"] == pytest.approx(est.corrected.estimate, abs=1e-12)
    assert row["corrected_low"] == pytest.approx(est.corrected.low, abs=1e-12)
    assert row["corrected_high"] == pytest.approx(est.corrected.high, abs=1e-12)
    assert row["lam"] == pytest.approx(est.lam, abs=1e-12)
    assert row["judge_diff"] == pytest.approx(est.judge_only.estimate, abs=1e-12)
    assert (row["n_option"], row["n_baseline"]) == est.n_items
    assert (row["labelled_option"], row["labelled_baseline"]) == est.n_labelled
    # pre-fork labels exist but are not in the contrast: the shared prefix is one conversation
    assert int(st.labels["turn_index"].lt(4).sum()) > 0


@pytest.mark.slow  # among the slowest of test-fast with its set-up; make test runs it
def test_one_scenario_no_labels_on_one_side_and_error_verdicts_each_say_why_in_one_line() -> None:
    one = contrast_study(ContrastSetting(n_scenarios=1), np.random.default_rng(2))
    table = _corrected(one)
    assert (table["note"].str.startswith("one scenario")).all()
    assert "one scenario" in str(summary_line(correct_contrast_frames(
        one.judgments, one.judged, one.labels, one.designs, one.items)))  # fmt: skip

    st = contrast_study(ContrastSetting(), np.random.default_rng(3))
    accept = set(st.judgments.loc[st.judgments["choice:help"] == "accept", "conversation_id"])
    kept = st.labels[~st.labels["conversation_id"].isin(accept)]
    c = correct_contrast_frames(st.judgments, st.judged, kept, st.designs, st.items)
    assert c.table["note"].str.startswith("baseline: too few labels").all()
    line = summary_line(c)
    assert line is not None and "\n" not in line and "baseline: too few labels" in line

    # every labelled turn judged `error`: not judged, so not in the design's population
    key = ["conversation_id", "turn_index", "rubric_id", "criterion_id"]
    hit = st.judgments.merge(st.labels[key], on=key, how="left", indicator=True)["_merge"]
    judgments = st.judgments.assign(
        verdict=np.where(hit.eq("both").to_numpy(), "error", st.judgments["verdict"])
    )
    judged = st.judged.merge(st.labels[key], on=key, how="left", indicator=True)
    judged = judged[judged["_merge"] == "left_only"].drop(columns="_merge")
    c = correct_contrast_frames(judgments, judged, st.labels, st.designs, st.items)
    assert c.table["note"].str.contains("too few labels").all()
    assert "too few labels" in str(summary_line(c))


def test_a_contrast_with_no_pairs_or_no_labels_is_one_line() -> None:
    st = contrast_study(ContrastSetting(), np.random.default_rng(4))
    alone = st.judgments[st.judgments["choice:help"] == "accept"]  # no option arm ran
    c = correct_contrast_frames(alone, st.judged, st.labels, st.designs, st.items)
    assert c.empty and summary_line(c) == "no matched pairs rated after their fork to correct"
    c = correct_contrast_frames(st.judgments, st.judged, st.labels.iloc[0:0], st.designs, st.items)
    assert c.empty and "no design-sampled blind labels" in str(summary_line(c))


# --------------------------------------------------------------------------- from a store


def _teen_store(db: Path, *, n_labels: int = 160, seed: int = 0) -> None:
    """Ten scenarios, help: accept or decline (the decline arm fails 20 points more on every
    criterion); a judge that misses half the decline arm's failures; ``n_labels`` blind design
    labels giving the planted (stored) verdicts."""
    d = TeenDesign(
        n_scenarios=10, targets=("scripted:a", "scripted:b"), conditions=("none",),
        branch_points={"help": ["accept", "decline"]}, n_exchanges=4, p_error=0.0,
        effects=(Effect("help", "decline", tuple(TEEN_CRITERIA), 0.2),),
    )  # fmt: skip
    write_teen_store(db, d, seed=seed)
    conn = sqlite3.connect(db)
    truth = {
        (c, t, k): v
        for c, t, k, v in conn.execute(
            "SELECT conversation_id, turn_index, criterion_id, verdict FROM judgments"
        )
    }
    rows = conn.execute(
        "SELECT j.id FROM judgments j JOIN conversations c ON c.id = j.conversation_id "
        "WHERE j.verdict = 'fail' AND c.choices LIKE '%decline%' ORDER BY j.id"
    ).fetchall()
    missed = np.random.default_rng(seed).random(len(rows)) < 0.5
    conn.executemany(
        "UPDATE judgments SET verdict = 'pass' WHERE id = ?",
        [r for r, m in zip(rows, missed) if m],
    )
    conn.commit()
    conn.close()
    store = open_store(db)
    queue = sample_queue(store, n=n_labels, seed=seed)
    save_labels(
        store,
        [
            LabelRow(
                conversation_id=it.conversation_id, turn_index=it.turn_index,
                rubric_id=it.rubric_id, criterion_id=it.criterion_id, annotator="ann",
                verdict=truth[(it.conversation_id, it.turn_index, it.criterion_id)],
                blind=True, design_id=it.design_id,
            )
            for it in queue
        ],
    )  # fmt: skip
    store.close()


NUMBERS = ["corrected", "corrected_low", "corrected_high", "judge_diff", "human_diff", "lam",
           "n_option", "n_baseline", "labelled_option", "labelled_baseline", "n_pairs"]  # fmt: skip


def test_from_a_store_the_judge_only_contrast_is_the_contrasts_tables_pooled_difference(
    tmp_path: Path,
) -> None:
    from branchpoint.analysis.contrasts.matched import matched_contrasts
    from branchpoint.analysis.judge_correction.contrasts import contrast_store_frames

    db = tmp_path / "t.db"
    _teen_store(db)
    c = judge_corrected_contrasts(db)
    assert not c.empty and c.design_id is not None
    rows = c.table[(c.table["contrast"] == CONTRAST) & (c.table["criterion_id"] != ALL)]
    assert len(rows) == len(TEEN_CRITERIA)
    pooled = c.table[c.table["criterion_id"] == ALL].iloc[0]
    assert pooled["note"] == "" and pooled["n_scenarios"] == 10
    assert pooled["judge_diff"] < pooled["corrected"]  # the judge missed the option's failures
    # the same pairs as the matched contrasts: every judged turn is in the design's population,
    # so the judge-only difference is the contrasts table's pooled post-fork difference
    judgments, realisation = contrast_store_frames(db)
    tab = matched_contrasts(judgments, n_boot=0, realisation=realisation).contrasts
    tab = tab[tab["contrast"] == CONTRAST].set_index("criterion_id")
    for _, r in rows.iterrows():
        assert r["judge_diff"] == pytest.approx(tab.loc[r["criterion_id"], "diff_pooled"])
        assert r["n_pairs"] == tab.loc[r["criterion_id"], "n_pairs"]


def test_labels_outside_the_design_and_arms_that_never_forked_change_nothing(
    tmp_path: Path,
) -> None:
    db = tmp_path / "t.db"
    _teen_store(db)
    before = judge_corrected_contrasts(db).table
    store = open_store(db)
    items = sample_queue(store, n=60, seed=9)
    save_labels(
        store,
        [
            LabelRow(conversation_id=it.conversation_id, turn_index=it.turn_index,
                     rubric_id=it.rubric_id, criterion_id=it.criterion_id, annotator=who,
                     verdict="fail", blind=blind, design_id=design)
            for it in items[:30]
            for who, blind, design in (("picker", True, None), ("peek", False, it.design_id))
        ],
    )  # fmt: skip
    store.close()
    after = judge_corrected_contrasts(db)
    pd.testing.assert_frame_equal(after.table[NUMBERS], before[NUMBERS])
    assert any("outside a labelling design" in n for n in after.notes)

    assert add_unforked_arms(db) > 0  # every arm stored again, never forked
    copied = judge_corrected_contrasts(db).table
    pd.testing.assert_frame_equal(copied[NUMBERS], before[NUMBERS])


# --------------------------------------------------------------------------- where it shows


@pytest.mark.slow  # three CLI runs
def test_the_report_section_analyze_and_export_show_the_corrected_contrasts(
    tmp_path: Path,
) -> None:
    import csv
    import json
    import os

    from fixtures.engine.helpers import run_cli

    from branchpoint.analysis.judge_correction.section import judge_correction_section

    db = tmp_path / "t.db"
    _teen_store(db)
    section = judge_correction_section(db)
    captions = [caption for caption, _ in section.tables]
    assert any(c.startswith("Judge-corrected contrasts") for c in captions)
    assert any("whether or not both arms of a pair were labelled" in t for t in section.text)
    table = dict(section.tables)[next(c for c in captions if c.startswith("Judge-corrected con"))]
    assert {"judge only", "people only", "corrected", "lambda", "scenarios"} <= set(table.columns)

    narrow = {**os.environ, "COLUMNS": "80"}
    done = run_cli("analyze", "--all", "--n-boot", "0", "--db", str(db), env=narrow)
    assert done.returncode == 0, done.stderr
    assert "Judge-corrected contrasts (all criteria" in done.stdout
    assert CONTRAST in done.stdout
    assert max(len(line) for line in done.stdout.splitlines()) <= 80

    done = run_cli("analyze", "--all", "--n-boot", "0", "--format", "json", "--db", str(db))
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["judge_corrected"]["contrasts"]
    assert {r["contrast"] for r in rows} == {CONTRAST}
    assert all(r["corrected"] is not None for r in rows if r["criterion_id"] == ALL)

    out = tmp_path / "corrected.csv"
    done = run_cli("export", "--all", "--level", "corrected", "--out", str(out), "--db", str(db))
    assert done.returncode == 0, done.stderr
    written = list(csv.DictReader((tmp_path / "corrected_contrasts.csv").open(encoding="utf-8")))
    assert {r["contrast"] for r in written} == {CONTRAST} and len(written) == len(TEEN_CRITERIA) + 1
    assert "corrected_contrasts.csv" in done.stdout


@pytest.mark.slow  # a CLI run
def test_analyze_says_in_one_line_when_no_contrast_has_enough_labels(tmp_path: Path) -> None:
    from fixtures.engine.helpers import run_cli

    db = tmp_path / "t.db"
    _teen_store(db, n_labels=6)  # too few for a side's two strata
    done = run_cli("analyze", "--all", "--n-boot", "0", "--db", str(db))
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())  # the console wraps a long line at 80 columns
    assert text.count("Judge-corrected contrasts") == 1
    assert "Judge-corrected contrasts: no contrast has enough design labels" in text
    assert "too few labels" in text


def test_the_jackknife_equals_leaving_each_scenario_out_by_hand() -> None:
    """The corrected interval's jackknife (vectorised) against re-estimating each side with one
    scenario left out, lambda tuned again each time or fixed."""
    import math

    from branchpoint.analysis.judge_correction import estimators as jc

    rng = np.random.default_rng(0)

    def side() -> dict[str, np.ndarray]:
        n = 400
        return {"yhat": (rng.random(n) < 0.3) * 1.0, "y": (rng.random(n) < 0.4) * 1.0,
                "labelled": rng.random(n) < 0.3, "stratum": rng.integers(0, 2, n),
                "cluster": rng.integers(0, 20, n).astype(str)}  # fmt: skip

    sides = [side(), side()]
    names = pd.Index(sorted(set(sides[0]["cluster"]) | set(sides[1]["cluster"])))
    o, b = (
        jc._influence(s["yhat"], s["y"], s["labelled"], s["stratum"],
                      names.get_indexer(s["cluster"]), len(names))
        for s in sides
    )  # fmt: skip
    assert not isinstance(o, str) and not isinstance(b, str)

    def by_hand(lam: float | None) -> float:
        g, out = len(names), []
        for i in range(g):
            keep = np.arange(g) != i
            so, sb = jc._side_estimate(o.cells[:, keep]), jc._side_estimate(b.cells[:, keep])
            assert so is not None and sb is not None
            n_o, n_b = o.cells[0][keep].sum(), b.cells[0][keep].sum()
            u, v = so[2] / n_o - sb[2] / n_b, so[3] / n_o - sb[3] / n_b
            lam_i = jc._tuned(u, v) if lam is None else lam
            out.append((so[0] + lam_i * so[1]) - (sb[0] + lam_i * sb[1]))
        est = np.array(out)
        return math.sqrt((g - 1) / g * float(((est - est.mean()) ** 2).sum()))

    for lam in (None, 0.5):
        assert jc._jackknife_se(o, b, lam) == pytest.approx(by_hand(lam), rel=1e-12)
    est = ppi_contrast(*sides)
    assert not isinstance(est, str)
    assert est.corrected.se == pytest.approx(max(by_hand(None), est.corrected.se), rel=1e-12)


def test_a_turn_two_arms_of_one_side_carry_is_one_item_kept_where_it_was_produced() -> None:
    """A factorial tree: option arm o2 copies o1's turns 0-5, and both are compared from turn 4
    (their forks from their own baseline arms): turns 4 and 5 of o2 are o1's, counted once, in
    o1, whichever copy was labelled."""
    from branchpoint.analysis.judge_correction.contrasts import side_items
    from branchpoint.analysis.pairing.forks import Tree

    tree = Tree(
        pd.DataFrame(
            {"conversation_id": ["o1", "o2"], "parent_id": [None, "o1"], "fork_turn": [None, 6]}
        )
    )
    pairs = pd.DataFrame(
        {
            "conversation_id_b": ["o1", "o2"],
            "rubric_id": "r",
            "criterion_id": "x",
            "judge": "j",
            "fork_turn": [4.0, 4.0],
            "_pair": [0, 1],
        }  # fmt: skip
    )
    data = pd.DataFrame(
        [{"conversation_id": c, "turn_index": t, "rubric_id": "r", "criterion_id": "x",
          "judge": "j", "labelled": c == "o2"} for c in ("o1", "o2") for t in (1, 3, 5, 7)]
    )  # fmt: skip
    got = side_items(pairs, "b", data, tree)
    assert sorted(zip(got["conversation_id"], got["turn_index"])) == [
        ("o1", 5), ("o1", 7), ("o2", 7)
    ]  # fmt: skip


def test_only_realised_pairs_enter_and_none_realised_is_one_line() -> None:
    st = contrast_study(ContrastSetting(), np.random.default_rng(5))
    convs = st.judgments.drop_duplicates("conversation_id")
    decline = convs.loc[convs["choice:help"] == "decline", "conversation_id"].tolist()
    real = pd.DataFrame(
        {"conversation_id": convs["conversation_id"], "branch_point": "help", "realised": True}
    )
    everyone = correct_contrast_frames(
        st.judgments, st.judged, st.labels, st.designs, st.items, realisation=real
    ).table
    half = real.assign(realised=~real["conversation_id"].isin(decline[::2]))
    some = correct_contrast_frames(
        st.judgments, st.judged, st.labels, st.designs, st.items, realisation=half
    ).table
    pooled = [t[t["criterion_id"] == ALL].iloc[0] for t in (everyone, some)]
    assert pooled[1]["n_pairs"] < pooled[0]["n_pairs"]
    assert pooled[1]["n_option"] < pooled[0]["n_option"]
    none = real.assign(realised=~real["conversation_id"].isin(decline))
    c = correct_contrast_frames(
        st.judgments, st.judged, st.labels, st.designs, st.items, realisation=none
    )
    assert c.empty and summary_line(c) == "no matched pairs rated after their fork to correct"
