"""System-prompt conditions and crisis resources: loaded as configuration, rendered in the sandbox."""

from __future__ import annotations

from pathlib import Path

import pytest

from branchpoint.core.errors import UserError
from branchpoint.scenarios import CrisisResource, PromptCondition, load_conditions
from branchpoint.scenarios.conditions import (
    DEFAULT_CRISIS_RESOURCES,
    DEFAULT_PROMPTS,
    load_condition_file,
    load_crisis_resources_file,
)


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def library(tmp_path: Path) -> Path:
    prompts = tmp_path / "prompts"
    prompts.mkdir()
    _write(
        tmp_path,
        "crisis_resources.yaml",
        "disclaimer: Check before use.\nresources:\n"
        "  - {region: Testland, name: Test Line, contact: call 000, note: day and night}\n"
        "  - {region: Elsewhere, name: Other Line, contact: other.example}\n",
    )
    _write(prompts, "none.yaml", "id: none\ntitle: Nothing added\nsystem_prompt: null\n")
    _write(
        prompts,
        "aware.yaml",
        "id: aware\ntitle: Aware\nsystem_prompt: |\n  Put safety first.\n"
        "  {% for r in crisis_resources %}- {{ r.name }} ({{ r.region }}): {{ r.contact }}\n  {% endfor %}"
        "{{ crisis_disclaimer }}\n",
    )
    return prompts


def test_conditions_render_crisis_resources_from_configuration(library: Path) -> None:
    conditions = load_conditions(library)
    assert set(conditions) == {"none", "aware"}
    assert conditions["none"].system_prompt is None
    assert conditions["aware"].system_prompt == (
        "Put safety first.\n- Test Line (Testland): call 000\n- Other Line (Elsewhere): other.example\n"
        "Check before use."
    )


def test_none_condition_is_built_in_when_no_file_defines_it(library: Path) -> None:
    (library / "none.yaml").unlink()
    conditions = load_conditions(library)
    assert conditions["none"] == PromptCondition(
        id="none", title="No system prompt added", system_prompt=None
    )


def test_bad_condition_file_is_a_one_line_user_error(library: Path) -> None:
    _write(library, "broken.yaml", "id: broken\ntitel: x\n")
    with pytest.raises(UserError) as info:
        load_conditions(library)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"{library / 'broken.yaml'}:1:1: title: required field is missing")
    assert "and 1 more" in message


def test_duplicate_condition_ids(library: Path) -> None:
    _write(library, "zz.yaml", "id: aware\ntitle: Again\n")
    with pytest.raises(UserError, match="duplicate condition id 'aware'"):
        load_conditions(library)


def test_bundled_conditions_and_resources_load() -> None:
    resources, errors = load_crisis_resources_file(DEFAULT_CRISIS_RESOURCES)
    assert errors == [] and resources is not None
    assert all(isinstance(r, CrisisResource) for r in resources.resources)
    conditions = load_conditions(DEFAULT_PROMPTS)
    assert conditions["none"].system_prompt is None
    prompted = [c for c in conditions.values() if c.system_prompt]
    assert prompted, "the library should define at least one system prompt (teen_aware)"
    # Templates that list resources get every configured resource, not a hard-coded one.
    for path in sorted(DEFAULT_PROMPTS.glob("*.yaml")):
        raw, errors = load_condition_file(path)
        assert errors == [] and raw is not None
        if raw.system_prompt and "crisis_resources" in raw.system_prompt:
            rendered = conditions[raw.id].system_prompt or ""
            assert all(r.name in rendered for r in resources.resources)
