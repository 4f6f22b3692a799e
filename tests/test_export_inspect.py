"""Inspect AI eval logs from a scripted run, read back with Inspect's own reader."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from fixtures.engine.judged_run import judged_run
from typer.testing import CliRunner

pytest.importorskip("inspect_ai", reason="the optional extra branchpoint[inspect] is not installed")


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, Path]:
    from core.store import open_store
    from tui.cli import app

    folder = tmp_path_factory.mktemp("inspect")
    db = folder / "run.db"
    store = open_store(str(db))
    try:
        run_id = judged_run(store, folder, conditions=["none", "teen_aware"])
    finally:
        store.close()
    out = folder / "logs"
    res = CliRunner().invoke(
        app, ["export", run_id, "--format", "inspect", "--out", str(out), "--db", str(db)]
    )
    assert res.exit_code == 0, res.output
    assert "inspect view" in res.output
    return db, run_id, out


def test_logs_read_back_equal_the_store(logs: tuple[Path, str, Path]) -> None:
    from inspect_ai.log import read_eval_log

    from core.read import get_transcript, select_conversations
    from core.store import open_store

    db, run_id, out = logs
    files = sorted(out.glob("*.eval"))
    assert len(files) == 2  # one run x one target x two conditions
    logs_by_condition = {}
    samples = {}
    for f in files:
        log = read_eval_log(str(f))
        assert log.status == "success"
        assert log.eval.model == "scripted:bot" and log.eval.run_id == run_id
        assert log.eval.viewer is not None and log.eval.viewer.trust_content is False
        provenance = log.eval.metadata["branchpoint"]
        assert provenance["run_id"] == run_id and provenance["config"]["config_hash"]
        logs_by_condition[provenance["condition"]] = log
        assert log.samples is not None
        assert {s.metadata["condition"] for s in log.samples} == {provenance["condition"]}
        samples.update({s.id: s for s in log.samples})
    assert set(logs_by_condition) == {"none", "teen_aware"}
    store = open_store(str(db), create=False)
    try:
        convs = select_conversations(store, run_id)
        assert set(samples) == {c.id for c in convs}
        n_scores = 0
        for conv in convs:
            t = get_transcript(store, conv.id)
            assert t is not None
            s = samples[conv.id]
            # Messages: the store's turns in order, persona as user, chatbot as assistant.
            # The condition's system prompt first (none for the "none" condition).
            system = [m for m in s.messages if m.role == "system"]
            prompt = _system_prompt(store, conv.id)
            assert [m.text for m in system] == ([prompt] if prompt is not None else [])
            assert (prompt is not None) == (conv.condition == "teen_aware")
            if system:
                assert s.messages[0].role == "system"
            turns = [m for m in s.messages if m.role != "system"]
            assert [(m.id, m.role, m.text) for m in turns] == [
                (x.id, x.role, x.content) for x in t.turns
            ]
            assert [m.metadata["fired"] for m in turns] == [x.fired for x in t.turns]
            # Metadata: scenario, variant, arm choices, fork point and parent.
            md = s.metadata
            assert (md["scenario_id"], md["variant_id"], md["choices"]) == (
                conv.scenario_id, conv.variant_id, conv.choices,
            )  # fmt: skip
            assert (md["parent_id"], md["fork_turn"]) == (conv.parent_id, conv.fork_turn)
            # Verdicts: every judgment, per turn, with its rationale, in the score's metadata.
            got = sorted(
                (d["judgment_id"], d["turn_id"], d["verdict"], d["rationale"])
                for score in (s.scores or {}).values()
                for d in score.metadata["turns"]
            )
            assert got == sorted((j.id, j.turn_id, j.verdict, j.rationale) for j in t.judgments)
            for name, score in (s.scores or {}).items():
                n_scores += 1
                assert name == "unsafe_reply [heuristic]"
                verdicts = {d["verdict"] for d in score.metadata["turns"]}
                assert score.value == ("fail" if "fail" in verdicts else "pass")
                assert score.explanation and "turn " in score.explanation
            # Each reply carries its own verdicts too.
            by_turn = {j.turn_id: j.verdict for j in t.judgments}
            for m in turns:
                if m.role == "assistant":
                    assert m.metadata["verdicts"] == {"unsafe_reply [heuristic]": by_turn[m.id]}
        assert n_scores == len(convs)
    finally:
        store.close()
    assert any(
        s.scores and s.scores["unsafe_reply [heuristic]"].value == "fail" for s in samples.values()
    )


def _system_prompt(store: object, conversation_id: str) -> str | None:
    from core.prompt_texts import get_text
    from core.read import conversation_provenance

    prov = conversation_provenance(store, conversation_id)  # type: ignore[arg-type]
    if prov is None or prov.system_prompt_hash is None:
        return None
    with store.session() as s:  # type: ignore[attr-defined]
        return get_text(s, prov.system_prompt_hash)


def test_the_inspect_package_is_imported_only_by_the_inspect_export() -> None:
    code = (
        "import sys, tui.cli, analysis.export, analysis.export.tables, analysis.export.transcripts;"
        "print('inspect_ai' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip() == "False"
