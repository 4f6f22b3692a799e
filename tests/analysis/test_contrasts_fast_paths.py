"""The contrasts' fast paths give what the plain ones give: contrasts per level of a matched
column (the simulator) paired once equal ``matched_contrasts`` on that level's rows alone; a
table's pairs are made once for every contrast of an analysis; group codes equal pandas'
group-by numbering."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import branchpoint.analysis.contrasts.matched as contrasts
from branchpoint.analysis.contrasts.matched import matched_contrasts, matched_contrasts_within
from branchpoint.analysis.contrasts.sensitivity import conclusions_by_simulator
from branchpoint.analysis.pairing.fork_summaries import fork_tables
from branchpoint.analysis.tables.judgments import group_codes
from branchpoint.analysis.testing.synthetic import TeenDesign, add_unforked_arms, write_teen_store
from branchpoint.core import read

SIMS = ("scripted:sim-a", "scripted:sim-b")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("within") / "two-sims.db"
    design = TeenDesign(
        n_scenarios=8,
        targets=("scripted:t1", "scripted:t2"),
        simulators=SIMS,
        simulator_effect={"scripted:sim-b": 0.1},
        n_exchanges=4,
        branch_points={
            "disclosure": ["guarded", "open"],
            "help": ["accept", "decline"],
            "limit": ["accept_limit", "push_back", "argue"],  # three options: Friedman too
        },
    )
    write_teen_store(path, design, seed=5)
    add_unforked_arms(path)  # a fork tree: copies to count once
    return str(path)


def _frames(res: Any) -> dict[str, Any]:
    return {
        "contrasts": res.contrasts,
        "per_target": res.per_target,
        "friedman": res.friedman,
        "realisation": res.realisation,
        "notes": res.notes,
    }


@pytest.mark.slow  # over 2 s: make test runs it, test-fast does not
def test_each_level_equals_the_analysis_of_its_rows_alone(store: str) -> None:
    ft = fork_tables(store, None)
    assert ft is not None
    paired = ft.paired
    realisation = read.realisation_rows(store, None)
    each = matched_contrasts_within(paired, "simulator", realisation=realisation, n_boot=50)
    assert sorted(each) == list(SIMS)
    for sim in SIMS:
        alone = matched_contrasts(
            paired[(paired["simulator"].astype(str) == sim).to_numpy()],
            realisation=realisation,
            n_boot=50,
        )
        got, want = _frames(each[sim]), _frames(alone)
        assert not want["contrasts"].empty and not want["friedman"].empty
        for name, frame in want.items():
            if isinstance(frame, pd.DataFrame):
                pd.testing.assert_frame_equal(
                    got[name].reset_index(drop=True), frame.reset_index(drop=True), obj=name
                )
            else:
                assert got[name] == frame, name


@pytest.mark.slow  # over 2 s: make test runs it, test-fast does not
def test_without_counts_each_level_keeps_every_figure_but_the_counts(store: str) -> None:
    """``counts=False`` (the simulator conclusions) leaves out the dropout and realised-arm
    counts, and nothing else: the figures, their Holm family and the realisation label stay."""
    ft = fork_tables(store, None)
    assert ft is not None
    realisation = read.realisation_rows(store, None)
    kw: dict[str, Any] = {"realisation": realisation, "n_boot": 50, "per_target": False}
    full = matched_contrasts_within(ft.paired, "simulator", secondary_tests=False, **kw)
    brief = matched_contrasts_within(
        ft.paired, "simulator", secondary_tests=False, counts=False, **kw
    )
    counted = ["n_only_baseline", "n_only_option", "n_never_forked", "n_realised_pairs",
               "n_assigned_pairs", "n_arms_baseline"]  # fmt: skip
    for sim in SIMS:
        got, want = brief[sim].contrasts, full[sim].contrasts
        assert not want.empty and set(counted) <= set(want.columns)
        assert not set(counted) & set(got.columns)
        pd.testing.assert_frame_equal(got, want[list(got.columns)])
        assert brief[sim].realisation.empty and not full[sim].realisation.empty


def test_a_column_that_is_not_matched_on_is_refused(store: str) -> None:
    ft = fork_tables(store, None)
    assert ft is not None
    with pytest.raises(ValueError, match="not matched on"):
        matched_contrasts_within(ft.paired, "criterion_id")


@pytest.mark.slow  # over 2 s: make test runs it, test-fast does not
def test_the_pairs_of_a_table_are_made_once_for_every_contrast(
    store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The contrasts and the simulator comparison of one analysis ask for the same pairs; at
    the seed study's scale making them again cost 2.5 s."""
    made: list[tuple[str, Any, Any]] = []
    real = contrasts.candidate_pairs

    def counted(cc: pd.DataFrame, factor: str, a: Any, b: Any, *args: Any, **kw: Any) -> Any:
        made.append((factor, a, b))
        return real(cc, factor, a, b, *args, **kw)

    monkeypatch.setattr(contrasts, "candidate_pairs", counted)
    ft = fork_tables(store, None)
    assert ft is not None
    first = matched_contrasts(ft.paired, n_boot=50)
    n = len(made)
    assert n == len(set(made)) and n >= 3
    moved = conclusions_by_simulator(ft.paired, n_boot=50)
    assert len(made) == n and not moved.empty  # no pair made again
    again = matched_contrasts(ft.paired, n_boot=50)
    pd.testing.assert_frame_equal(first.contrasts, again.contrasts)
    # a new table (another filter) pairs anew
    matched_contrasts(ft.paired[(ft.paired["judge"].astype(str) != "").to_numpy()], n_boot=50)
    assert len(made) == 2 * n


