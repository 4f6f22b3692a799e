"""The package a lab installs works outside the repository.

The wheel is built from a copy of the sources (no network: the shared environment's setuptools,
no build isolation), installed into a new virtual environment, and used from an empty folder, as
a lab would after ``pip install branchpoint``: ``validate`` on the bundled library, ``run``
against the loopback server, ``judge``, ``report``, ``schema``, ``tui --help``, the Python API and
a type checker reading the installed package. The new environment sees the test environment's
installed dependencies (a .pth file), but not the checkout, and not its editable install (whose
import hook is in a .pth file of that environment, which Python does not read from there).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from fixtures.typed_user_script import run_mypy_on_user_script

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

# what the test process may have set that would hide a fault of the installed package
CLEARED = (
    "PYTHONPATH",
    "BRANCHPOINT_PLUGINS",
    "BRANCHPOINT_DB",
    "LITELLM_LOCAL_MODEL_COST_MAP",
    "HF_HUB_OFFLINE",
    "TRANSFORMERS_OFFLINE",
)


def _run(args: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{' '.join(args)} -> {result.returncode}\n{output}"
    return output


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built from a copy of what a source distribution holds (the checkout's build/
    and egg-info stay untouched)."""
    base = tmp_path_factory.mktemp("wheel")
    src = base / "src"
    src.mkdir()
    shutil.copytree(
        ROOT / "branchpoint", src / "branchpoint", ignore=shutil.ignore_patterns("__pycache__")
    )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "-q", "-w", str(base / "dist"), str(src)],
        cwd=base, env=dict(os.environ),
    )  # fmt: skip
    (found,) = (base / "dist").glob("branchpoint-*.whl")
    return found


def test_the_wheel_holds_one_top_level_package_and_every_file_the_code_reads(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/", 1)[0] for n in names}
    (info,) = (t for t in top if t.endswith(".dist-info"))
    assert top == {"branchpoint", info}
    assert info.startswith("branchpoint-")
    # every file of the package, data included (the scenario library, rubrics, prompts, persona
    # rules, templates, schemas, py.typed): a file type left out of package-data shows up here
    source = {
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "branchpoint").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    missing = sorted(source - set(names))
    assert not missing, f"not in the wheel (add to [tool.setuptools.package-data]): {missing}"
    for needed in (
        "branchpoint/py.typed",
        "branchpoint/scenarios/library/teen/teen-ah-rail-bridge-jump.yaml",
        "branchpoint/judges/rubrics/teen.yaml",
    ):
        assert needed in names


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A new venv holding the wheel, and the environment to run its commands in."""
    venv = tmp_path_factory.mktemp("venv") / "env"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=venv.parent, env={})
    python = venv / "bin" / "python"
    site = Path(
        _run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            cwd=venv.parent,
            env={},
        ).strip()
    )
    # the test environment's dependencies, after the venv's own site-packages
    (site / "test-env-dependencies.pth").write_text(
        sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8"
    )
    # --ignore-installed: never touch the test environment's (editable) branchpoint
    _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
         "--no-index", "--ignore-installed", "-q", str(wheel)],
        cwd=venv.parent, env=dict(os.environ),
    )  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in CLEARED}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["COLUMNS"] = "200"
    return venv, env


def test_the_installed_package_works_from_an_empty_folder(
    installed: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    venv, env = installed
    python = str(venv / "bin" / "python")
    cli = str(venv / "bin" / "branchpoint")
    work = tmp_path / "empty"
    work.mkdir()

    where = json.loads(
        _run(
            [
                python,
                "-c",
                "import json, branchpoint, sys; "
                "print(json.dumps([branchpoint.__file__, str(branchpoint.LIBRARY), sys.path]))",
            ],
            work,
            env,
        )  # fmt: skip
    )
    package_file, library, path = where
    assert package_file.startswith(str(venv)), package_file
    assert library.startswith(str(venv)), library
    assert not any(p and Path(p).resolve() == ROOT for p in path), path

    validated = _run([cli, "validate", library], work, env)
    counted = re.search(r"(\d+) files, (\d+) scenarios, 0 errors", validated)
    assert counted and int(counted.group(2)) > 0, validated
    assert "schema" in _run([cli, "schema", "scenario"], work, env)
    assert "Usage: branchpoint tui" in _run([cli, "tui", "--help"], work, env)

    server = subprocess.Popen(
        [python, "-m", "branchpoint.gateway.testing.openai_server", "--port", "0"],
        cwd=work, env=env, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        url = server.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), url
        scenario = f"{library}/teen/teen-ah-rail-bridge-jump.yaml"
        ran = _run(
            [cli, "run", scenario, "--max-turns", "2", "--run-id", "wheel",
             "--target", "oai:target", "--target-param", f"api_base={url}",
             "--simulator", "oai:persona", "--simulator-param", f"api_base={url}"],
            work, env,
        )  # fmt: skip
        assert "run wheel:" in ran, ran
        judged = _run([cli, "judge", "wheel", "--judge", "heuristic"], work, env)
        written = re.search(r"(\d+) verdict row\(s\) written, 0 error\(s\)", judged)
        assert written and int(written.group(1)) > 0, judged
        _run([cli, "report", "wheel", "--n-boot", "0"], work, env)
        assert (work / "report" / "report.md").stat().st_size > 0
        assert (work / "report" / "report.html").stat().st_size > 0

        # the Python API: a study from a manifest, in the same folder
        (work / "study.yaml").write_text(
            json.dumps(
                {
                    "name": "wheel-study",
                    "scenarios": {"paths": [scenario]},
                    "targets": [{"spec": "oai:target", "params": {"api_base": url}}],
                    "simulators": ["oai:persona"],
                    "simulator_params": {"api_base": url},
                    "judges": [{"spec": "heuristic", "rubrics": ["teen"], "when": "live"}],
                    "max_exchanges": 2,
                    "store": "study.db",
                }
            ),
            encoding="utf-8",
        )
        api = _run(
            [python, "-c", "from branchpoint import plan_study, run_study\n"
             "plan = plan_study('study.yaml')\nresult = run_study(plan)\n"
             "print('api', result.ok, result.sweep.conversations, result.judging.rows)"],
            work, env,
        )  # fmt: skip
    finally:
        server.kill()
        server.wait()
    line = next(x for x in api.splitlines() if x.startswith("api "))
    _, ok, conversations, rows = line.split()
    assert ok == "True" and int(conversations) > 0 and int(rows) > 0, api
    # what the commands wrote is in the empty folder, nothing in the checkout
    assert {p.name for p in work.iterdir()} >= {
        "branchpoint.db",
        "report",
        "study.yaml",
        "study.db",
    }


def test_a_type_checker_reads_the_installed_package(
    installed: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    # py.typed in the wheel: mypy takes the installed package's annotations (PEP 561)
    venv, env = installed
    run_mypy_on_user_script(tmp_path, env, str(venv / "bin" / "python"))
