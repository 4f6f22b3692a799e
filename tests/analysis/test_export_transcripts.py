"""Transcripts in plain formats: one conversation a record, round-tripped against the store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fixtures.engine.judged_run import judged_run
from typer.testing import CliRunner


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    from branchpoint.core.store import open_store

    folder = tmp_path_factory.mktemp("transcripts")
    db = folder / "run.db"
    store = open_store(str(db))
    try:
        run_id = judged_run(store, folder)
    finally:
        store.close()
    return db, run_id


def _store_view(db: Path, run_id: str) -> dict[str, dict[str, Any]]:
    """What the store holds, read through the ORM records (not the export's own reads)."""
    from branchpoint.core.read import get_transcript, realisation_rows, select_conversations
    from branchpoint.core.store import open_store

    store = open_store(str(db), create=False)
    try:
        out = {}
        real = realisation_rows(str(db), [run_id])
        for conv in select_conversations(store, run_id):
            t = get_transcript(store, conv.id)
            assert t is not None
            rows = real[real["conversation_id"] == conv.id]
            out[conv.id] = {
                "conversation": conv.model_dump(
                    include={
                        "run_id",
                        "scenario_id",
                        "variant_id",
                        "choices",
                        "target",
                        "condition",
                        "simulator",
                        "replicate",
                        "seed",
                        "status",
                        "stop_reason",
                        "n_turns",
                        "parent_id",
                        "fork_turn",
                    }
                ),  # fmt: skip
                "messages": [
                    (
                        x.id,
                        x.index,
                        x.exchange,
                        x.role,
                        x.content,
                        x.reasoning,
                        x.branch_state,
                        x.fired,
                        x.events,
                        x.origin_turn_id,
                    )  # fmt: skip
                    for x in t.turns
                ],
                "verdicts": sorted(
                    (
                        j.id,
                        j.turn_id,
                        j.criterion_id,
                        j.judge,
                        j.applicable,
                        j.verdict,
                        j.score,
                        j.rationale,
                        j.evidence,
                        j.error,
                        j.raw_output,
                    )  # fmt: skip
                    for j in t.judgments
                ),
                "realisation": sorted(
                    (r.branch_point, r.option, bool(r.realised)) for r in rows.itertuples()
                ),
            }
        return out
    finally:
        store.close()


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_transcripts_round_trip_to_the_store(
    run: tuple[Path, str], tmp_path: Path, fmt: str
) -> None:
    from branchpoint.analysis.export import load_transcripts
    from branchpoint.tui.cli import app

    db, run_id = run
    out = tmp_path / f"t.{fmt}"
    res = CliRunner().invoke(
        app, ["export", run_id, "--level", "transcript", "--format", fmt, "--out", str(out),
              "--db", str(db)],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    records = load_transcripts(out)
    want = _store_view(db, run_id)
    assert [r.conversation_id for r in records] == sorted(want)
    for r in records:
        w = want[r.conversation_id]
        got_conv = {
            "run_id": r.run_id, "scenario_id": r.scenario_id, "variant_id": r.variant_id,
            "choices": r.choices, "target": r.target, "condition": r.condition,
            "simulator": r.simulator, "replicate": r.replicate, "seed": r.seed,
            "status": r.status, "stop_reason": r.stop_reason, "n_turns": r.n_turns,
            "parent_id": r.fork.parent_id, "fork_turn": r.fork.fork_turn,
        }  # fmt: skip
        assert got_conv == w["conversation"]
        assert [
            (
                m.turn_id,
                m.index,
                m.exchange,
                m.role,
                m.content,
                m.reasoning,
                m.branch_state,
                m.fired,
                m.events,
                m.origin_turn_id,
            )  # fmt: skip
            for m in r.messages
        ] == w["messages"]
        assert (
            sorted(
                (
                    v.judgment_id,
                    v.turn_id,
                    v.criterion_id,
                    v.judge,
                    v.applicable,
                    v.verdict,
                    v.score,
                    v.rationale,
                    v.evidence,
                    v.error,
                    v.raw_output,
                )  # fmt: skip
                for v in r.verdicts
            )
            == w["verdicts"]
        )
        assert (
            sorted((x.branch_point, x.option, x.realised) for x in r.realisation)
            == w["realisation"]
        )
    # Something to compare: forks, copies, verdicts and realised and unrealised options.
    assert any(r.fork.fork_turn is not None for r in records)
    assert any(m.shared_prefix for r in records for m in r.messages)
    assert any(v.verdict == "fail" for r in records for v in r.verdicts)
    assert {x.realised for r in records for x in r.realisation} == {True, False}


def test_the_schema_is_the_model_and_every_record_fits_it(
    run: tuple[Path, str], tmp_path: Path
) -> None:
    from branchpoint.analysis.export import TranscriptRecord, transcript_schema, write_transcripts
    from branchpoint.tui.cli import app

    db, run_id = run
    res = CliRunner().invoke(app, ["schema", "transcript"])
    assert res.exit_code == 0, res.output
    printed = json.loads(res.output)
    assert printed == transcript_schema() == TranscriptRecord.model_json_schema()
    assert {"messages", "verdicts", "fork", "choices", "system_prompt"} <= set(
        printed["properties"]
    )
    out = tmp_path / "t.jsonl"
    assert write_transcripts(db, out, "jsonl", run_id) == 9
    line = json.loads(out.read_text().splitlines()[0])
    assert set(line) == set(printed["properties"])  # every field documented, none extra
    jsonschema = pytest.importorskip("jsonschema")
    for text in out.read_text().splitlines():
        jsonschema.validate(json.loads(text), printed)


def test_an_empty_selection_writes_a_readable_empty_file(tmp_path: Path) -> None:
    from branchpoint.analysis.export import load_transcripts, write_transcripts
    from branchpoint.core.store import open_store

    db = tmp_path / "empty.db"
    open_store(str(db)).close()
    for fmt in ("jsonl", "parquet"):
        out = tmp_path / f"e.{fmt}"
        assert write_transcripts(db, out, fmt) == 0
        assert load_transcripts(out) == []


def test_csv_is_refused_for_transcripts_in_one_line(run: tuple[Path, str], tmp_path: Path) -> None:
    from fixtures.engine.helpers import run_cli

    db, run_id = run
    proc = run_cli("export", run_id, "--level", "transcript", "--format", "csv", "--out",
                   str(tmp_path / "x.csv"), "--db", str(db))  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "error: --level transcript: expected --format jsonl or parquet (not csv)"
    )


def test_sqlite_and_postgresql_stores_export_the_same_files(
    postgres_url: str, tmp_path: Path
) -> None:
    """JSON columns come back as text from SQLite and parsed from PostgreSQL: the exports of
    the same run are the same either way (PostgreSQL only runs where a server is given)."""
    import pandas as pd

    from branchpoint.analysis.export import LEVELS, export_level, read_export, write_transcripts
    from branchpoint.core.store import open_store

    got: dict[str, dict[str, Any]] = {}
    for name, url in (("sqlite", str(tmp_path / "s.db")), ("pg", postgres_url)):
        store = open_store(url)
        try:
            run_id = judged_run(store, tmp_path / name, run_id="same-run")
            files: dict[str, Any] = {}
            for level in LEVELS:
                path = tmp_path / f"{name}-{level}.parquet"
                export_level(store, level, path, "parquet", run_id)
                files[level] = read_export(path)
            path = tmp_path / f"{name}.jsonl"
            write_transcripts(store, path, "jsonl", run_id)
            files["transcript"] = load_transcripts_as_dicts(path)
            got[name] = files
        finally:
            store.close()
    for level in LEVELS:
        # where each run kept its scenarios, and how long each call took, are each run's own
        own = ["scenario_path", "latency_s"]
        a, b = (got[n][level].drop(columns=own, errors="ignore") for n in ("sqlite", "pg"))
        pd.testing.assert_frame_equal(a, b, obj=level)
    assert got["sqlite"]["transcript"] == got["pg"]["transcript"]


def test_realisation_rows_come_in_id_order_whatever_the_database_keeps(
    postgres_url: str, tmp_path: Path
) -> None:
    """PostgreSQL writes an updated row at the end of its heap: the arm export followed that
    order, so the same run exported from SQLite and PostgreSQL differed row by row."""
    from sqlalchemy import text

    from branchpoint.core import read
    from branchpoint.core.store import open_store

    store = open_store(postgres_url)
    try:
        run_id = judged_run(store, tmp_path / "pg", run_id="heap-order")
        ids = sorted(read.realisation_rows(store, [run_id])["conversation_id"].unique())
        with store.engine.begin() as conn:  # the first conversation's row moves to the end
            conn.execute(
                text("UPDATE conversations SET status = status WHERE id = :i"), {"i": ids[0]}
            )
        got = read.realisation_rows(store, [run_id])["conversation_id"].tolist()
        assert got == sorted(got) and got[0] == ids[0]
    finally:
        store.close()


def load_transcripts_as_dicts(path: Path) -> list[dict[str, Any]]:
    from branchpoint.analysis.export import load_transcripts

    out = []
    for r in load_transcripts(path):
        d = r.model_dump()
        d.pop("scenario_path")  # each store's run has its own scenario folder
        for m in d["messages"]:
            m.pop("latency_s")  # and its own timings
        out.append(d)
    return out
