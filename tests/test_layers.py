"""The architecture holds: one-way layers, no import cycles, the public APIs under the type checker.

The layers contract lives in pyproject.toml ([tool.importlinter]); these tests run the real
``lint-imports`` on the project and on a copy with a deliberate upward import, and build the real
import graph with grimp (which import-linter uses), counting imports inside functions and under
TYPE_CHECKING.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
ROOT_PACKAGE: str = PYPROJECT["tool"]["importlinter"]["root_package"]
# the layers contract names every subpackage of the root, siblings joined by " | "
PACKAGES: list[str] = [
    name.strip()
    for layer in PYPROJECT["tool"]["importlinter"]["contracts"][0]["layers"]
    for name in layer.split("|")
]
LAYERS_CONTRACT: str = PYPROJECT["tool"]["importlinter"]["contracts"][0]["name"]
JUDGES_CONTRACT: str = PYPROJECT["tool"]["importlinter"]["contracts"][1]["name"]

# The file cycles that issue 9 broke; named so that a regression says which one came back.
BROKEN_CYCLES = [
    ("branchpoint.scenarios.checks", "branchpoint.scenarios.models"),
    ("branchpoint.simulator.graph", "branchpoint.simulator.tree"),
    ("branchpoint.core.migrations", "branchpoint.core.store"),
    ("branchpoint.core.read.source", "branchpoint.core.judgment_summaries"),
    ("branchpoint.analysis.tables.judgments", "branchpoint.analysis.pairing.fork_summaries"),
]


def _lint_imports() -> str:
    found = Path(sys.executable).parent / "lint-imports"
    exe = str(found) if found.exists() else shutil.which("lint-imports")
    assert exe, "lint-imports is not installed (it is in the [test] extra of pyproject.toml)"
    return exe


def _run_lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    # PYTHONPATH puts ``root``'s packages ahead of the editable install, so grimp reads that tree.
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [_lint_imports(), "--no-cache", "--no-logo", str(root / "pyproject.toml")],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _copy_packages(dest: Path) -> None:
    """The project's packages (Python files only: that is all the import graph reads)."""

    def not_python(folder: str, names: list[str]) -> list[str]:
        return [
            n
            for n in names
            if n == "__pycache__" or not (n.endswith(".py") or (Path(folder) / n).is_dir())
        ]

    shutil.copytree(ROOT / ROOT_PACKAGE, dest / ROOT_PACKAGE, ignore=not_python)
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")


def test_the_project_keeps_its_layers_contract() -> None:
    result = _run_lint_imports(ROOT)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert f"{LAYERS_CONTRACT} KEPT" in output
    assert f"{JUDGES_CONTRACT} KEPT" in output
    assert "2 kept, 0 broken" in output


