"""20 malformed manifests and 10 malformed scenarios: each reports all its problems in one run,
one positioned line each (``FILE:LINE:COL: field: ...``), exit 2, no traceback.

Each fixture ends with comments naming its problems (``# expect: LINE:COL FIELD``): a manifest's
schema errors come with those of the files, globs, rubrics and variants it names
(``branchpoint.study.manifest_checks``), and a scenario's schema errors with its cross-field and rubric
checks (``branchpoint.scenarios.partial``), which used to wait until the schema errors were fixed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from branchpoint.tui.cli import app

MALFORMED = Path(__file__).resolve().parents[1] / "fixtures" / "malformed"
MANIFESTS = sorted((MALFORMED / "manifests").glob("*.yaml"))
SCENARIOS = sorted((MALFORMED / "scenarios").glob("*.yaml"))
LINE = re.compile(r"^(?P<path>.+?):(?P<line>\d+):(?P<col>\d+): (?P<field>\S+): \S.*$")
runner = CliRunner()


def _expected(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8")
    return re.findall(r"^# expect: (\d+:\d+ \S+)$", text, flags=re.MULTILINE)


def test_twenty_manifests_and_ten_scenarios() -> None:
    assert (len(MANIFESTS), len(SCENARIOS)) == (20, 10)


@pytest.mark.parametrize(
    ("command", "path"),
    [("sweep", p) for p in MANIFESTS] + [("validate", p) for p in SCENARIOS],
    ids=lambda v: v.name if isinstance(v, Path) else v,
)
def test_every_problem_at_once_one_positioned_line_each(command: str, path: Path) -> None:
    args = ["sweep", "--plan", str(path)] if command == "sweep" else ["validate", str(path)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit), result.exception  # no traceback
    assert "Traceback" not in result.output
    lines = [
        ln for ln in result.output.splitlines() if ln.strip() and not re.match(r"^\d+ files, ", ln)
    ]
    found = []
    for line in lines:
        match = LINE.match(line)
        assert match, f"not one positioned line: {line!r}"
        assert match["path"] == str(path), line
        found.append(f"{match['line']}:{match['col']} {match['field']}")
    expected = _expected(path)
    assert len(expected) >= 2 or path.name == "misspelt_criteria.yaml", "a fixture of one error"
    assert found == expected
