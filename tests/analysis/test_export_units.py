"""``branchpoint export --level unit`` (issue 44, Build 1 and 5): one row per unit of analysis, so
that counting the file's rows gives the counts ``analyze --format json`` and the report give.

The store (``write_forked_teen_store``) has fork trees at several depths, arms that never forked,
copied turns whose stored verdicts differ from the root's, two judges, two prompt versions of one
judge and a whole-conversation rating per arm: every way a stored row can be a copy. Everything
runs through the CLI. Before the unit level (e2ef9d1) the only per-verdict export was ``judgment``,
every stored row: on this store 20,070 rows where the rate tables count 7,057 ratings and errors.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pandas as pd
import pytest
from fixtures.cli_in_process import run_in_process

from branchpoint.analysis.export import read_export
from branchpoint.analysis.tables.versions import keep_versions_apart
from branchpoint.analysis.testing.synthetic import add_unforked_arms, write_forked_teen_store

pytestmark = pytest.mark.slow  # a forked store, exported and analysed through the CLI

COUNTS = ["n_rated", "n_fail", "n_partial", "n_error"]
CELL = ["target", "condition", "criterion_id", "judge"]


def _export(db: Path, out: Path, *extra: str) -> pd.DataFrame:
    """``branchpoint export --all`` in the format the file's suffix names, read back."""
    fmt = ("--format", out.suffix.lstrip("."))
    done = run_in_process("export", "--all", "--out", str(out), "--db", str(db), *fmt, *extra)
    assert done.returncode == 0, done.stderr
    return read_export(out)


def _analyze(db: Path) -> dict[str, object]:
    done = run_in_process("analyze", "--all", "--format", "json", "--n-boot", "0", "--db", str(db))
    assert done.returncode == 0, done.stderr
    out: dict[str, object] = json.loads(done.stdout)
    return out


def _copy(src: Path, name: str) -> Path:
    out = src.parent / name
    with sqlite3.connect(src) as a, sqlite3.connect(out) as b:
        a.backup(b)
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_forked_teen_store(tmp_path_factory.mktemp("units") / "forks.db")


@pytest.fixture(scope="module")
def units(store: Path) -> pd.DataFrame:
    return _export(store, store.parent / "unit.parquet", "--level", "unit")


def _cell_counts(units: pd.DataFrame) -> pd.DataFrame:
    """The rate tables' counts from the unit export alone (the judge named per version where a
    judge has several, as the tables name it)."""
    u, _notes = keep_versions_apart(units)
    rated = u["applicable"].fillna(False).astype(bool) & u["verdict"].notna()
    rated &= u["verdict"] != "error"
    u = u.assign(
        n_rated=rated,
        n_fail=rated & (u["verdict"] == "fail"),
        n_partial=rated & (u["verdict"] == "partial"),
        n_error=u["verdict"] == "error",
    )
    return u.groupby(CELL)[COUNTS].sum().reset_index()


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_every_format_holds_the_same_unit_table(store: Path, units: pd.DataFrame, fmt: str) -> None:
    got = _export(store, store.parent / f"u.{fmt}", "--level", "unit")
    pd.testing.assert_frame_equal(got, units, obj=f"unit.{fmt} against unit.parquet")


def test_the_unit_export_counts_what_analyze_counts(store: Path, units: pd.DataFrame) -> None:
    a = _analyze(store)
    rates = pd.DataFrame(a["rates"])
    both = rates.merge(_cell_counts(units), on=CELL, how="outer", suffixes=("", "_unit"))
    assert len(both) == len(rates) > 0  # the same cells, none on one side only
    for col in COUNTS:
        assert (both[col] == both[f"{col}_unit"]).all(), col
    # ... hence the judge-only rates of the report, from the unit file alone (the JSON keeps ten
    # decimals)
    assert (both["rate"] - both["n_fail_unit"] / both["n_rated_unit"]).abs().max() < 1e-9
    assert int(both["n_rated_unit"].sum() + both["n_error_unit"].sum()) == a["n_ratings"]
    # The stored rows are many more: the judgment level counts every copy.
    judgments = _export(store, store.parent / "j.parquet", "--level", "judgment")
    assert len(judgments) > 1.5 * len(units)
    assert int(units["n_arms"].sum()) == len(judgments)  # each stored row carries one unit


