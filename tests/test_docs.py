"""The docs and the README stay true to the code: every command has a section in the generated CLI
reference, the format pages carry every field of their schemas, the README's links resolve, and
its manifest plans and runs as written. `make test` also builds the site with
`mkdocs build --strict`, which fails on a broken link or a page that does not generate."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def gen_reference() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_reference", ROOT / "docs" / "gen_reference.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_reference"] = module
    spec.loader.exec_module(module)
    return module


def help_of(*words: str) -> str:
    from branchpoint.tui.cli import app

    result = CliRunner().invoke(app, [*words, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    return result.output


def commands_in(help_text: str) -> list[str]:
    """The names under 'Commands:' in click's --help."""
    if "Commands:" not in help_text:
        return []
    block = help_text.split("Commands:", 1)[1]
    return [
        line.split()[0] for line in block.splitlines() if line.startswith("  ") and line.strip()
    ]


def every_command() -> list[tuple[str, ...]]:
    found: list[tuple[str, ...]] = []
    todo: list[tuple[str, ...]] = [()]
    while todo:
        path = todo.pop()
        for name in commands_in(help_of(*path)):
            found.append((*path, name))
            todo.append((*path, name))
    return sorted(found)


@pytest.mark.slow  # over 2 s: make test runs it, test-fast does not
def test_every_command_and_option_has_its_place_in_the_cli_reference() -> None:
    page = gen_reference().cli_markdown()
    commands = every_command()
    assert ("run",) in commands and ("runs", "rm") in commands and ("import", "kora") in commands
    sections = dict(
        re.findall(r"^## `branchpoint ([^`]+)` \{#[^}]+\}\n(.*?)(?=^## |\Z)", page, re.M | re.S)
    )
    for words in commands:
        name = " ".join(words)
        assert name in sections, f"no section for `branchpoint {name}` in the CLI reference"
        options = set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]+)", help_of(*words))) - {"--help"}
        missing = {o for o in options if o not in sections[name]}
        assert not missing, f"`branchpoint {name}`: options missing from its section: {missing}"


@pytest.mark.parametrize("kind", ["scenario", "sweep", "rubric", "transcript"])
def test_each_format_page_names_every_field_of_its_schema(kind: str) -> None:
    module = gen_reference()
    page = next(f for f in module.FORMATS if f[0] == kind)
    text = module.format_markdown(page[0], page[2], page[3])
    schema = json.loads(_schema(kind))
    objects = [schema, *schema.get("$defs", {}).values()]
    for obj in objects:
        for key in obj.get("properties", {}):
            assert f"| `{key}` |" in text, f"{kind}: field {key!r} missing from its page"


def _schema(kind: str) -> str:
    from branchpoint.tui.cli import app

    result = CliRunner().invoke(app, ["schema", kind])
    assert result.exit_code == 0, result.output
    return result.output


def test_the_readme_is_short_starts_with_the_two_commands_and_its_links_resolve() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines (at most 150)"
    top = "\n".join(lines[:40])
    assert "make demo" in top and "make test" in top
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", "\n".join(lines)):
        if "://" not in target:
            assert (ROOT / target).is_file(), f"README.md links to {target}, which does not exist"


def readme_manifest() -> str:
    text = README.read_text(encoding="utf-8")
    match = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert match, "README.md: no manifest"
    return match.group(1)


def manifest_here(tmp_path: Path, api_base: str | None = None) -> Path:
    """The README's manifest in a folder that, like the repository root, holds branchpoint/."""
    (tmp_path / "branchpoint").symlink_to(ROOT / "branchpoint", target_is_directory=True)
    text = readme_manifest()
    if api_base:
        text = text.replace("http://127.0.0.1:8765/v1", api_base)
    path = tmp_path / "study.yaml"
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.slow  # imports the study layer and plans: about 2.5 s on a quiet 2-core machine
def test_the_readme_manifest_is_fifteen_lines_and_plans(tmp_path: Path) -> None:
    from branchpoint.study import plan_study

    assert len(readme_manifest().splitlines()) <= 15
    plan = plan_study(manifest_here(tmp_path), db=str(tmp_path / "study.db"))
    lines = plan.lines()
    assert lines[0].startswith("sweep first-study: 28 cells (0 done, 28 to do)"), lines[0]
    assert any(line.startswith("USD: 0.00 / 0.00 / 0.00") for line in lines), lines


@pytest.mark.slow
def test_the_readme_manifest_runs_against_the_loopback_server(tmp_path: Path) -> None:
    from branchpoint.gateway.testing.openai_server import ServerThread
    from branchpoint.study import plan_study, run_study

    server = ServerThread(model="scripted:echo")
    api_base = server.start()
    try:
        plan = plan_study(manifest_here(tmp_path, api_base), db=str(tmp_path / "study.db"))
        result = run_study(plan)
    finally:
        server.stop()
    assert result.ok