@pytest.mark.slow  # over 2 s: make test runs it, test-fast does not
def test_the_split_path_gives_the_separate_calls_answer(tmp_path: Path) -> None:
    """conclusions_by_simulator (paired once) equals comparing two separate analyses by hand."""
    write_teen_store(tmp_path / "s.db", TeenDesign(n_scenarios=6, simulators=SIMS))
    ft = fork_tables(str(tmp_path / "s.db"), None)
    assert ft is not None
    table = conclusions_by_simulator(ft.paired, n_boot=50)
    for sim, side in ((SIMS[0], "ref"), (SIMS[1], "other")):
        alone = matched_contrasts(
            ft.paired[(ft.paired["simulator"].astype(str) == sim).to_numpy()],
            n_boot=50,
            per_target=False,
        ).contrasts
        merged = table.merge(alone, on=["contrast", "criterion_id", "condition", "judge"])
        assert len(merged) == len(alone)
        pd.testing.assert_series_equal(merged[f"diff_{side}"], merged["diff"], check_names=False)
        assert (merged[f"n_pairs_{side}"] == merged["n_pairs"]).all()


@pytest.mark.parametrize("sort", [True, False])
def test_group_codes_number_groups_as_pandas_does(sort: bool) -> None:
    """Text with missing values (None and NaN alike), a categorical with unused categories and
    a missing value, object text and numbers: the numbering of ``groupby(...).ngroup()``."""
    rng = np.random.default_rng(3)
    n = 2000
    frame = pd.DataFrame(
        {
            "text": pd.array(rng.choice(["b", "a", "c", None], n), dtype="str"),
            "cat": pd.Categorical(rng.choice(["y", "x", None], n), categories=["z", "y", "x", "w"]),
            "obj": pd.Series(rng.choice(["q", "p", None], n), dtype=object),
            "num": rng.choice([2.0, 1.0, np.nan], n),
            "int": rng.integers(0, 3, n),
        }
    )
    for cols in (["text"], ["cat", "num"], ["obj", "int", "text", "cat"], list(frame.columns)):
        want = frame.groupby(cols, sort=sort, dropna=False, observed=True).ngroup().to_numpy()
        np.testing.assert_array_equal(group_codes(frame, cols, sort=sort), want)
    assert len(group_codes(frame.iloc[0:0], ["text"])) == 0
    np.testing.assert_array_equal(group_codes(frame, []), np.zeros(n, np.int64))


