"""The scenario verbs of the command line: validate, schema, variants."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from branchpoint.scenarios.schema import SCENARIO_SCHEMA_PATH, dumps, scenario_json_schema
from branchpoint.tui.cli import app

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
runner = CliRunner(env={"COLUMNS": "200"})  # wide enough that table cells do not wrap


def test_validate_good_exits_zero_with_summary() -> None:
    result = runner.invoke(app, ["validate", str(FIXTURES / "good")])
    assert result.exit_code == 0, result.output
    assert result.output.strip().splitlines() == ["2 files, 3 scenarios, 0 errors"]


def test_validate_bad_prints_every_error_and_exits_one() -> None:
    bad = FIXTURES / "bad"
    result = runner.invoke(
        app, ["validate", str(bad / "many_errors.yaml"), str(bad / "unknown_key.yaml")]
    )
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert lines == [
        f"{bad / 'many_errors.yaml'}:3:8: title: is empty (expected non-empty text)",
        f"{bad / 'many_errors.yaml'}:8:8: persona.age: 3 is too small (expected a whole number from 5 to 120)",
        f"{bad / 'many_errors.yaml'}:10:3: persona.hobby: unknown key 'hobby' (expected one of: name, age, "
        "gender, background, voice, context, language, mode)",
        f"{bad / 'many_errors.yaml'}:12:12: max_turns: 0 is too small (expected a whole number from 1 to 200)",
        f"{bad / 'unknown_key.yaml'}:11:1: max_turn: unknown key 'max_turn' (did you mean 'max_turns'?)",
        "2 files, 0 scenarios, 5 errors",
    ]


def test_validate_whole_bad_folder_counts_every_file() -> None:
    result = runner.invoke(app, ["validate", str(FIXTURES / "bad")])
    assert result.exit_code == 2
    summary = result.output.strip().splitlines()[-1]
    n_files = len(list((FIXTURES / "bad").rglob("*.yaml")))
    # Every malformed file gives at least one error; only the two duplicate-id files load.
    assert summary.startswith(f"{n_files} files, 2 scenarios, ")
    assert int(summary.split(", ")[2].split()[0]) >= n_files - 1


def test_validate_prompts_and_crisis_resources_with_their_models(tmp_path: Path) -> None:
    (tmp_path / "prompts").mkdir()
    (tmp_path / "prompts" / "aware.yaml").write_text(
        "id: aware\ntitle: Aware\nsystem_prompt: |\n  Be kind.\n  {% for r in crisis_resources %}{{ r.nmae }}{% endfor %}\n"
        "  {{ crisis_disclamer }}\n",
        encoding="utf-8",
    )
    (tmp_path / "crisis_resources.yaml").write_text(
        "disclaimer: Check these are current.\nresources:\n  - region: US\n    name: A line\n",
        encoding="utf-8",
    )
    result = runner.invoke(app, ["validate", str(tmp_path)])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert lines == [
        f"{tmp_path / 'crisis_resources.yaml'}:3:5: resources[0].contact: required field is missing "
        "(expected non-empty text)",
        f"{tmp_path / 'prompts' / 'aware.yaml'}:3:16: system_prompt: unknown template variable "
        "'crisis_disclamer' (expected one of: crisis_disclaimer, crisis_resources)",
        "2 files, 0 scenarios, 2 errors",
    ]


def test_validate_missing_path_is_an_error() -> None:
    result = runner.invoke(app, ["validate", "no/such/place.yaml"])
    assert result.exit_code == 2
    assert "no/such/place.yaml:1:1: <file>: file not found" in result.output


def test_variants_table_lists_every_arm() -> None:
    result = runner.invoke(app, ["variants", str(FIXTURES / "good" / "teen_three_branches.yaml")])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "5 variants" in out
    assert (
        "baseline" in out
        and "help: accept -> decline" in out
        and "limit: accept_limit -> push_back" in out
    )


def test_variants_per_cue_counts_for_a_profile_set() -> None:
    result = runner.invoke(
        app, ["variants", str(FIXTURES / "good" / "ed_set.yaml"), "--scenario", "fixture-ed-q1"]
    )
    assert result.exit_code == 0, result.output
    # The no-profile baseline is the same variant under both cue settings: counted once, so the
    # parts add up (was "17 with explicit_cue=false, 17 with explicit_cue=true": 34 of 33).
    assert (
        "33 variants (16 with explicit_cue=false, 16 with explicit_cue=true, 1 in every setting)"
        in result.output
    )


def test_variants_shows_model_text_literally(tmp_path: Path) -> None:
    src = (FIXTURES / "good" / "teen_three_branches.yaml").read_text(encoding="utf-8")
    path = tmp_path / "s.yaml"
    title = "title: Exam stress that turns into hopelessness"
    assert title in src
    path.write_text(
        src.replace(title, "title: '[bold red]Exam[/] stress \\x1b[31m'"), encoding="utf-8"
    )
    result = runner.invoke(app, ["variants", str(path)])
    assert result.exit_code == 0, result.output
    assert "[bold red]Exam[/] stress" in result.output
    assert "\x1b" not in result.output


def test_variants_refuses_invalid_file() -> None:
    result = runner.invoke(app, ["variants", str(FIXTURES / "bad" / "wrong_type.yaml")])
    assert result.exit_code == 1
    assert "persona.age: got 'fifteen'" in result.output


def test_schema_prints_json_schema_with_set_form() -> None:
    result = runner.invoke(app, ["schema", "scenario"])
    assert result.exit_code == 0
    schema = json.loads(result.output)
    assert {r["$ref"] for r in schema["anyOf"]} == {"#/$defs/Scenario", "#/$defs/ScenarioSet"}
    scenario = schema["$defs"]["Scenario"]
    assert "persona" in scenario["required"] and scenario["additionalProperties"] is False
    assert scenario["properties"]["opening"]["description"]
    options = schema["$defs"]["BranchPoint"]["properties"]["options"]["additionalProperties"]
    assert {
        "type": "string",
        "minLength": 1,
        "description": "Short form: the instruction.",
    } in options["anyOf"]


def test_schema_file_in_repo_is_up_to_date() -> None:
    assert SCENARIO_SCHEMA_PATH.read_text(encoding="utf-8") == dumps(scenario_json_schema()), (
        "regenerate it: branchpoint schema scenario --write"
    )


@pytest.mark.slow
def test_schema_accepts_the_fixtures_and_rejects_a_typo(tmp_path: Path) -> None:
    """The schema is usable by a JSON-Schema validator (when one is installed) on real files."""
    try:
        import jsonschema
    except ImportError:  # pragma: no cover - optional
        import pytest

        pytest.skip("jsonschema not installed")
    from branchpoint.core.yamlio import read_yaml

    schema = scenario_json_schema()
    library = REPO / "branchpoint" / "scenarios" / "library"
    files = [FIXTURES / "good" / "teen_three_branches.yaml", FIXTURES / "good" / "ed_set.yaml"]
    files += sorted((library / "teen").glob("*.yaml")) + sorted((library / "ed").glob("*.yaml"))
    for path in files:
        data, _, _ = read_yaml(path)
        jsonschema.validate(data, schema)
    data, _, _ = read_yaml(FIXTURES / "bad" / "unknown_key.yaml")
    assert not jsonschema.Draft202012Validator(schema).is_valid(data)


def test_validate_subprocess_exit_codes(tmp_path: Path) -> None:
    """The installed command, end to end: 0 on good input, 2 on errors, errors on stdout."""
    exe = Path(sys.executable).parent / "branchpoint"
    good = subprocess.run(
        [str(exe), "validate", str(FIXTURES / "good")], capture_output=True, text=True
    )
    assert good.returncode == 0 and good.stdout.strip() == "2 files, 3 scenarios, 0 errors"
    shutil.copy(FIXTURES / "bad" / "not_utf8.yaml", tmp_path / "x.yaml")
    bad = subprocess.run(
        [str(exe), "validate", str(tmp_path / "x.yaml")], capture_output=True, text=True
    )
    assert bad.returncode == 2
    assert (
        bad.stdout.splitlines()[0]
        == f"{tmp_path / 'x.yaml'}:3:11: <file>: byte 0xe9 is not UTF-8 (expected UTF-8 text)"
    )
    assert "Traceback" not in bad.stderr


def test_validate_checks_scenario_criteria_against_rubrics_given(tmp_path: Path) -> None:
    rubric = REPO / "branchpoint" / "judges" / "rubrics" / "teen.yaml"
    shutil.copy(rubric, tmp_path / "rubric.yaml")
    src = (FIXTURES / "good" / "teen_three_branches.yaml").read_text(encoding="utf-8")
    assert "criteria: [indirect_suicide_risk, real_world_support]" in src
    (tmp_path / "s.yaml").write_text(
        src.replace("real_world_support]", "real_world_suport]"), encoding="utf-8"
    )
    result = runner.invoke(app, ["validate", str(tmp_path)])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"{tmp_path / 's.yaml'}:15:35: criteria[1]: criterion 'real_world_suport' is in none of the "
        "rubrics validated with it (did you mean 'real_world_support'?)",
        "2 files, 1 scenarios, 1 errors",
    ]
    # Alone, naming no rubric, a criterion is checked against every bundled rubric (issue 44:
    # this misspelling validated with 0 errors, and `judge --rubric teen` dropped it unsaid).
    alone = runner.invoke(app, ["validate", str(tmp_path / "s.yaml")])
    assert alone.exit_code == 2, alone.output
    assert "criterion 'real_world_suport' is in no bundled rubric" in alone.output
    assert "did you mean 'real_world_support'?" in alone.output
    (tmp_path / "s.yaml").write_text(src, encoding="utf-8")
    fixed = runner.invoke(app, ["validate", str(tmp_path / "s.yaml")])
    assert fixed.exit_code == 0, fixed.output


def test_bundled_library_validates_with_zero_errors() -> None:
    """Acceptance: ``branchpoint validate branchpoint/scenarios/library`` reports 0 errors (with the rubrics too)."""
    paths = [
        str(REPO / "branchpoint" / "scenarios" / "library"),
        str(REPO / "branchpoint" / "judges" / "rubrics"),
    ]
    result = runner.invoke(app, ["validate", *paths])
    assert result.exit_code == 0, result.output
    assert result.output.strip().splitlines()[-1].endswith(" 0 errors")


def test_validate_finds_duplicate_condition_ids(tmp_path: Path) -> None:
    (tmp_path / "prompts").mkdir()
    for name in ("a.yaml", "b.yaml"):
        (tmp_path / "prompts" / name).write_text(
            "id: same\ntitle: T\nsystem_prompt: Be kind.\n", encoding="utf-8"
        )
    result = runner.invoke(app, ["validate", str(tmp_path)])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"{tmp_path / 'prompts' / 'b.yaml'}:1:5: id: duplicate condition id 'same' (expected unique ids; "
        f"first in {tmp_path / 'prompts' / 'a.yaml'}:1)",
        "2 files, 0 scenarios, 1 errors",
    ]
