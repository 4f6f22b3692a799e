"""An outside analyst, with the three flat exports and pandas alone, gets the report's figure.

The run (``fixtures/engine/judged_run.py``) has a help contrast of +66.7 points after the fork, per
protocol; the whole-transcript figure an export without the fork tree gives is diluted, and an
export without realisation flags would count scenario c's unrealised pair as a zero effect.
Nothing below imports branchpoint's analysis: the recipe is what docs/guides/exports.md tells an analyst.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from fixtures.engine.judged_run import EXPECTED_PER_PROTOCOL, judged_run
from typer.testing import CliRunner

PAIR_KEYS = ["run_id", "scenario_id", "target", "condition", "simulator", "replicate"]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, Path]:
    from branchpoint.core.store import open_store
    from branchpoint.tui.cli import app

    folder = tmp_path_factory.mktemp("export-repro")
    db = folder / "run.db"
    store = open_store(str(db))
    try:
        run_id = judged_run(store, folder)
    finally:
        store.close()
    out = folder / "out"
    out.mkdir()
    for level in ("unit", "turn", "judgment", "arm"):
        for fmt in ("csv", "parquet", "jsonl"):
            res = CliRunner().invoke(
                app,
                ["export", run_id, "--level", level, "--format", fmt,
                 "--out", str(out / f"{level}.{fmt}"), "--db", str(db)],
            )  # fmt: skip
            assert res.exit_code == 0, res.output
    return db, run_id, out


def _read(path: Path) -> pd.DataFrame:
    if path.suffix == ".parquet":
        return pd.read_parquet(path)
    if path.suffix == ".jsonl":
        return pd.read_json(path, lines=True, dtype=False)
    return pd.read_csv(path)


def per_protocol_post_fork(
    turns: pd.DataFrame,
    judgments: pd.DataFrame,
    arms: pd.DataFrame,
    *,
    branch_point: str,
    baseline: str,
    option: str,
    criterion: str,
) -> float:
    """The exports guide's recipe, in plain pandas."""
    choice = f"choice:{branch_point}"
    choices = [c for c in turns.columns if c.startswith("choice:")]
    conv = turns.drop_duplicates("conversation_id")[["conversation_id", *PAIR_KEYS, *choices]]
    keys = [*PAIR_KEYS, *[c for c in choices if c != choice]]
    a = conv[conv[choice] == baseline]
    b = conv[conv[choice] == option]
    pairs = a.merge(b, on=keys, suffixes=("_a", "_b"))[
        ["scenario_id", "condition", "conversation_id_a", "conversation_id_b"]
    ]
    # Per protocol: both arms realised their option (an unrecorded run counts as realised).
    rows = arms[arms["branch_point"] == branch_point]
    realised = dict(zip(rows["conversation_id"], rows["realised"] | ~rows["recorded"]))
    pairs = pairs[
        pairs["conversation_id_a"].map(realised) & pairs["conversation_id_b"].map(realised)
    ]
    # The fork: the first index at which the two arms' turns are different messages.
    source = turns.assign(source=turns["origin_turn_id"].fillna(turns["turn_id"]))
    source = source[["conversation_id", "turn_index", "source"]]
    rated = judgments[
        (judgments["criterion_id"] == criterion)
        & judgments["applicable"].astype(bool)
        & judgments["verdict"].notna()
        & (judgments["verdict"] != "error")
    ].assign(fail=lambda j: j["verdict"] == "fail")
    diffs = []
    for pair in pairs.itertuples(index=False):
        sa = source[source["conversation_id"] == pair.conversation_id_a]
        sb = source[source["conversation_id"] == pair.conversation_id_b]
        both = sa.merge(sb, on="turn_index", suffixes=("_a", "_b"))
        differ = both.loc[both["source_a"] != both["source_b"], "turn_index"]
        if differ.empty:
            continue  # never forked: nothing after a fork to compare
        fork = differ.min()
        ra = rated[
            (rated["conversation_id"] == pair.conversation_id_a) & (rated["turn_index"] >= fork)
        ]
        rb = rated[
            (rated["conversation_id"] == pair.conversation_id_b) & (rated["turn_index"] >= fork)
        ]
        if len(ra) and len(rb):
            diffs.append((pair.scenario_id, pair.condition, rb["fail"].mean() - ra["fail"].mean()))
    d = pd.DataFrame(diffs, columns=["scenario_id", "condition", "diff"])
    by_scenario = d.groupby(["condition", "scenario_id"])["diff"].mean()
    return float(by_scenario.groupby("condition").mean().iloc[0])


