"""Hostile input: YAML bombs, huge and deeply nested files, templates that reach for internals.

The bounds (branchpoint/core/yaml_limits.py) are tested through the real loader and, for the attacks that
used to run for minutes, through the installed ``branchpoint validate`` in a subprocess whose
CPU time and peak memory are measured with ``os.wait4`` (in a small launcher process).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from branchpoint.core.templates import TemplateRenderError, render
from branchpoint.core.yaml_limits import (
    MAX_ALIAS_TEXT,
    MAX_ALIASES,
    MAX_DEPTH,
    MAX_FILE_BYTES,
)
from branchpoint.core.yamlio import parse_yaml, read_text
from branchpoint.scenarios.checks import template_context
from branchpoint.scenarios.conditions import load_condition_file
from branchpoint.scenarios.loader import load_scenarios
from branchpoint.scenarios.variants import template_context as run_time_context

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
BAD = FIXTURES / "bad"
GOOD = FIXTURES / "good"
LIBRARY = Path(__file__).resolve().parents[2] / "branchpoint" / "scenarios" / "library"
EXE = Path(sys.executable).parent / "branchpoint"

# The acceptance bounds of one hostile file are 1 s of CPU and 200 MB, start-up of the command
# included; benchmarks/hostile_yaml.py measures them. The start-up alone (a plain file) takes
# 0.6-0.8 s of CPU on a slow 2-core host, too close to 1 s for a test, so the test bounds what the
# attack costs beyond it: an unbounded parse took minutes.
ATTACK_CPU_SECONDS = 0.5
PEAK_BYTES = 200 * 2**20
DEEP = (
    f"nested more than {MAX_DEPTH} levels deep (expected at most {MAX_DEPTH} levels of lists "
    "and mappings)"
)


@dataclass
class Measured:
    returncode: int
    stdout: str
    stderr: str
    cpu_s: float
    peak_bytes: int
    wall_s: float


# A small launcher spawns the command and reports its rusage. Measured straight from this
# process, the child's peak RSS would include the pages it inherited from the fork of this (by
# then large) test process: Linux keeps that high-water mark across exec.
_LAUNCHER = """
import json, os, subprocess, sys
child = subprocess.Popen(sys.argv[2:])
_, status, use = os.wait4(child.pid, 0)
with open(sys.argv[1], "w") as f:
    json.dump([os.waitstatus_to_exitcode(status), use.ru_utime + use.ru_stime, use.ru_maxrss], f)
