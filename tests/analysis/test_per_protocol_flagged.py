"""Per-protocol contrasts are selected after assignment (issue 44, item 9): the report says so,
the realised-branch table does not call an arm that fired but was not enacted realised, every
per-protocol figure has the intention-to-treat figure and its interval beside it, and the
multi-turn ED contrasts apply the manipulation checks. Each failed on ec76f8e."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from branchpoint.analysis.pairing.realisation import realisation_summary
from branchpoint.analysis.report.sections import REALISATION_CAPTION, _realisation_display
from branchpoint.core.domain import ENACTED, NOT_ENACTED


def _realisation(n: int, not_enacted: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    ids = [f"c{i}" for i in range(n)]
    r = pd.DataFrame({
        "conversation_id": ids, "branch_point": "help", "option": "decline", "realised": True,
        "exchange": 2, "recorded": True,
        "enactment": [NOT_ENACTED if i < not_enacted else ENACTED for i in range(n)],
    })  # fmt: skip
    conv = pd.DataFrame({"conversation_id": ids, "target": "scripted:m1"})
    return r, conv


def test_the_realised_branches_table_shows_arms_fired_but_not_enacted() -> None:
    """Was: "Realised branches ... 20 of 20" where 7 were not enacted."""
    r, conv = _realisation(20, 7)
    shown = _realisation_display(realisation_summary(r, conv))
    row = shown.iloc[0]
    assert row["fired"] == "20 of 20"
    assert row["not enacted"] == 7 and row["enacted"] == "13 of 20 checked"
    assert "realised" not in shown.columns  # fired is not realised
    assert "not enacted" in REALISATION_CAPTION


@pytest.mark.slow  # a whole analysis
def test_the_report_flags_per_protocol_pairs_and_shows_itt_with_its_interval(
    tmp_path: Path,
) -> None:
    from branchpoint.analysis.pipeline import run_analysis
    from branchpoint.analysis.report.sections import (
        PER_PROTOCOL_SELECTED,
        build_sections,
        headline_tables,
    )
    from branchpoint.analysis.testing.synthetic import TeenDesign, write_teen_store

    db = tmp_path / "t.db"
    write_teen_store(
        db,
        TeenDesign(n_scenarios=4, targets=("scripted:a",), conditions=("none",), n_exchanges=3),
        seed=2,
    )
    a = run_analysis(db, n_boot=0)
    text = [t for s in build_sections(a) for t in s.text]
    assert PER_PROTOCOL_SELECTED in text
    caption, table = next((c, t) for c, t in headline_tables(a) if "matched contrasts" in c)
    assert "selected subset" in caption
    assert "95% interval (intention to treat)" in table.columns
    assert table["95% interval (intention to treat)"].str.contains(" to ").all()
    # the target shares too: per protocol, and every assigned pair beside
    assert "targets raised (intention to treat)" in table.columns
    share = a.contrasts.target_share  # type: ignore[union-attr]
    assert share["share_raised_itt"].notna().all()


def test_multi_turn_ed_contrasts_apply_the_manipulation_checks_and_keep_itt(
    tmp_path: Path,
) -> None:
    """Was: the ED branch contrasts kept every arm whatever its manipulation check said, and gave
    no intention-to-treat figure."""
    from test_ed_report_multi_turn import write_ed_multi_turn

    from branchpoint.analysis.contrasts.matched import resolve_baselines
    from branchpoint.analysis.ed.responses import response_scores
    from branchpoint.analysis.ed.turns import matched_safety_contrasts
    from branchpoint.analysis.pairing.forks import attach_tree
    from branchpoint.analysis.tables.judgments import judgment_table
    from branchpoint.core.read.units import Tree

    db = tmp_path / "edmt.db"
    write_ed_multi_turn(db, conditions=("none",), n=6)
    jt = attach_tree(judgment_table(db), db)
    resp = response_scores(jt, "exclude")
    base = resolve_baselines(resp.drop_duplicates("conversation_id"), {"help": "accept"})
    decline = sorted(
        resp.loc[resp["conversation_id"].str.endswith("decline"), "conversation_id"].unique()
    )
    accept = [c.replace("decline", "accept") for c in decline]
    checks = pd.DataFrame({
        "conversation_id": decline + accept, "branch_point": "help",
        "option": ["decline"] * len(decline) + ["accept"] * len(accept), "realised": True,
        "exchange": 2, "recorded": True,
        "enactment": [NOT_ENACTED if i < 2 else ENACTED for i in range(len(decline))]
        + [ENACTED] * len(accept),
    })  # fmt: skip
    tab = matched_safety_contrasts(resp, base, Tree(jt), realisation=checks)
    row = tab.iloc[0]
    assert row["n_pairs"] == len(decline) - 2 and row["n_not_realised"] == 2
    assert row["n_pairs_itt"] == len(decline)
    assert np.isfinite(row["diff_itt"]) and row["ci_low_itt"] < row["diff_itt"] < row["ci_high_itt"]


@pytest.mark.slow  # a store with a labelling design
def test_corrected_contrasts_show_the_itt_figure_with_its_interval(tmp_path: Path) -> None:
    """Was: the judge-corrected contrasts gave per-protocol figures only."""
    from test_invariants import _labelled_store

    from branchpoint.analysis.judge_correction.contrasts import (
        contrast_display,
        judge_corrected_contrasts,
    )

    # enough labels that each contrast side's strata reach the corrected figure's minimum
    db = _labelled_store(tmp_path / "jc.db", 11, n=600)
    table = judge_corrected_contrasts(db).table
    assert not table.empty and "corrected_itt" in table.columns
    done = table[table["corrected"].notna()]
    assert not done.empty
    assert (done["corrected_low_itt"] <= done["corrected_itt"]).all()
    assert (done["n_pairs_itt"] >= done["n_pairs"]).all()
    shown = contrast_display(done)["corrected, intention to treat"]
    assert shown.str.contains(" to ").all()
    # the judge-only and people-only figures are per protocol too: ITT beside each (was absent)
    for col in ("judge only, intention to treat", "people only, intention to treat"):
        assert contrast_display(done)[col].str.contains(" to ").all()


def _chatbot_enactment_store(path: Path) -> None:
    from branchpoint.analysis.testing.synthetic import Effect, TeenDesign, write_teen_store

    write_teen_store(
        path,
        TeenDesign(
            n_scenarios=8, targets=("scripted:a", "scripted:b"), conditions=("none",),
            n_exchanges=3, branch_points={"help": ["accept", "decline"]},
            effects=(Effect("help", "decline", ("indirect_suicide_risk",), 0.2),),
            chatbot_enactment={"help": (0.2, 0.9)},
        ),
        seed=1,
    )  # fmt: skip


def test_a_store_whose_enactment_depends_on_the_chatbot_stores_the_checks(tmp_path: Path) -> None:
    """The synthetic store of issue 44: a firm chatbot makes the persona give in, so some decline
    arms carry a "not_enacted" check and leave the per-protocol pairs; the baseline arms never."""
    from branchpoint.analysis.pairing.realisation import realisation_table

    db = tmp_path / "enact.db"
    _chatbot_enactment_store(db)
    table = realisation_table(db).groupby("option")[["n_fired", "n_not_enacted"]].sum()
    assert table.loc["accept", "n_not_enacted"] == 0
    assert 0 < table.loc["decline", "n_not_enacted"] < table.loc["decline", "n_fired"]


@pytest.mark.slow  # a whole analysis
def test_the_target_share_table_shows_the_itt_shares_beside(tmp_path: Path) -> None:
    """Was: the matched contrasts' "Share of targets" table gave the per-protocol shares alone,
    on a store whose enactment depends on the chatbot (the headline had the ITT share, this
    table did not)."""
    from branchpoint.analysis.pipeline import run_analysis
    from branchpoint.analysis.report.sections import build_sections

    db = tmp_path / "enact.db"
    _chatbot_enactment_store(db)
    a = run_analysis(db, n_boot=0)
    share = a.contrasts.target_share  # type: ignore[union-attr]
    caption, table = next(
        (c, t) for s in build_sections(a) for c, t in s.tables if c.startswith("Share of targets")
    )
    assert "selected subset" in caption and "intention to treat" in caption
    for col in ("raised", "lowered", "median diff (pp)"):
        assert f"{col} (intention to treat)" in table.columns
    # the per-protocol and ITT medians differ where pairs were left out: both shown, each its own
    pp = table["median diff (pp)"].tolist()
    itt = table["median diff (pp) (intention to treat)"].tolist()
    assert itt == [f"{x * 100:+.1f}" for x in share["median_diff_itt"]]
    assert pp != itt


def test_the_enactment_calibration_shows_per_protocol_selected_by_the_chatbot() -> None:
    """The issue-44 calibration setting: with no effect at all, keeping the enacted pairs (the
    option arms whose chatbot reply was soft, which fail more) gives a positive difference;
    intention to treat stays near 0 and covers it."""
    from branchpoint.analysis.testing.enactment import Enactment, calibrate_enactment

    c = calibrate_enactment(Enactment(10, "post-fork", 0.0, n_studies=60, seed=3))
    assert c.truth_pp > 0.03 and abs(c.truth_itt) < 0.001
    assert c.mean_pp - c.mean_itt > 0.02
    assert abs(c.mean_itt) < 0.01 and c.cover_itt > 0.85
    assert 0.5 < c.enacted < 0.7
