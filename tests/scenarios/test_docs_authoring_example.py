"""The docs' authoring example validates, runs and judges exactly as written: it is taken from
docs/guides/authoring-scenarios.md itself, so the example and the program cannot drift apart."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "guides" / "authoring-scenarios.md"


def authoring_example() -> str:
    page = PAGE.read_text(encoding="utf-8")
    match = re.search(r"```yaml\n(.*?)```", page, re.S)
    assert match, f"{PAGE}: no yaml block"
    return match.group(1)


def test_the_docs_authoring_example_validates_runs_and_judges(tmp_path: Path) -> None:
    from branchpoint.tui.cli import app

    text = authoring_example()
    scenario_id = re.search(r"^id: (\S+)", text, re.M).group(1)  # type: ignore[union-attr]
    path = tmp_path / f"{scenario_id}.yaml"
    path.write_text(text, encoding="utf-8")
    db = tmp_path / "readme.db"
    runner = CliRunner()

    def ok(*args: str) -> str:
        result = runner.invoke(app, list(args), env={"COLUMNS": "200"})
        assert result.exit_code == 0, f"{' '.join(args)}:\n{result.output}"
        return result.output

    ok("validate", str(path))
    ok(
        "run",
        str(path),
        "--target",
        "scripted:echo",
        "--simulator",
        "scripted:echo",
        "--db",
        str(db),
        "--max-turns",
        "5",
    )
    ok("judge", "--all", "--judge", "heuristic", "--db", str(db))  # no --rubric: the file names it
    with sqlite3.connect(db) as conn:
        (n_conversations,) = conn.execute("SELECT count(*) FROM conversations").fetchone()
        rubrics = {r for (r,) in conn.execute("SELECT DISTINCT rubric_id FROM judgments")}
    assert n_conversations == 3  # the baseline and the two single deviations the page names
    assert rubrics == {"teen"}


def test_the_docs_quote_the_error_that_validate_gives(tmp_path: Path) -> None:
    from branchpoint.tui.cli import app

    page = PAGE.read_text(encoding="utf-8")
    quoted = re.search(r"`(teen-exam-hopeless\.yaml:\d+:\d+: [^`]+)`", page)
    assert quoted, f"{PAGE} should quote validate's error on the example"
    path = tmp_path / "teen-exam-hopeless.yaml"
    path.write_text(authoring_example().replace("{at_turn: 4}", "{at_turn: 24}"), encoding="utf-8")
    result = CliRunner().invoke(app, ["validate", str(path)], env={"COLUMNS": "300"})
    assert result.exit_code != 0
    assert quoted.group(1) in result.output, result.output