"""


def _measure(*args: str, timeout: float = 60.0) -> Measured:
    """Run ``args``; its own CPU time and peak RSS come from ``wait4`` on that one process."""
    import json
    import signal
    import tempfile

    with tempfile.NamedTemporaryFile("r", suffix=".json") as report:
        start = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-c", _LAUNCHER, report.name, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            pytest.fail(f"{' '.join(args)} ran past {timeout} s")
        wall = time.monotonic() - start
        returncode, cpu_s, maxrss_kib = json.loads(report.read())
    return Measured(returncode, out, err, cpu_s, maxrss_kib * 1024, wall)


@pytest.fixture(scope="module")
def start_up() -> Measured:
    """The command on a plain file: its start-up cost. Run twice, so that compiling the package's
    bytecode is billed to neither the start-up nor an attack."""
    _measure(str(EXE), "validate", str(GOOD / "teen_three_branches.yaml"))
    return _measure(str(EXE), "validate", str(GOOD / "teen_three_branches.yaml"))


def _validate_one_line(path: Path, start_up: Measured) -> tuple[str, Measured]:
    run = _measure(str(EXE), "validate", str(path))
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr
    lines = run.stdout.strip().splitlines()
    assert lines[1:] == ["1 files, 0 scenarios, 1 errors"], run.stdout
    assert run.cpu_s < start_up.cpu_s + ATTACK_CPU_SECONDS, (
        f"{path.name}: {run.cpu_s:.2f} s of CPU, {start_up.cpu_s:.2f} s for a plain file"
    )
    assert run.peak_bytes < PEAK_BYTES, f"{path.name}: peak {run.peak_bytes / 2**20:.0f} MiB"
    return lines[0], run


def test_alias_bomb_is_one_line_fast_and_small(start_up: Measured) -> None:
    path = BAD / "alias_bomb.yaml"
    line, _ = _validate_one_line(path, start_up)
    assert line == (
        f"{path}:8:8: f[0]: alias *e: aliases copy 141148 values so far "
        "(expected at most 100000 per file)"
    )


def test_fifty_megabyte_file_is_refused_before_reading(tmp_path: Path, start_up: Measured) -> None:
    path = tmp_path / "big.yaml"
    chunk = b"- lol lol lol lol lol lol lol lol lol lol lol lol lol\n" * 1024
    with path.open("wb") as f:
        while f.tell() < 50 * 2**20:
            f.write(chunk)
    size = path.stat().st_size
    line, _ = _validate_one_line(path, start_up)
    assert line == (
        f"{path}:1:1: <file>: file is {size} bytes (expected at most {MAX_FILE_BYTES} bytes, 5 MiB)"
    )


@pytest.mark.parametrize(
    ("text", "where"),
    [
        # Flow style on one line: the scanner stops it (it would look 1024 characters ahead).
        ("x: " + "[" * 10_000 + "]" * 10_000 + "\n", "1:104: <yaml>: '['"),
        # Block style: the composer stops it, with the path down to it.
        ("x:\n" + "- " * 10_000 + "deep\n", "2:199: x[0][0][0]...:"),
        ("x: " + "{a: " * 10_000 + "1" + "}" * 10_000 + "\n", "1:400: x.a.a.a...:"),
    ],
    ids=["flow-lists", "block-lists", "flow-mappings"],
)
def test_ten_thousand_deep_nesting_is_one_line(
    tmp_path: Path, text: str, where: str, start_up: Measured
) -> None:
    path = tmp_path / "deep.yaml"
    path.write_text(text, encoding="utf-8")
    line, _ = _validate_one_line(path, start_up)
    assert line == f"{path}:{where} {DEEP}"


# --------------------------------------------------------------------------------------------
# each bound in the loader, and just inside it


def _errors(text: str) -> list[str]:
    data, _, errors = parse_yaml(text, "t.yaml")
    return [str(e) for e in errors]


def test_depth_bound_is_exact() -> None:
    # The root mapping is level 1, so ``x`` may hold MAX_DEPTH - 1 levels of lists.
    inside = "x: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1) + "\n"
    assert _errors(inside) == []
    block = "x:\n" + "- " * (MAX_DEPTH - 1) + "ok\n"
    assert _errors(block) == []
    over = "x:\n" + "- " * MAX_DEPTH + "deep\n"
    assert _errors(over) == [f"t.yaml:2:{2 * MAX_DEPTH - 1}: x[0][0][0]...: {DEEP}"]


def test_alias_count_bound_is_exact() -> None:
    def doc(n: int) -> str:
        return "a: &a x\nb: [" + ", ".join(["*a"] * n) + "]\n"

    assert _errors(doc(MAX_ALIASES)) == []
    (error,) = _errors(doc(MAX_ALIASES + 1))
    assert error.startswith(f"t.yaml:2:{5 + 4 * MAX_ALIASES}: b[{MAX_ALIASES}]: alias *a: ")
    assert error.endswith(f"{MAX_ALIASES + 1} alias references (expected at most 1000 per file)")


def test_copied_text_is_bounded_too() -> None:
    # Few aliases of one long text: the values stay few, the text would not.
    n = 900
    long = "x" * (MAX_ALIAS_TEXT // n + 1)
    (error,) = _errors(f"a: &a {long}\nb: [" + ", ".join(["*a"] * n) + "]\n")
    assert f"aliases copy {n * len(long)} characters of text so far" in error
    assert error.endswith(f"(expected at most {MAX_ALIAS_TEXT} per file)")


def test_legitimate_aliases_and_merges_still_load() -> None:
    text = (
        "base: &base {name: A, age: 20}\n"
        "people:\n  - *base\n  - <<: *base\n    age: 30\n"
        "quote: &q some words\nagain: *q\n"
    )
    data, _, errors = parse_yaml(text, "t.yaml")
    assert errors == []
    assert data["people"] == [{"name": "A", "age": 20}, {"name": "A", "age": 30}]
    assert data["again"] == "some words"


def test_size_bound_is_exact_and_needs_no_size_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "edge.yaml"
    path.write_bytes(b"a: 1\n" + b"#" * (MAX_FILE_BYTES - 6) + b"\n")
    assert path.stat().st_size == MAX_FILE_BYTES
    text, errors = read_text(path)
    assert errors == [] and text is not None
    path.write_bytes(path.read_bytes() + b"\n")
    assert [e.message for e in read_text(path)[1]] == [
        f"file is {MAX_FILE_BYTES + 1} bytes (expected at most {MAX_FILE_BYTES} bytes, 5 MiB)"
    ]
    # A device reports no size: reading stops one byte past the bound.
    assert [e.message for e in read_text("/dev/zero")[1]] == [
        f"file is over {MAX_FILE_BYTES} bytes (expected at most {MAX_FILE_BYTES} bytes, 5 MiB)"
    ]


def test_rubrics_and_prompt_conditions_have_the_same_bounds(tmp_path: Path) -> None:
    from branchpoint.judges.loading import load_rubric_file

    bomb = (BAD / "alias_bomb.yaml").read_text(encoding="utf-8")
    (tmp_path / "prompts").mkdir()
    for path in (tmp_path / "rubric.yaml", tmp_path / "prompts" / "aware.yaml"):
        path.write_text(bomb, encoding="utf-8")
    _, rubric_errors = load_rubric_file(tmp_path / "rubric.yaml")
    _, prompt_errors = load_condition_file(tmp_path / "prompts" / "aware.yaml")
    for errors in (rubric_errors, prompt_errors):
        assert [(e.line, e.col, e.field) for e in errors] == [(8, 8, "f[0]")]


# --------------------------------------------------------------------------------------------
# templates, checked when the scenario is loaded

SCENARIO = """\
id: t
title: t
risk_area: r
content_warning: c
persona: {{name: Sam, age: 15, background: b}}
opening: hi
vars: {{pet: cat}}
stages:
  - id: one
    instructions: "{stage}"
