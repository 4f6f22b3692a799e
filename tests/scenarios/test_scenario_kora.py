"""The KORA importer: all 781 public scenarios become valid branchpoint scenarios."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixtures import public_data
from typer.testing import CliRunner

from branchpoint.scenarios import Scenario, expand, load_scenarios
from branchpoint.scenarios.kora import convert, import_kora, load_conversation_lengths, load_risks
from branchpoint.tui.cli import app

KORA = public_data.KORA
SOURCE = public_data.KORA_SCENARIOS

pytestmark = public_data.needs_kora


@pytest.fixture(scope="module")
def imported(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[list[Path], list[Scenario], list[str]]:
    out = tmp_path_factory.mktemp("kora")
    written, problems = import_kora(SOURCE, out)
    assert problems == []
    scenarios, errors = load_scenarios([out])
    return written, scenarios, [str(e) for e in errors]


def _records() -> list[dict]:
    return [
        json.loads(line) for line in SOURCE.read_text(encoding="utf-8").splitlines() if line.strip()
    ]


@pytest.mark.slow
def test_all_781_import_and_validate(
    imported: tuple[list[Path], list[Scenario], list[str]],
) -> None:
    written, scenarios, errors = imported
    assert errors == []
    assert len(written) == 781 and len(scenarios) == 781
    assert len({s.id for s in scenarios}) == 781
    # No branch points: one arm each.
    assert all(s.branch_points == [] and len(expand(s)) == 1 for s in scenarios)
    # Children under 13 keep their real age.
    ages = sorted(r["seed"]["childAge"] for r in _records())
    assert sorted(s.persona.age for s in scenarios) == ages
    assert min(ages) < 13


def test_written_files_read_back_to_exactly_the_converted_data(
    imported: tuple[list[Path], list[Scenario], list[str]],
) -> None:
    _, scenarios, _ = imported
    by_id = {s.id: s for s in scenarios}
    risks = load_risks(KORA / "risks.json")
    lengths = load_conversation_lengths(KORA / "risks.json")
    for record in _records():
        expected = Scenario.model_validate(convert(record, risks, lengths))
        assert by_id[expected.id].model_dump() == expected.model_dump(), expected.id


def test_one_scenario_field_by_field(
    imported: tuple[list[Path], list[Scenario], list[str]],
) -> None:
    _, scenarios, _ = imported
    record = _records()[0]
    seed = record["seed"]
    risk_name, category_name = load_risks(KORA / "risks.json")[seed["riskId"]]
    s = next(x for x in scenarios if x.id == f"kora-{seed['id']}")
    assert s.title == record["shortTitle"]
    assert s.risk_area == seed["riskCategoryId"]
    assert s.persona.age == seed["childAge"]
    assert s.persona.gender == seed["childGender"]
    assert s.persona.background == record["childBackground"].strip()
    assert s.persona.voice is not None and s.persona.voice.startswith(
        record["childMaturity"].strip()
    )
    assert f"Cognitive maturity: {seed['childCognitiveMaturity']}" in s.persona.voice
    assert s.persona.context is not None and s.persona.context.startswith(
        record["narrative"].strip()
    )
    if record.get("modelMemory"):
        assert record["modelMemory"].strip() in s.persona.context
    assert s.opening == record["firstUserMessage"].strip()
    (criterion,) = s.custom_criteria
    assert criterion.id == f"kora_{seed['riskId']}"
    assert criterion.name == f"KORA: {risk_name}"
    assert criterion.definition == record["evaluationCriteria"].strip()
    assert s.tags[:3] == ["kora", seed["riskCategoryId"], seed["riskId"]]
    assert f"age-{seed['ageRange']}" in s.tags and f"signal-{seed['riskSignalType']}" in s.tags
    assert risk_name in s.content_warning and category_name in s.content_warning
    assert s.source is not None and "Apache-2.0" in s.source and seed["id"] in s.source
    assert (
        s.notes is not None
        and seed["coreBehavior"] in s.notes
        and "not clinically validated" in s.notes
    )
    assert s.branch_points == [] and s.stages == []
    # judged on KORA's own criterion for its risk, from the bundled kora rubric (issue 12)
    assert s.rubric == "kora-rubric.yaml" and s.criteria == [seed["riskId"]]


def test_control_characters_in_source_are_removed(
    imported: tuple[list[Path], list[Scenario], list[str]],
) -> None:
    _, scenarios, _ = imported
    for s in scenarios:
        text = " ".join(
            filter(None, [s.persona.context, s.opening, *(c.definition for c in s.custom_criteria)])
        )
        assert not any(ord(c) < 32 and c not in "\n\t" for c in text), s.id


def test_cli_reports_bad_lines_and_exit_code(tmp_path: Path) -> None:
    good = SOURCE.read_text(encoding="utf-8").splitlines()[0]
    src = tmp_path / "mixed.jsonl"
    src.write_text(f'{good}\nnot json\n\n{{"seed": {{"id": "x"}}}}\n', encoding="utf-8")
    result = CliRunner().invoke(
        app,
        [
            "import",
            "kora",
            str(src),
            "--out",
            str(tmp_path / "out"),
            "--risks",
            str(KORA / "risks.json"),
        ],
    )
    assert result.exit_code == 1
    out = result.output
    assert (
        f"{src}:2: not valid JSON: Expecting value at column 1 (expected one JSON object a line)"
        in out
    )
    assert f"{src}:4: field 'childAge' is missing or not a number" in out
    assert "imported 1 of 3 scenarios" in out
    scenario_files = [p for p in (tmp_path / "out").glob("*.yaml") if p.name != "kora-rubric.yaml"]
    assert len(scenario_files) == 1
