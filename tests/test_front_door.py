"""``import branchpoint`` is the front door a notebook uses: its names are real (typed for a checker,
importable at run time), and importing it stays light.

Every package serves its names from a lazy ``_EXPORTS`` map; the ``if TYPE_CHECKING:`` imports
beside each map are what a type checker sees, so the two must name the same things.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import branchpoint

ROOT = Path(__file__).resolve().parents[1]
LAZY_PACKAGES = sorted(
    p
    for p in (ROOT / "branchpoint").rglob("__init__.py")
    if "_EXPORTS = {" in p.read_text(encoding="utf-8")
)


def _exports_and_checked_imports(init: Path) -> tuple[dict[str, str], dict[str, str]]:
    tree = ast.parse(init.read_text(encoding="utf-8"))
    exports: dict[str, str] = {}
    checked: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in node.targets
        ):
            exports = ast.literal_eval(node.value)
        if (
            isinstance(node, ast.If)
            and isinstance(node.test, ast.Name)
            and node.test.id == "TYPE_CHECKING"
        ):
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom) and stmt.module, ast.dump(stmt)
                for alias in stmt.names:
                    checked[alias.asname or alias.name] = stmt.module
    return exports, checked


def test_the_root_and_the_lazy_packages_are_found() -> None:
    names = {str(p.relative_to(ROOT)) for p in LAZY_PACKAGES}
    assert {"branchpoint/__init__.py", "branchpoint/study/__init__.py"} <= names


@pytest.mark.parametrize("init", LAZY_PACKAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_lazy_name_is_typed_for_checkers(init: Path) -> None:
    exports, checked = _exports_and_checked_imports(init)
    assert exports, f"{init}: no _EXPORTS"
    missing = sorted(f"{n} (from {m})" for n, m in exports.items() if checked.get(n) != m)
    extra = sorted(n for n in checked if n not in exports)
    assert not missing, f"{init}: add under `if TYPE_CHECKING:` the imports of {missing}"
    assert not extra, f"{init}: imported for checkers but not in _EXPORTS: {extra}"


def test_the_front_door_serves_every_name_it_lists() -> None:
    assert sorted(branchpoint.__all__) == branchpoint.__all__
    for name in ("plan_study", "run_study", "arun_study", "open_store", "judge_run"):
        assert name in branchpoint.__all__
    for name in branchpoint.__all__:
        value = getattr(branchpoint, name)
        if callable(value) and hasattr(value, "__module__"):
            assert value.__module__.startswith("branchpoint."), (name, value.__module__)
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        branchpoint.nothing_here  # noqa: B018


def test_importing_branchpoint_loads_no_heavy_library() -> None:
    code = (
        "import sys, branchpoint\n"
        "heavy = ('pandas', 'numpy', 'litellm', 'torch', 'sqlalchemy', 'pydantic', 'jinja2')\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
        "print(sorted(m for m in sys.modules if m.startswith('branchpoint')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout.splitlines()
    assert out[0] == "[]", out
    assert out[1] == "['branchpoint', 'branchpoint.core', 'branchpoint.core.lazy']", out


USER_SCRIPT = """\
from branchpoint import arun_study, judge_run, open_store, plan_study, run_study

plan = plan_study("study.yaml")
reveal_type(plan)
result = run_study(plan)
reveal_type(result)
reveal_type(arun_study)
reveal_type(open_store)
summary = judge_run("run-1", db="results.db", judges=["heuristic"])
reveal_type(summary)
judge_run("run-1", judgse=["heuristic"])  # type: ignore[call-arg]
ok: bool = result.ok
lines: list[str] = plan.lines()
"""


def run_mypy_on_user_script(folder: Path, env: dict[str, str], python: str) -> str:
    """mypy on a notebook-like script that calls the front door; ``--disallow-any-expr`` makes
    any expression of type Any in it an error, and ``--warn-unused-ignores`` fails the run if the
    misspelt keyword is not caught. Returns mypy's output (it must pass)."""
    script = folder / "user_script.py"
    script.write_text(USER_SCRIPT, encoding="utf-8")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--python-executable",
            python,
            "--no-incremental",
            "--follow-imports=silent",
            "--disallow-any-expr",
            "--warn-unused-ignores",
            "--config-file",
            os.devnull,
            str(script),
        ],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert 'Revealed type is "branchpoint.study.api.StudyPlan"' in output, output
    assert 'Revealed type is "branchpoint.study.api.StudyResult"' in output, output
    assert "def (plan: branchpoint.study.api.StudyPlan" in output, output
    assert "branchpoint.core.store.Store" in output, output
    assert 'Revealed type is "branchpoint.judges.runner.JudgeSummary"' in output, output
    return output


@pytest.mark.slow
def test_a_type_checker_sees_real_types_through_the_front_door(tmp_path: Path) -> None:
    # the checkout, as a source tree on MYPYPATH (the installed wheel's py.typed is checked in
    # tests/test_wheel.py)
    env = {**os.environ, "MYPYPATH": str(ROOT)}
    run_mypy_on_user_script(tmp_path, env, sys.executable)