branch_points:
  - id: help
    kind: help_offer
    trigger: {{on_event: help_offer}}
    baseline: accept
    options:
      accept: "{option}"
      decline: Say no.
"""


def _scenario_errors(
    tmp_path: Path, stage: str = "Stay calm.", option: str = "Say yes."
) -> list[tuple[int, int, str, str]]:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO.format(stage=stage, option=option), encoding="utf-8")
    _, errors = load_scenarios([path])
    return [(e.line, e.col, e.field, e.message) for e in errors]


def test_unsafe_attribute_in_a_branch_the_values_do_not_take(tmp_path: Path) -> None:
    # Rendering alone would not see it: the sandbox only stops what is executed.
    errors = _scenario_errors(tmp_path, stage="{% if false %}{{ pet.__class__ }}{% endif %}")
    assert errors == [
        (
            10,
            19,
            "stages[0].instructions",
            "template reaches for '__class__', an internal attribute the sandbox forbids "
            "(expected only variables and their keys, such as '{{ persona.name }}')",
        )
    ]


@pytest.mark.parametrize(
    ("option", "problem"),
    [
        ("{{ persona.agee }}", "template reads an undefined value: 'dict object' has no attribute"),
        ("{{ 1 / 0 }}", "template failed: ZeroDivisionError: division by zero"),
        ("{{ pet.upper.mro() }}", "template reaches for 'mro'"),
        ("{{ 'x' * 10 ** 9 }}", "template does something the sandbox forbids: '*' would build"),
        ("{{ 9 ** 999999 }}", "template does something the sandbox forbids: '**' would build"),
        ("{{ '{0.__class__}'.format(pet) }}", "template does something the sandbox forbids"),
    ],
)
def test_render_failures_point_at_their_field(tmp_path: Path, option: str, problem: str) -> None:
    start = time.monotonic()
    errors = _scenario_errors(tmp_path, option=option)
    assert time.monotonic() - start < 5  # bounded, not a hang (the real figure is milliseconds)
    assert len(errors) == 1
    line, col, field, message = errors[0]
    assert (line, col, field) == (17, 15, "branch_points[0].options.accept.instruction")
    assert message.startswith(problem)


def test_templates_that_render_pass(tmp_path: Path) -> None:
    ok = "{% if persona.age < 18 %}Mention your {{ pet }}, {{ persona.name|lower }}.{% endif %}"
    assert _scenario_errors(tmp_path, stage=ok, option="{{ ([pet] * 3) | join(', ') }}") == []


def test_validation_renders_with_the_run_time_context() -> None:
    scenarios, errors = load_scenarios([LIBRARY, GOOD])
    assert errors == [] and scenarios
    for s in scenarios:
        assert template_context(s) == run_time_context(s)


def test_render_turns_any_template_failure_into_one_user_error() -> None:
    with pytest.raises(TemplateRenderError, match="ZeroDivisionError: division by zero"):
        render("{{ 1 / 0 }}")
    with pytest.raises(TemplateRenderError, match="would build a result over"):
        render("{{ 'ab' * n }}", n=10**6)


def test_prompt_condition_reaching_for_internals_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "prompts").mkdir()
    path = tmp_path / "prompts" / "evil.yaml"
    path.write_text(
        'id: evil\ntitle: Evil\nsystem_prompt: "{{ crisis_disclaimer.__class__.__mro__ }}"\n',
        encoding="utf-8",
    )
    _, errors = load_condition_file(path)
    assert [(e.line, e.col, e.field) for e in errors] == [(3, 16, "system_prompt")]
    assert "'__class__', an internal attribute the sandbox forbids" in errors[0].message


def test_the_persona_and_judge_prompts_render_in_the_one_bounded_sandbox() -> None:
    """The persona's and the judge's prompt files are compiled by branchpoint.core.templates, so what a
    scenario's values or a model's text reach there meets the same bounds as a scenario's."""
    from jinja2.exceptions import SecurityError

    from branchpoint.core.templates import _ENV, prompt_template
    from branchpoint.judges import llm_judge
    from branchpoint.simulator import persona

    for template in (persona._template("persona.j2"), llm_judge._template()):
        assert template.environment.linked_to is _ENV  # the sandbox's overlay, not its own
    with pytest.raises(SecurityError, match="would build a result over"):
        prompt_template("{{ 'ab' * n }}").render(n=10**6)
    assert prompt_template("{{ x }}\n").render(x="a") == "a"  # a prompt file's last newline


def test_every_file_model_has_the_one_strict_base() -> None:
    """Scenarios, prompt conditions, rubrics and manifests reject unknown keys through
    branchpoint.core.strict's base, not a copy of it; the loaded ones are frozen."""
    from branchpoint.core.strict import FrozenStrictModel, StrictModel
    from branchpoint.judges.rubric import Rubric
    from branchpoint.scenarios.conditions import PromptCondition
    from branchpoint.scenarios.models import Scenario
    from branchpoint.study.manifest import Manifest

    assert issubclass(Manifest, StrictModel) and not Manifest.model_config.get("frozen")
    for model in (Scenario, PromptCondition, Rubric):
        assert issubclass(model, FrozenStrictModel), model
        assert model.model_config["extra"] == "forbid" and model.model_config["frozen"]