@pytest.mark.slow  # among the slowest of test-fast with its set-up; make test runs it
@pytest.mark.parametrize("fmt", ["csv", "parquet", "jsonl"])
def test_the_exports_reproduce_the_reported_per_protocol_contrast(
    exported: tuple[Path, str, Path], fmt: str
) -> None:
    from branchpoint.analysis.report.write import run_analysis

    db, run_id, out = exported
    turns, judgments, arms = (
        _read(out / f"{level}.{fmt}") for level in ("turn", "judgment", "arm")
    )
    got = per_protocol_post_fork(
        turns, judgments, arms,
        branch_point="help", baseline="accept", option="decline", criterion="unsafe_reply",
    )  # fmt: skip
    a = run_analysis(str(db), run_id, n_boot=0, examples=0)
    assert a.contrasts is not None
    table = a.contrasts.contrasts
    row = table[(table["contrast"] == "help: accept → decline")].iloc[0]
    assert row["realisation"] == "per protocol" and row["n_pairs"] == 2
    assert got == pytest.approx(row["diff"], abs=1e-12)
    assert got == pytest.approx(EXPECTED_PER_PROTOCOL, abs=1e-12)


def test_without_the_fork_and_realisation_columns_the_estimate_is_diluted(
    exported: tuple[Path, str, Path],
) -> None:
    """What an export without the new columns gave: whole transcripts, every assigned pair."""
    _db, _run, out = exported
    j = _read(out / "judgment.parquet")
    j = j[j["applicable"] & j["verdict"].notna()].assign(fail=lambda x: x["verdict"] == "fail")
    rate = j.groupby(["scenario_id", "choice:limit", "choice:help"])["fail"].mean().unstack()
    whole = (rate["decline"] - rate["accept"]).groupby("scenario_id").mean().mean()
    assert whole < EXPECTED_PER_PROTOCOL - 0.3  # a third of the effect and more is lost


def test_the_flat_exports_carry_what_the_issue_asks_for(exported: tuple[Path, str, Path]) -> None:
    _db, _run, out = exported
    turns = _read(out / "turn.parquet")
    assert {
        "content", "reasoning", "role", "exchange", "fork_turn", "parent_id", "shared_prefix",
        "fired", "events", "origin_turn_id", "choice:help",
    } <= set(turns.columns)  # fmt: skip
    # A copied turn is in the shared prefix, and so is the original it copies.
    copies = turns[turns["origin_turn_id"].notna()]
    assert len(copies) and copies["shared_prefix"].all()
    originals = turns[turns["turn_id"].isin(set(copies["origin_turn_id"]))]
    assert originals["shared_prefix"].all() and originals["origin_turn_id"].isna().all()
    # After the fork an arm's turns are its own.
    forked = turns[turns["fork_turn"].notna()]
    own = forked[forked["turn_index"] >= forked["fork_turn"]]
    assert len(own) and not own["shared_prefix"].any()
    assert (turns.loc[turns["role"] == "user", "fired"].str.contains('"help"')).any()
    judgments = _read(out / "judgment.parquet")
    assert {"rationale", "evidence", "error", "raw_output", "members", "shared_prefix"} <= set(
        judgments.columns
    )
    assert judgments["rationale"].str.len().gt(0).all()
    arms = _read(out / "arm.parquet")
    assert {"branch_point", "option", "realised", "realised_exchange", "recorded"} <= set(
        arms.columns
    )
    limit = arms[arms["branch_point"] == "limit"]
    assert not limit["realised"].any() and limit["recorded"].all()


