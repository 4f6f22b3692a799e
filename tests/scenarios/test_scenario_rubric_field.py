"""A scenario's `rubric:` field: validated against the rubrics given with it, resolved for judging."""

from __future__ import annotations

import shutil
from pathlib import Path

from typer.testing import CliRunner

from branchpoint.judges.scenario_rubrics import rubric_reference
from branchpoint.scenarios import load_scenario_file
from branchpoint.tui.cli import app

REPO = Path(__file__).resolve().parents[2]
GOOD = REPO / "tests" / "fixtures" / "good" / "teen_three_branches.yaml"


def _write(tmp_path: Path, rubric_line: str, criteria: str) -> Path:
    src = GOOD.read_text(encoding="utf-8")
    old = "criteria: [indirect_suicide_risk, real_world_support]"
    assert old in src
    path = tmp_path / "s.yaml"
    path.write_text(src.replace(old, f"{rubric_line}\ncriteria: {criteria}"), encoding="utf-8")
    return path


def _validate(*paths: Path) -> list[str]:
    result = CliRunner().invoke(app, ["validate", *map(str, paths)])
    return result.output.strip().splitlines()


def test_a_named_rubric_must_be_validated_with_it_and_hold_its_criteria(tmp_path: Path) -> None:
    rubrics = REPO / "branchpoint" / "judges" / "rubrics"
    ok = _write(tmp_path, "rubric: teen", "[indirect_suicide_risk, real_world_support]")
    assert _validate(ok, rubrics)[-1].endswith(" 0 errors")

    wrong = _write(tmp_path, "rubric: teen", "[indirect_suicide_risk, ed_body_focus]")
    out = _validate(wrong, rubrics)
    assert out[0] == (
        f"{wrong}:16:35: criteria[1]: criterion 'ed_body_focus' is not in rubric 'teen' "
        "(expected a criterion of the rubric the scenario names)"
    )
    assert out[-1].endswith(" 1 errors")

    unknown = _write(tmp_path, "rubric: tene", "[indirect_suicide_risk]")
    out = _validate(unknown, rubrics)
    assert out[0] == (
        f"{unknown}:15:9: rubric: rubric 'tene' is none of the rubrics validated with it "
        "(expected one of: ed, reasoning, teen, or a rubric YAML path)"
    )
    # Alone, the rubric it names is still looked up (bundled, or a file next to it), and its
    # criteria checked against it (issue 33: a misspelt id was dropped at judging unseen).
    assert _validate(unknown)[0] == (
        f"{unknown}:15:9: rubric: rubric 'tene' is no bundled rubric and no file (expected one "
        "of: ed, reasoning, teen, or a rubric YAML path relative to this file)"
    )
    out = _validate(_write(tmp_path, "rubric: teen", "[indirect_suicide_risk, real_world_suport]"))
    assert out[0].endswith(
        "criteria[1]: criterion 'real_world_suport' is not in rubric 'teen' (did you mean "
        "'real_world_support'?)"
    )


def test_rubric_reference_is_a_bundled_name_or_a_path_next_to_the_scenario(
    tmp_path: Path,
) -> None:
    bundled = _write(tmp_path, "rubric: teen", "[indirect_suicide_risk]")
    (s,), errors = load_scenario_file(bundled)
    assert errors == [] and rubric_reference(s) == "teen"

    (tmp_path / "mine").mkdir()
    shutil.copy(
        REPO / "branchpoint" / "judges" / "rubrics" / "teen.yaml", tmp_path / "mine" / "r.yaml"
    )
    local = _write(tmp_path, "rubric: mine/r.yaml", "[indirect_suicide_risk]")
    (s,), errors = load_scenario_file(local)
    assert errors == [] and rubric_reference(s) == str((tmp_path / "mine" / "r.yaml").resolve())
    assert rubric_reference(None) is None
