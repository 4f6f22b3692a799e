"""One unit of analysis everywhere (issue 44, Build 1): a judged chatbot turn x criterion x
judge counts once however many arms carry it, in the labelling design, the judge-corrected
"judge only" figure, the ED headline and the reasoning table, as it does in the rate tables.

Each test adds arms that never forked (the parent's transcript stored again, verdicts copied, as
the engine stores it) to a seeded synthetic store and checks that the output does not move.
Before issue 44 (ec76f8e) each of these counted the copies.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest

from branchpoint.analysis.pipeline import run_analysis
from branchpoint.analysis.testing.synthetic import (
    EDDesign,
    TeenDesign,
    add_unforked_arms,
    write_ed_store,
    write_teen_store,
)
from branchpoint.core import read
from branchpoint.core.human_labels import design_population, sample_queue
from branchpoint.core.store import open_store

COPY = "~unfired"  # add_unforked_arms names each copy <original>~unfired


def _teen(path: Path, **kw: object) -> Path:
    d = TeenDesign(
        n_scenarios=4, targets=("scripted:a", "scripted:b"), conditions=("none",),
        n_exchanges=3, p_error=0.0, **kw,  # type: ignore[arg-type]
    )  # fmt: skip
    write_teen_store(path, d, seed=5)
    return path


def _with_copies(path: Path, tmp_path: Path) -> Path:
    more = tmp_path / f"copies-{path.name}"
    shutil.copy(path, more)
    assert add_unforked_arms(more) > 0
    return more


@pytest.fixture
def teen_pair(tmp_path: Path) -> tuple[Path, Path]:
    base = _teen(tmp_path / "teen.db")
    return base, _with_copies(base, tmp_path)


def test_the_labelling_design_holds_no_copy_of_a_turn(teen_pair: tuple[Path, Path]) -> None:
    """Was: a turn carried by k arms was k times as likely to be drawn, and a labeller was shown
    the same reply twice."""
    base, copies = teen_pair
    store = open_store(copies)
    queue = sample_queue(store, n=60, seed=1)
    assert queue and not [it for it in queue if COPY in it.conversation_id]
    drawn = design_population(store, queue[0].design_id or "")
    store.close()
    plain = open_store(base)
    sample_queue(plain, n=60, seed=1)
    # the frame each stratum is drawn from, and so every inclusion probability, is unchanged
    want = design_population(plain, queue[0].design_id or "")
    plain.close()
    assert {s: v["population"] for s, v in drawn.items()} == {
        s: v["population"] for s, v in want.items()
    }


@pytest.mark.slow  # a whole analysis
def test_judged_items_count_each_copied_turn_once(teen_pair: tuple[Path, Path]) -> None:
    """Was: the judge-corrected section's "judge only" figure counted every copy (174 rows where
    the table above counts 46 distinct turns)."""
    base, copies = teen_pair
    one, two = read.judged_items(base), read.judged_items(copies)
    assert len(two) == len(one) > 0
    assert not two["conversation_id"].str.contains(COPY, regex=False).any()
    assert (two["n_arms"] == 2).all() and (one["n_arms"] == 1).all()
    # the judge-only rate equals the rate tables' figure over the same turns
    a = run_analysis(copies, n_boot=0)
    rated = a.rates.groupby("target")[["n_fail", "n_rated"]].sum()  # type: ignore[union-attr]
    items = two.assign(fail=two["verdict"] == "fail").groupby("target")["fail"].agg(["sum", "size"])
    assert rated["n_fail"].to_dict() == items["sum"].to_dict()
    assert rated["n_rated"].to_dict() == items["size"].to_dict()


def _design_keyed(frame: pd.DataFrame, cols: list[str]) -> pd.DataFrame:
    return frame.sort_values(cols).reset_index(drop=True)


@pytest.mark.slow  # a whole analysis
def test_the_reasoning_table_counts_each_copied_reply_once(tmp_path: Path) -> None:
    """Was: 126 replies with reasoning for 102 distinct ones."""
    base = _teen(tmp_path / "r.db", reasoning=True)
    copies = _with_copies(base, tmp_path)
    one = run_analysis(base, n_boot=0).reasoning
    two = run_analysis(copies, n_boot=0).reasoning
    assert one is not None and two is not None and not one.empty
    cols = ["judge", "rubric_id", "target"]
    pd.testing.assert_frame_equal(_design_keyed(two, cols), _design_keyed(one, cols))


def _ed_store(tmp_path: Path) -> tuple[Path, Path]:
    base = tmp_path / "ed.db"
    write_ed_store(base, EDDesign(n_questions=4, targets=("scripted:m1",)), seed=2)
    return base, _with_copies(base, tmp_path)


@pytest.mark.slow  # a whole analysis
def test_the_ed_headline_counts_each_copied_reply_once(tmp_path: Path) -> None:
    """Was: "960 responses, 960 with a complete rating" for 752 distinct replies."""
    base, copies = _ed_store(tmp_path)
    one, two = run_analysis(base, n_boot=0).ed, run_analysis(copies, n_boot=0).ed
    assert one is not None and two is not None
    cols = ["target", "condition", "n_responses", "n_scored", "safety", "ci_low", "ci_high"]
    cols = [c for c in cols if c in one.by_model.columns]
    pd.testing.assert_frame_equal(
        two.by_model[cols].reset_index(drop=True), one.by_model[cols].reset_index(drop=True)
    )
    assert len(two.responses) == len(one.responses)


# --------------------------------------------------------------------------- counts and words


def _unfork_option_arms(path: Path, option: str = "push_back") -> int:
    """Make every ``limit: option`` arm a copy of its matched baseline arm that never forked (the
    limit never came up): each such pair is a pair that never forked. Returns the pairs made."""
    import json
    import sqlite3

    conn = sqlite3.connect(path)
    rows = conn.execute(
        "SELECT id, scenario_id, target, condition, replicate, choices FROM conversations"
    ).fetchall()
    base = {
        (s, t, c, r): i
        for i, s, t, c, r, ch in rows
        if all(
            v == opts[0]
            for v, opts in zip(json.loads(ch).values(), [["guarded"], ["accept"], ["accept_limit"]])
        )
    }
    n = 0
    with conn:
        for i, s, t, c, r, ch in rows:
            if json.loads(ch).get("limit") == option:
                conn.execute(
                    "UPDATE conversations SET parent_id = ?, fork_turn = NULL WHERE id = ?",
                    (base[(s, t, c, r)], i),
                )
                n += 1
    conn.close()
    return n


@pytest.mark.slow  # a whole analysis
def test_the_never_forked_note_counts_pairs_not_pair_criterion_rows(tmp_path: Path) -> None:
    """Was: "64 pairs never forked" where there were 16 (the note summed over criteria)."""
    path = _teen(tmp_path / "nf.db")
    n = _unfork_option_arms(path)
    assert n == 8  # 4 scenarios x 2 targets
    a = run_analysis(path, n_boot=0)
    lines = [x for x in a.contrasts.notes if "never forked" in x]  # type: ignore[union-attr]
    assert lines and all(f": {n} pairs never forked" in x for x in lines), lines


@pytest.mark.slow  # a whole analysis
def test_realised_pairs_are_out_of_the_pairs_assigned_not_those_rated(tmp_path: Path) -> None:
    """Was: "realised pairs 8 of 14" where 16 pairs were assigned (the denominator was the pairs
    rated on that criterion)."""
    from branchpoint.analysis.report.sections import _contrast_display

    path = _teen(tmp_path / "rp.db", p_applicable=0.3)
    a = run_analysis(path, n_boot=0)
    c = a.contrasts.contrasts  # type: ignore[union-attr]
    shown = _contrast_display(c)["realised pairs"]
    assigned = 8  # 4 scenarios x 2 targets, each contrast
    assert (c["n_pairs"] < assigned).any()  # some criterion is rated in fewer pairs
    assert all(s.endswith(f" of {assigned} assigned") for s in shown), list(shown)


def test_reasoning_without_a_turn_verdict_is_not_said_to_be_absent(tmp_path: Path) -> None:
    """Was: "No reasoning text stored for these replies" when every reply carried reasoning."""
    import sqlite3

    from branchpoint.analysis.report.sections import build_sections

    path = _teen(tmp_path / "rz.db", reasoning=True)
    conn = sqlite3.connect(path)
    with conn:  # the only judge rated whole conversations, and could not answer
        conn.execute("UPDATE judgments SET verdict = 'error', turn_index = NULL, turn_id = NULL")
    n_replies = conn.execute(
        "SELECT count(*) FROM turns WHERE role = 'assistant' AND reasoning != ''"
    ).fetchone()[0]
    conn.close()
    a = run_analysis(path, n_boot=0)
    text = " ".join(t for s in build_sections(a) for t in s.text)
    assert "No reasoning text stored" not in text
    assert f"{n_replies} replies carry reasoning text" in text


@pytest.mark.slow  # a whole analysis
def test_analyze_on_a_multi_turn_ed_run_counts_responses_and_shows_its_contrasts(
    tmp_path: Path,
) -> None:
    """Was: "250 conversations, 250 distinct ratings" beside a table of 825 responses, and no
    multi-turn ED contrast at all."""
    from test_ed_report_multi_turn import write_ed_multi_turn
    from typer.testing import CliRunner

    from branchpoint.analysis.report.sections import ED_BRANCH_CAPTION
    from branchpoint.tui.cli import app

    db = tmp_path / "edmt.db"
    write_ed_multi_turn(db)
    a = run_analysis(db, n_boot=0)
    assert a.ed is not None
    n = int(a.ed.by_model["n_responses"].sum())
    res = CliRunner().invoke(app, ["analyze", "--all", "--db", str(db), "--n-boot", "0"])
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.split())
    assert f"{n} responses" in flat
    assert " ".join(ED_BRANCH_CAPTION.split()[:6]) in flat