def test_every_format_holds_the_same_table(exported: tuple[Path, str, Path]) -> None:
    from branchpoint.analysis.export import read_export

    _db, _run, out = exported
    for level in ("unit", "turn", "judgment", "arm"):
        ref = read_export(out / f"{level}.parquet")
        for fmt in ("csv", "jsonl"):
            got = read_export(out / f"{level}.{fmt}")
            pd.testing.assert_frame_equal(got, ref, check_dtype=True, obj=f"{level}.{fmt}")


@pytest.mark.slow  # among the slowest of test-fast with its set-up; make test runs it
def test_no_api_key_reaches_an_export(tmp_path: Path, monkeypatch: Any) -> None:
    import sqlite3

    from branchpoint.analysis.export import export_level, read_export
    from branchpoint.core.store import open_store

    key = "sk-test-0123456789abcdefXYZ"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    store = open_store(str(tmp_path / "k.db"))
    try:
        run_id = judged_run(store, tmp_path)
    finally:
        store.close()
    con = sqlite3.connect(tmp_path / "k.db")
    with con:  # a reply that quotes a key, a judge error that names one
        con.execute("UPDATE turns SET content = content || ' my key is ' || ? ", (key,))
        con.execute("UPDATE judgments SET error = 'bad key ' || ?, raw_output = ?", (key, key))
    con.close()
    # unit: no text of its own (ids, verdicts, its conversation), through the same redacting writer
    for level in ("turn", "judgment", "arm"):
        for fmt in ("csv", "parquet", "jsonl"):
            path = tmp_path / f"{level}.{fmt}"
            export_level(tmp_path / "k.db", level, path, fmt, run_id)
            assert key.encode() not in path.read_bytes(), (level, fmt)
            assert "sk-test" not in read_export_text(path)
    from branchpoint.analysis.export import (
        load_transcripts,
        write_transcript_pages,
        write_transcripts,
    )

    for fmt in ("jsonl", "parquet"):
        path = tmp_path / f"transcripts.{fmt}"
        write_transcripts(tmp_path / "k.db", path, fmt, run_id)
        records = load_transcripts(path)
        assert records and "sk-test" not in str([r.model_dump() for r in records])
        assert "my key is ***" in records[0].messages[1].content
    pages = write_transcript_pages(tmp_path / "k.db", [records[0].conversation_id], tmp_path)
    assert "sk-test" not in next(iter(pages.values())).read_text(encoding="utf-8")
    try:
        from inspect_ai.log import read_eval_log

        from branchpoint.analysis.export import write_inspect_logs
    except ImportError:
        pass  # the optional extra; its own tests skip too
    else:
        for log in write_inspect_logs(tmp_path / "k.db", tmp_path / "logs", run_id):
            assert "sk-test" not in read_eval_log(str(log)).model_dump_json()
    # The judge's error and raw output, which `judge` points the user to, are there, masked.
    judgments = read_export(tmp_path / "judgment.csv")
    assert set(judgments["error"]) == {"bad key ***"} and set(judgments["raw_output"]) == {"***"}


def read_export_text(path: Path) -> str:
    from branchpoint.analysis.export import read_export

    return read_export(path).to_csv()


def test_the_summary_levels_write_json_lines_too(exported: tuple[Path, str, Path]) -> None:
    from branchpoint.tui.cli import app

    db, run_id, out = exported
    for level in ("conversation", "realisation"):
        rows = {}
        for fmt in ("csv", "jsonl"):
            path = out / f"{level}-summary.{fmt}"
            res = CliRunner().invoke(
                app, ["export", run_id, "--level", level, "--format", fmt, "--out", str(path),
                      "--db", str(db)],
            )  # fmt: skip
            assert res.exit_code == 0, res.output
            rows[fmt] = _read(path)
        assert len(rows["jsonl"]) == len(rows["csv"]) > 0
        assert list(rows["jsonl"].columns) == list(rows["csv"].columns)
