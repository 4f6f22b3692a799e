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
from fixtures.typed_user_script import run_mypy_on_user_script

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


@pytest.mark.slow
def test_a_type_checker_sees_real_types_through_the_front_door(tmp_path: Path) -> None:
    # the checkout, as a source tree on MYPYPATH (the installed wheel's py.typed is checked in
    # tests/test_wheel.py)
    env = {**os.environ, "MYPYPATH": str(ROOT)}
    run_mypy_on_user_script(tmp_path, env, sys.executable)