def test_an_upward_import_breaks_the_contract(tmp_path: Path) -> None:
    _copy_packages(tmp_path)
    errors = tmp_path / ROOT_PACKAGE / "core" / "errors.py"
    # Inside a function: a lazy import is still an import of the top layer from the base.
    errors.write_text(
        errors.read_text(encoding="utf-8")
        + "\n\ndef _reach_up() -> None:\n    import branchpoint.tui.cli  # noqa: F401\n",
        encoding="utf-8",
    )
    result = _run_lint_imports(tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert f"{LAYERS_CONTRACT} BROKEN" in output
    assert "branchpoint.core is not allowed to import branchpoint.tui" in output
    assert "branchpoint.core.errors -> branchpoint.tui.cli" in output


def _reach(tmp_path: Path, module: str, target: str) -> str:
    """lint-imports' output on a copy where ``module`` imports ``target`` inside a function."""
    _copy_packages(tmp_path)
    path = tmp_path.joinpath(*module.split(".")).with_suffix(".py")
    path.write_text(
        path.read_text(encoding="utf-8")
        + f"\n\ndef _reach() -> None:\n    import {target}  # noqa: F401\n",
        encoding="utf-8",
    )
    result = _run_lint_imports(tmp_path)
    assert result.returncode != 0, result.stdout + result.stderr
    return result.stdout + result.stderr


def test_a_judge_that_imports_the_engine_breaks_its_contract(tmp_path: Path) -> None:
    # judges sit above simulator in the layers, so only the forbidden contract catches this
    output = _reach(tmp_path, "branchpoint.judges.llm_judge", "branchpoint.simulator.graph")
    assert f"{JUDGES_CONTRACT} BROKEN" in output
    assert f"{LAYERS_CONTRACT} KEPT" in output


@pytest.mark.parametrize(
    ("module", "target"),
    [
        ("branchpoint.analysis.outcomes.rates", "branchpoint.study.plan"),
        ("branchpoint.gateway.cache", "branchpoint.scenarios.loader"),
    ],
)
def test_siblings_of_one_layer_import_neither_way(tmp_path: Path, module: str, target: str) -> None:
    output = _reach(tmp_path, module, target)
    assert f"{LAYERS_CONTRACT} BROKEN" in output


def _graph() -> grimp.ImportGraph:
    # grimp counts every import statement, those in functions and under TYPE_CHECKING included.
    return grimp.build_graph(ROOT_PACKAGE, cache_dir=None)


def _cycles(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_cycle_finder_finds_a_cycle_and_only_the_cycle() -> None:
    edges = {"a": ["b"], "b": ["c"], "c": ["a", "d"], "d": [], "e": ["e"]}
    assert _cycles(edges) == [["a", "b", "c"]]


def test_no_module_imports_itself_back() -> None:
    graph = _graph()
    edges = {m: graph.find_modules_directly_imported_by(m) for m in graph.modules}
    # The graph is the real one: TYPE_CHECKING-only imports (core's lazy API) are in it.
    assert "branchpoint.core.store" in edges["branchpoint.core"]
    cycles = _cycles(edges)
    details = [
        f"{' <-> '.join(c)}: "
        + "; ".join(
            f"{d['importer']}:{d['line_number']} {d['line_contents']}"
            for a in c
            for b in c
            if b in edges[a]
            for d in graph.get_import_details(importer=a, imported=b)
        )
        for c in cycles
    ]
    assert not cycles, "import cycles:\n" + "\n".join(details)


@pytest.mark.parametrize(("one", "other"), BROKEN_CYCLES)
def test_a_broken_file_cycle_stays_broken(one: str, other: str) -> None:
    graph = _graph()
    assert one in graph.modules and other in graph.modules
    there = graph.find_shortest_chain(importer=one, imported=other)
    back = graph.find_shortest_chain(importer=other, imported=one)
    assert there is None or back is None, f"{one} and {other} import each other: {there} / {back}"


def _exported_modules() -> set[str]:
    """Each package's __init__ (the root's, the front door, too) and the modules its lazy
    _EXPORTS table points at."""
    out: set[str] = set()
    for folder in [ROOT / ROOT_PACKAGE] + [ROOT / ROOT_PACKAGE / p for p in PACKAGES]:
        init = folder / "__init__.py"
        out.add(init.relative_to(ROOT).as_posix())
        for node in ast.walk(ast.parse(init.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in node.targets
            ):
                for module in ast.literal_eval(node.value).values():
                    path = module.replace(".", "/")
                    is_package = (ROOT / path).is_dir()
                    out.add(f"{path}/__init__.py" if is_package else f"{path}.py")
    return out


def test_the_type_checker_covers_the_base_layer_and_every_public_api() -> None:
    scope: list[str] = PYPROJECT["tool"]["mypy"]["files"]
    assert "branchpoint/core" in scope

    def covered(path: str) -> bool:
        return any(path == s or path.startswith(s.rstrip("/") + "/") for s in scope)

    missing = sorted(p for p in _exported_modules() if not covered(p))
    assert not missing, f"add to [tool.mypy] files in pyproject.toml: {missing}"
    absent = sorted(s for s in scope if not (ROOT / s).exists())
    assert not absent, f"[tool.mypy] files names paths that do not exist: {absent}"
