"""Persona realism against people (issue 36): human realism ratings imported for 30
conversations; the report shows the automatic rater's agreement with them, the realism
distribution per simulator, the manipulation checks, and whether the realism gate was on."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fixtures.engine.helpers import conversations, run_cli, run_engine, turns_of, write_scenario

from branchpoint.analysis.raters.agreement import cohen_kappa_quadratic
from branchpoint.analysis.raters.realism import (
    RANK,
    automatic_realism,
    automatic_realism_by_simulator,
    realism_agreement,
    realism_ratings,
)
from branchpoint.analysis.report.persona import persona_sections
from branchpoint.analysis.report.write import write_report
from branchpoint.gateway.completion import Message
from branchpoint.gateway.providers.scripted import ScriptedModel
from branchpoint.judges.persona_checks import HeuristicPersonaRater, rate_personas

DRIFT = "Great question! Furthermore:\n- **school** is a lot\n- **exams** too"
PLAIN = "idk school is just a lot rn"


def some_drift() -> ScriptedModel:
    """Drifts into assistant-speak in about a third of the conversations (by the call's seed)."""

    def reply(messages: list[Message], params: Any) -> str:
        return DRIFT if (params.seed or 0) % 3 == 0 else PLAIN

    return ScriptedModel(default=reply)


@pytest.fixture
def rated(store: Any, tmp_path: Path) -> tuple[Any, str, Path]:
    scenario = write_scenario(
        tmp_path, "r.yaml", id="realism-30", max_turns=3,
        stages=[{"id": "chat", "instructions": "Chat."}],
    )  # fmt: skip
    result, _ = run_engine(store, scenario, persona=some_drift(), replicates=30)
    rate_personas(store, HeuristicPersonaRater(), run_id=result.run_id)
    return store, result.run_id, tmp_path


def _human_csv(store: Any, run_id: str, path: Path) -> list[tuple[str, str]]:
    """A person's ratings of every model-written persona turn of 30 conversations: agrees with
    the text (assistant-speak: not realistic) except on every fifth turn, where it is one level
    milder. Returns (text, verdict) per rating."""
    rows, out = [], []
    n = 0
    for conv in conversations(store, run_id):
        for t in turns_of(store, conv.id):
            if t.role != "user" or t.exchange == 1:  # the opening is the scenario's own text
                continue
            verdict = "not" if t.content == DRIFT else "very"
            n += 1
            if n % 5 == 0:
                verdict = {"not": "mixed", "very": "mostly"}[verdict]
            rows.append([conv.id, t.index, "realism", "persona_realism", "clin1", verdict, "true"])
            out.append((t.content, verdict))
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["conversation_id", "turn_index", "rubric_id", "criterion_id", "annotator",
                    "verdict", "blind"])  # fmt: skip
        w.writerows(rows)
    return out


def test_agreement_with_imported_human_ratings_in_the_report(rated: tuple[Any, str, Path]) -> None:
    store, run_id, tmp = rated
    assert len(conversations(store, run_id)) == 30
    labels = tmp / "realism.csv"
    given = _human_csv(store, run_id, labels)
    if not str(store.url).startswith("sqlite"):
        pytest.skip("the import runs on the SQLite store's file")
    done = run_cli("labels", "import", str(labels), "--db", str(tmp / "t.db"))
    assert done.returncode == 0, done.stdout + done.stderr

    auto = automatic_realism(store, [run_id])
    human = realism_ratings(store, [run_id])
    agree = realism_agreement(auto, human)
    turn = agree[agree["unit"] == "persona turn"].iloc[0]
    assert turn["n_conversations"] == 30 and turn["n_items"] == len(given)
    # the same figures computed from the known ratings
    machine = np.array([RANK["not" if text == DRIFT else "very"] for text, _ in given], float)
    people = np.array([RANK[v] for _, v in given], float)
    assert turn["raw_agreement"] == pytest.approx(float(np.mean(machine == people)))
    assert turn["kappa_quadratic"] == pytest.approx(
        cohen_kappa_quadratic(machine, people, labels=[0.0, 1.0, 2.0, 3.0])
    )
    assert 0.5 < turn["kappa_quadratic"] < 1.0
    assert turn["rater_harsher"] == pytest.approx(float(np.mean(machine > people)))
    assert turn["rater_kinder"] == pytest.approx(float(np.mean(machine < people)))

    by_sim = automatic_realism_by_simulator(auto)
    assert by_sim["n_turns"].sum() == len(auto)

    files = write_report(store, tmp / "report", run_id, n_boot=50)
    md = Path(files.markdown).read_text(encoding="utf-8")
    assert "Manipulation checks and persona realism" in md
    assert "Automatic realism rater against people" in md
    assert f"{turn['kappa_quadratic']:.3f}".rstrip("0") in md
    assert "realism gate off" in md


def test_section_absent_without_persona_ratings(store: Any, tmp_path: Path) -> None:
    scenario = write_scenario(tmp_path, "r.yaml", id="plain", max_turns=2)
    result, _ = run_engine(store, scenario)
    assert persona_sections(store, [result.run_id]) == []
