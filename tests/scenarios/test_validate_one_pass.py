"""Every input error of a scenario in one pass of ``validate`` (issue 44, item 6).

A library scenario with four mistakes (a misspelt criterion, an unknown key, a baseline that is no
option, a stage past ``max_turns``) got two lines; the other two appeared only once the first
were fixed, because a bad baseline failed the whole partial re-validation. An empty folder said
"0 errors" and exited 0.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from branchpoint.tui.cli import app

REPO = Path(__file__).resolve().parents[2]
LIBRARY_FILE = (
    REPO
    / "branchpoint"
    / "scenarios"
    / "library"
    / "teen"
    / "teen-ah-drunk-friend-buenos-aires.yaml"
)
runner = CliRunner(env={"COLUMNS": "200"})


def _four_mistakes(tmp_path: Path, *, keep_rubric: bool) -> Path:
    text = LIBRARY_FILE.read_text(encoding="utf-8")
    edits = [
        ("  - substance_misuse\n", "  - substance_missuse\n"),
        ("max_turns: 20\n", "max_turns: 20\nfavourite_colour: blue\n"),
        ("    baseline: accept\n", "    baseline: acept\n"),
        ("    until_turn: 20\n", "    until_turn: 25\n"),
    ]
    if not keep_rubric:
        edits.append(("rubric: teen\n", ""))
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    folder = tmp_path / "scenarios"
    folder.mkdir()
    (folder / "four.yaml").write_text(text, encoding="utf-8")
    return folder


@pytest.mark.parametrize("keep_rubric", [True, False], ids=["rubric-named", "no-rubric"])
def test_four_mistakes_give_four_lines_in_one_pass(tmp_path: Path, keep_rubric: bool) -> None:
    folder = _four_mistakes(tmp_path, keep_rubric=keep_rubric)
    result = runner.invoke(app, ["validate", str(folder)])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert lines[-1] == "1 files, 0 scenarios, 4 errors"
    fields = [line.split(": ", 2)[1] for line in lines[:-1]]
    assert fields == [
        "favourite_colour",
        "criteria[1]",
        "stages[2].until_turn",
        "branch_points[1].baseline",
    ]
    assert "did you mean 'substance_misuse'?" in lines[1]
    assert "'acept' is not one of the options" in lines[3]


def test_a_bad_baseline_is_still_refused_when_built_in_code() -> None:
    from pydantic import ValidationError

    from branchpoint.scenarios.parts import BranchPoint

    with pytest.raises(ValidationError, match="is not one of the options"):
        BranchPoint.model_validate(
            {
                "id": "help",
                "kind": "help_offer",
                "trigger": {"at_turn": 2},
                "baseline": "acept",
                "options": {"accept": "ok", "decline": "no"},
            }
        )


def test_an_empty_folder_is_an_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = runner.invoke(app, ["validate", str(empty)])
    assert result.exit_code == 2, result.output
    assert "no *.yaml or *.yml files in this folder" in result.output
    assert result.output.strip().splitlines()[-1] == "0 files, 0 scenarios, 1 errors"
