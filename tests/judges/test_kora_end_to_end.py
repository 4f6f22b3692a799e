"""KORA end to end: its risks.json becomes the `kora` rubric written at import beside the
scenarios (KORA's text is never bundled), an imported scenario names it,
and `run` then `judge` (no --rubric) rates every chatbot turn on KORA's own criterion for the
scenario's risk. Scripted models on a real gateway, a real SQLite store."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from fixtures import public_data
from fixtures.engine.helpers import (
    conversations,
    plugin_env,
    run_cli,
    run_engine,
    scripted_run,
    turns_of,
    write_scenario,
)
from sqlmodel import select
from typer.testing import CliRunner

from branchpoint.core.records import Judgment
from branchpoint.gateway.completion import GenParams, Message
from branchpoint.gateway.gateway import Gateway
from branchpoint.gateway.providers.scripted import ScriptedModel
from branchpoint.judges import load_rubric
from branchpoint.judges.kora_rubric import read_categories, rubric_text, write_rubric
from branchpoint.judges.loading import RUBRICS_DIR
from branchpoint.judges.scenario_rubrics import ajudge_by_scenario_rubric
from branchpoint.scenarios import load_scenarios
from branchpoint.scenarios.kora import import_kora

KORA = public_data.KORA
RISKS = public_data.KORA_RISKS
SOURCE = public_data.KORA_SCENARIOS

pytestmark = public_data.needs_kora


def test_import_writes_the_kora_rubric_from_risks_json_and_none_is_bundled(tmp_path: Path) -> None:
    from branchpoint.tui.cli import app

    assert not (RUBRICS_DIR / "kora.yaml").exists()  # KORA's text stays in KORA's data
    src = tmp_path / "two.jsonl"
    src.write_text("\n".join(_records_of_distinct_risks(2)) + "\n", encoding="utf-8")
    res = CliRunner().invoke(
        app, ["import", "kora", str(src), "--out", str(tmp_path / "out"), "--risks", str(RISKS)]
    )
    assert res.exit_code == 0, res.output
    written = tmp_path / "out" / "kora-rubric.yaml"
    assert str(written) in res.output
    assert written.read_text(encoding="utf-8") == rubric_text(RISKS)
    rubric = load_rubric(written)
    assert rubric.id == "kora"
    risks = [(c.id, r) for c in read_categories(RISKS) for r in c.risks]
    assert [c.id for c in rubric.criteria] == [r.id for _, r in risks]
    for crit, (category, risk) in zip(rubric.criteria, risks):
        assert crit.definition == risk.description.strip()
        assert crit.risk_area == category
        assert risk.name in crit.name
    assert rubric.scale == "pass_partial_fail" and rubric.scope == "per_turn"


def _records_of_distinct_risks(n: int) -> list[str]:
    seen: dict[str, str] = {}
    for line in SOURCE.read_text(encoding="utf-8").splitlines():
        if line.strip():
            risk = json.loads(line)["seed"]["riskId"]
            seen.setdefault(risk, line)
        if len(seen) == n:
            break
    return list(seen.values())


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Any]]:
    tmp = tmp_path_factory.mktemp("kora-e2e")
    src = tmp / "three.jsonl"
    src.write_text("\n".join(_records_of_distinct_risks(3)) + "\n", encoding="utf-8")
    written, problems = import_kora(src, tmp / "out", risks_path=RISKS)
    assert problems == [] and len(written) == 3
    write_rubric(RISKS, tmp / "out")  # what `branchpoint import kora` does after importing
    scenarios, errors = load_scenarios([tmp / "out"])
    assert errors == []
    return tmp / "out", scenarios


def _judge(messages: list[Message], params: GenParams) -> str:
    """Fails a reply that plays along, passes one that declines; every listed criterion."""
    ids = re.search(r"^Criteria to rate: (.*)\.$", messages[1].content, re.M).group(1).split(", ")  # type: ignore[union-attr]
    rated = re.search(
        r"<<<MESSAGE (\d+) \| chatbot>>>\n(.*?)\n<<<END MESSAGE \1>>>\n\nRate chatbot message \1,",
        messages[1].content,
        re.S,
    )
    assert rated is not None
    reply = rated.group(2)
    verdict = "pass" if "can't" in reply else "fail"
    return json.dumps(
        {
            cid: {"applicable": True, "verdict": verdict, "rationale": "scripted", "evidence": []}
            for cid in ids
        }
    )


def test_imported_scenario_names_the_kora_rubric_and_its_risk(
    imported: tuple[Path, list[Any]],
) -> None:
    out, scenarios = imported
    kora = load_rubric(out / "kora-rubric.yaml")
    lengths = {
        r["id"]: r["conversationLength"]
        for c in json.loads(RISKS.read_text(encoding="utf-8"))
        for r in c["risks"]
    }
    for s in scenarios:
        risk = s.tags[2]
        assert s.rubric == "kora-rubric.yaml" and s.criteria == [risk]
        assert kora.criterion(risk).risk_area == s.risk_area
        assert s.max_turns == lengths[risk]


def test_kora_scenario_run_then_judged_on_kora_criteria(
    store: Any, imported: tuple[Path, list[Any]]
) -> None:
    out, scenarios = imported
    bot = ScriptedModel(default=["Sure, here is how.", "Sorry, I can't help with that."])
    result, _ = run_engine(store, out, bot=bot, max_turns=2)
    convs = conversations(store, result.run_id)
    assert len(convs) == 3

    gw = Gateway(store=store)
    gw.register("scripted:kora-judge", ScriptedModel(default=_judge))
    per_rubric = asyncio.run(
        ajudge_by_scenario_rubric(
            result.run_id, store=store, gateway=gw, judges=["scripted:kora-judge"]
        )
    )
    asyncio.run(gw.aclose())
    assert [ref for ref, _ in per_rubric] == [str((out / "kora-rubric.yaml").resolve())]
    risk_of = {s.id: s.tags[2] for s in scenarios}
    with store.session() as s:
        rows = list(s.exec(select(Judgment)).all())
    assert rows and {r.rubric_id for r in rows} == {"kora"}
    for conv in convs:
        bot_turns = [t for t in turns_of(store, conv.id) if t.role == "assistant"]
        mine = {
            (r.turn_id, r.criterion_id): r.verdict for r in rows if r.conversation_id == conv.id
        }
        # one verdict per chatbot turn, on KORA's criterion for this scenario's risk only
        assert set(mine) == {(t.id, risk_of[conv.scenario_id]) for t in bot_turns}
        expected = ["pass" if "can't" in t.content else "fail" for t in bot_turns]
        assert [mine[(t.id, risk_of[conv.scenario_id])] for t in bot_turns] == expected
    assert {"pass", "fail"} <= {r.verdict for r in rows}


def test_judge_command_without_rubric_uses_each_scenarios_rubric(
    tmp_path: Path, imported: tuple[Path, list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from branchpoint.tui.cli import app

    out, _ = imported
    monkeypatch.setenv("BRANCHPOINT_PLUGINS", "engine_plugin")
    monkeypatch.setenv("COLUMNS", "200")
    runner = CliRunner()
    db = str(tmp_path / "cli.db")
    teen = (
        Path(__file__).resolve().parents[2]
        / "branchpoint/scenarios/library/teen/teen-rs-be-my-girlfriend.yaml"
    )
    for path in (out, teen):
        ran = runner.invoke(
            app,
            [*scripted_run(db, str(path)), "--max-turns", "1"],
        )
        assert ran.exit_code == 0, ran.output
    judged = runner.invoke(app, ["judge", "--all", "--judge", "heuristic", "--db", db])
    assert judged.exit_code == 0, judged.output
    assert re.search(r"rubric \S*kora-rubric\.yaml: 3 conversation\(s\)", judged.output)
    assert re.search(r"rubric teen: \d+ conversation\(s\)", judged.output)
    with sqlite3.connect(db) as con:
        rubrics = {r for (r,) in con.execute("select distinct rubric_id from judgments")}
    # the heuristic has no patterns for KORA's criteria: only the teen arms get verdicts
    assert rubrics <= {"teen"}


@pytest.mark.slow
def test_judge_command_stops_when_a_scenario_names_no_rubric(tmp_path: Path) -> None:
    path = write_scenario(tmp_path)  # an inline fixture with no `rubric:` field
    db = str(tmp_path / "none.db")
    env = plugin_env()
    ran = run_cli(*scripted_run(db, str(path)), "--max-turns", "1", env=env)
    assert ran.returncode == 0, ran.stderr
    judged = run_cli("judge", "--all", "--judge", "heuristic", "--db", db, env=env)
    assert judged.returncode == 2
    errors = [line for line in judged.stderr.splitlines() if line.startswith("error:")]
    assert errors == [
        "error: 1 scenario(s) name no rubric or were not found: eng-inline (expected --rubric "
        "NAME_OR_PATH, or a `rubric:` field in each scenario)"
    ], judged.stderr
    assert "Traceback" not in judged.stderr
    with sqlite3.connect(db) as con:
        assert con.execute("select count(*) from judgments").fetchone() == (0,)
