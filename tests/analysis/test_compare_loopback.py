"""``branchpoint compare`` on sweeps of two chatbots served over real HTTP by the loopback server
(branchpoint/gateway/testing/openai_server.py): one refuses, one goes along, the heuristic judge
rates them on a one-criterion rubric (tests/fixtures/compare/refusal.yaml). From one store with
both targets, and from two stores of one manifest whose chatbot changed between releases."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from fixtures.cli_in_process import run_in_process

from branchpoint.gateway.providers.scripted import ScriptedModel
from branchpoint.gateway.testing.openai_server import ServerThread

pytestmark = pytest.mark.slow  # three sweeps over HTTP

REPO = Path(__file__).resolve().parents[2]
SWEEP = REPO / "tests" / "fixtures" / "sweep"  # the scripted persona, as a plugin
RUBRIC = REPO / "tests" / "fixtures" / "compare" / "refusal.yaml"
TEEN = REPO / "branchpoint" / "scenarios" / "library" / "teen"
SCENARIOS = sorted(str(p) for p in TEEN.glob("teen-ah-*.yaml"))[:8]
REFUSES = "I can't help with that. Please talk to a counselor or a trusted adult."
GOES_ALONG = "Sure, here is how you could do it."


def cli(*args: str) -> Any:
    if str(SWEEP) not in sys.path:
        sys.path.insert(0, str(SWEEP))
    return run_in_process(*args, env={"BRANCHPOINT_PLUGINS": "sweep_plugin", "COLUMNS": "200"})


def sweep(folder: Path, targets: list[dict[str, Any]]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    body = {
        "scenarios": {"paths": SCENARIOS},
        "targets": targets,
        "simulators": ["scripted:sweep-persona"],
        "max_exchanges": 1,
        "judges": [{"spec": "heuristic", "rubrics": [str(RUBRIC)]}],
        "store": "results.db",
    }
    (folder / "study.yaml").write_text(json.dumps(body), encoding="utf-8")
    res = cli("sweep", str(folder / "study.yaml"), "--yes")
    assert res.returncode == 0, res.stdout + res.stderr
    return folder / "results.db"


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("loopback-compare")
    bots = {"scripted:refuser": ScriptedModel(default=REFUSES),
            "scripted:complier": ScriptedModel(default=GOES_ALONG)}  # fmt: skip
    both = ServerThread(models=bots, routes={"refuser": "scripted:refuser",
                                             "complier": "scripted:complier"})  # fmt: skip
    release1 = ServerThread(models=bots, routes={"bot": "scripted:refuser"})
    release2 = ServerThread(models=bots, routes={"bot": "scripted:complier"})
    urls = [s.start() for s in (both, release1, release2)]
    try:
        one = sweep(tmp / "one", [{"spec": "oai:refuser", "params": {"api_base": urls[0]}},
                                  {"spec": "oai:complier", "params": {"api_base": urls[0]}}])  # fmt: skip
        r1 = sweep(tmp / "r1", [{"spec": "oai:bot", "params": {"api_base": urls[1]}}])
        r2 = sweep(tmp / "r2", [{"spec": "oai:bot", "params": {"api_base": urls[2]}}])
    finally:
        for s in (both, release1, release2):
            s.stop()
    return {"one": one, "r1": r1, "r2": r2}


def _overall(res: Any) -> dict[str, Any]:
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    row = next(r for r in out["overall"] if r["criterion_id"] == "declines_harm")
    return {"out": out, "row": row}


def test_compare_lists_the_chatbot_that_goes_along_as_worse_with_its_interval(
    stores: dict[str, Path],
) -> None:
    got = _overall(cli("compare", "--db", str(stores["one"]), "--a", "oai:refuser", "--b",
                       "oai:complier", "--format", "json"))  # fmt: skip
    row = got["row"]
    assert row["rate_a"] == 0.0 and row["rate_b"] == 1.0 and row["diff"] == 1.0
    assert row["n_scenarios"] == len(SCENARIOS) and row["p_scenario_holm"] < 0.05
    assert row["ci_low"] is not None and row["ci_high"] == 1.0
    regressed = got["out"]["regressions"]
    assert any(r["criterion_id"] == "declines_harm" and r["family"] == "overall" for r in regressed)
    # the other way round: the refusing chatbot regressed nowhere
    rev = _overall(cli("compare", "--db", str(stores["one"]), "--a", "oai:complier", "--b",
                       "oai:refuser", "--format", "json"))  # fmt: skip
    assert rev["row"]["diff"] == -1.0 and rev["out"]["regressions"] == []
    text = cli("compare", "--db", str(stores["one"]), "--a", "oai:refuser", "--b", "oai:complier")
    assert "What regressed" in text.stdout and "declines_harm" in text.stdout
    assert "+100.0" in text.stdout and "branchpoint show " in text.stdout


def test_compare_two_releases_from_two_stores_of_one_manifest(stores: dict[str, Path]) -> None:
    res = cli("compare", "--db", str(stores["r1"]), "--db-b", str(stores["r2"]), "--a", "oai:bot",
              "--b", "oai:bot", "--format", "json")  # fmt: skip
    got = _overall(res)
    assert got["out"]["a"] == f"oai:bot ({stores['r1']})"
    assert got["row"]["diff"] == 1.0 and got["row"]["p_scenario_holm"] < 0.05
    pairs = got["out"]["regressed_pairs"]
    assert pairs, got["out"]
    # each id is a conversation of its own store, as `branchpoint show --db` takes it
    shown = cli("show", pairs[0]["conversation_b"], "--db", str(stores["r2"]))
    assert shown.returncode == 0 and GOES_ALONG in shown.stdout
    shown = cli("show", pairs[0]["conversation_a"], "--db", str(stores["r1"]))
    assert shown.returncode == 0 and "can't help with that" in shown.stdout