def test_each_unit_names_the_arms_that_carry_it(units: pd.DataFrame) -> None:
    arms = units["arms"].map(json.loads)
    assert (arms.map(len) == units["n_arms"]).all()
    assert all(c in a and a == sorted(a) for c, a in zip(units["conversation_id"], arms))
    assert (units["n_arms"] > 1).any() and (units["n_arms"] == 1).any()
    # One row per unit: the rating's identity and the turn that produced it never repeat.
    key = ["conversation_id", "turn_index", "rubric_id", "rubric_hash", "criterion_id", "judge"]
    assert not units.duplicated([*key, "prompt_version"]).any()


def test_the_unit_level_is_the_default(store: Path, units: pd.DataFrame) -> None:
    got = _export(store, store.parent / "default.parquet")
    pd.testing.assert_frame_equal(got, units)


def test_copying_arms_changes_no_unit_only_how_many_arms_carry_it(
    store: Path, units: pd.DataFrame
) -> None:
    """An arm that never forks, copied from every arm (forked arms included, so copies of shared
    prefixes at every depth): the same units, each carried by twice the arms."""
    more = _copy(store, "copied.db")
    add_unforked_arms(more)
    after = _export(more, more.parent / "copied.parquet", "--level", "unit")
    assert len(after) == len(units)
    after, before = (f.sort_values("judgment_id").reset_index(drop=True) for f in (after, units))
    same = [c for c in before.columns if c not in ("arms", "n_arms")]
    pd.testing.assert_frame_equal(after[same], before[same])
    assert (after["n_arms"] == 2 * before["n_arms"]).all()
    stored = _export(more, more.parent / "copied-j.parquet", "--level", "judgment")
    assert len(stored) == int(after["n_arms"].sum())  # the stored rows doubled


def test_relabelling_targets_permutes_the_unit_rows(store: Path, units: pd.DataFrame) -> None:
    more = _copy(store, "relabel.db")
    targets = sorted(units["target"].unique())
    new = {t: f"renamed:{i}" for i, t in enumerate(reversed(targets))}
    with sqlite3.connect(more) as conn:
        for old, name in new.items():
            conn.execute("UPDATE conversations SET target = ? WHERE target = ?", (name, old))
    after = _export(more, more.parent / "relabel.parquet", "--level", "unit")
    want = units.assign(target=units["target"].map(new))
    key = ["judgment_id"]
    pd.testing.assert_frame_equal(
        after.sort_values(key).reset_index(drop=True),
        want.sort_values(key).reset_index(drop=True),
        check_dtype=False,
    )


def test_the_judged_items_are_the_unit_exports_rated_turns(
    store: Path, units: pd.DataFrame
) -> None:
    """The labelling designs' frame and the judge correction read ``read.judged_items``: the same
    units, resolved over every stored verdict. Here copied turns keep verdicts of their own, so a
    root's unrated verdict beside a copy's rated one tells the orders apart: filtering the rated
    rows first let 1,401 copies stand in for their roots (8,319 items against 6,918)."""
    from branchpoint.core import read

    items = read.judged_items(store)
    rated = units["applicable"].fillna(False).astype(bool) & units["turn_index"].notna()
    rated &= ~units["verdict"].isin([None, "error"])
    want = units[rated.to_numpy()]
    key = ["conversation_id", "turn_index", "rubric_id", "criterion_id", "judge", "prompt_version"]
    got, want = (
        f[[*key, "verdict", "n_arms"]].astype(str).sort_values(key).reset_index(drop=True)
        for f in (items, want)
    )
    pd.testing.assert_frame_equal(got, want)