def test_the_arms_outer_join_equals_pandas_one_to_one_outer_merge() -> None:
    """Keys in sorted order with each side's row or -1, as ``merge(how="outer",
    validate="one_to_one")`` gives them; a key twice on one side is refused."""
    from branchpoint.analysis.contrasts.matched import _outer_join

    rng = np.random.default_rng(5)
    a = rng.choice(10_000, 3_000, replace=False)
    b = rng.permutation(
        np.concatenate([a[:2_500], rng.choice(np.arange(10_000, 12_000), 400, replace=False)])
    )
    ra, rb = rng.permutation(len(a)) + 3, rng.permutation(len(b)) + 9
    keys, got_a, got_b = _outer_join(a, ra, b, rb)
    want = pd.DataFrame({"k": a, "ia": ra}).merge(
        pd.DataFrame({"k": b, "ib": rb}), on="k", how="outer", validate="one_to_one"
    )
    np.testing.assert_array_equal(keys, want["k"].to_numpy())
    np.testing.assert_array_equal(got_a, want["ia"].fillna(-1).to_numpy(np.int64))
    np.testing.assert_array_equal(got_b, want["ib"].fillna(-1).to_numpy(np.int64))
    for left, right in (([1, 1], [2]), ([1], [2, 2])):
        with pytest.raises(ValueError, match="not unique"):
            _outer_join(
                np.array(left), np.arange(len(left)), np.array(right), np.arange(len(right))
            )


def test_condition_and_simulator_contrasts_pair_arms_that_share_a_variant(tmp_path: Path) -> None:
    """Arms that never fired an added branch point keep their parent's variant: paired on the
    variant alone, each cell had two arms per condition and analyze stopped with a traceback."""
    from branchpoint.analysis.contrasts.matched import condition_contrast, simulator_sensitivity

    path = tmp_path / "copies.db"
    write_teen_store(path, TeenDesign(n_scenarios=3, targets=("scripted:t1",), simulators=SIMS))
    add_unforked_arms(path)
    ft = fork_tables(str(path), None)
    assert ft is not None
    cond = condition_contrast(ft.paired, n_boot=50)
    sims = simulator_sensitivity(ft.paired, n_boot=50)
    assert sims is not None
    for res in (cond, sims):
        assert not res.contrasts.empty
        # every arm met its own twin: the copies' pairs are copies of their parents' pairs
        assert (res.contrasts["n_pairs"] > 0).all()


def test_unrated_pairs_count_a_copied_pair_once(tmp_path: Path) -> None:
    """Every verdict an error and every arm stored again as a never-forked copy: the notes said
    '32 matched pairs, none rated in both arms' of 16 comparisons (each copy pair counted)."""
    path = tmp_path / "errors.db"
    design = TeenDesign(
        n_scenarios=4, targets=("scripted:t1",), simulators=SIMS, n_exchanges=4, p_error=1.0
    )
    write_teen_store(path, design, seed=2)
    add_unforked_arms(path)
    ft = fork_tables(str(path), None)
    assert ft is not None
    notes = matched_contrasts(ft.paired, n_boot=50).notes
    # 4 scenarios x 1 target x 2 conditions x 2 simulators, one baseline and one option arm
    assert (
        "branch point help: accept vs decline: 16 matched pairs, none rated in both arms" in notes
    )


def test_pairs_that_never_forked_are_said_so_not_unrated() -> None:
    """On the quickstart store: 'help: accept vs decline: 1 matched pairs, none rated in both
    arms' of a pair whose arms never forked (one conversation stored twice)."""
    from branchpoint.analysis.contrasts.matched import _unpaired

    cand = pd.DataFrame({"conversation_id_a": ["a"], "conversation_id_b": ["b"],
                         "status": ["never_forked"]})  # fmt: skip
    assert _unpaired(cand) == "1 matched pair, none forked (identical arms)"
    two = pd.DataFrame({"conversation_id_a": ["a", "c"], "conversation_id_b": ["b", "d"],
                        "status": ["never_forked", "none"]})  # fmt: skip
    assert _unpaired(two) == "2 matched pairs, none rated in both arms (1 never forked)"
