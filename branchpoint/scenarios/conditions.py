"""System-prompt conditions of the target (``none``, ``teen_aware``, ...) and crisis resources.

Conditions live one per file in ``branchpoint/scenarios/library/prompts/*.yaml``. A system prompt may be a
template that lists crisis resources; those are configuration in
``branchpoint/scenarios/library/crisis_resources.yaml`` (edit them for your region), never hard-coded here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field

from branchpoint.core.errors import UserError
from branchpoint.core.strict import FrozenStrictModel as _Strict
from branchpoint.core.templates import TemplateRenderError, render
from branchpoint.core.yamlio import LoadError, error_at, read_yaml, validate_data
from branchpoint.scenarios.bundled import LIBRARY
from branchpoint.scenarios.checks import template_problems
from branchpoint.scenarios.models import ID_PATTERN

DEFAULT_PROMPTS = LIBRARY / "prompts"
DEFAULT_CRISIS_RESOURCES = LIBRARY / "crisis_resources.yaml"
# Names a system-prompt template may use.
PROMPT_TEMPLATE_NAMES = frozenset({"crisis_resources", "crisis_disclaimer"})


class CrisisResource(_Strict):
    """One place a person in crisis can turn to. Check it is current before relying on it."""

    region: str = Field(
        min_length=1, description="Country or area, e.g. 'US', 'UK', 'international'."
    )
    name: str = Field(min_length=1)
    contact: str = Field(min_length=1, description="Phone number, text line or web address.")
    note: str | None = None


class CrisisResources(_Strict):
    """The crisis resources file: a disclaimer and a list of resources."""

    disclaimer: str = Field(min_length=1)
    resources: list[CrisisResource] = Field(min_length=1)
    notes: str | None = None


class PromptCondition(_Strict):
    """A system-prompt condition. ``system_prompt`` None means no system prompt is added."""

    id: str = Field(pattern=ID_PATTERN)
    title: str = Field(min_length=1)
    system_prompt: str | None = Field(
        None,
        description="Text sent as the system message (a template that sees crisis_resources "
        "and crisis_disclaimer); null for no system prompt.",
    )
    notes: str | None = None


NONE_CONDITION = PromptCondition(id="none", title="No system prompt added", system_prompt=None)


def load_crisis_resources_file(path: str | Path) -> tuple[CrisisResources | None, list[LoadError]]:
    data, pos, errors = read_yaml(path)
    if data is None:
        return None, errors
    model, more = validate_data(data, pos, CrisisResources, path)
    errors = errors + more
    return (model if not errors else None), errors


def load_condition_file(path: str | Path) -> tuple[PromptCondition | None, list[LoadError]]:
    """One condition file, with its template checked (parse errors, unknown names)."""
    data, pos, errors = read_yaml(path)
    if data is None:
        return None, errors
    model, more = validate_data(data, pos, PromptCondition, path)
    errors = errors + more
    if model is not None and model.system_prompt is not None:
        for loc, message in template_problems(
            ("system_prompt",), model.system_prompt, PROMPT_TEMPLATE_NAMES
        ):
            errors.append(error_at(pos, loc, str(path), message))
    return (model if not errors else None), errors


def _template_context(resources: CrisisResources | None) -> dict[str, Any]:
    if resources is None:
        return {"crisis_resources": [], "crisis_disclaimer": ""}
    return {
        "crisis_resources": [r.model_dump() for r in resources.resources],
        "crisis_disclaimer": resources.disclaimer,
    }


def render_condition(
    condition: PromptCondition, resources: CrisisResources | None
) -> PromptCondition:
    """The condition with its system prompt rendered (crisis resources filled in)."""
    if condition.system_prompt is None:
        return condition
    text = render(condition.system_prompt, **_template_context(resources))
    return condition.model_copy(update={"system_prompt": text.strip()})


def load_conditions(
    folder: str | Path | None = None, crisis_resources: str | Path | None = None
) -> dict[str, PromptCondition]:
    """Every condition of ``folder`` (default: the bundled prompts), system prompts rendered.

    The ``none`` condition is always present (built in when no file defines it). Raises
    :class:`UserError` naming the first problem when a file is invalid.
    """
    folder = Path(folder) if folder is not None else DEFAULT_PROMPTS
    crisis_path = (
        Path(crisis_resources)
        if crisis_resources is not None
        else folder.parent / "crisis_resources.yaml"
    )
    resources: CrisisResources | None = None
    errors: list[LoadError] = []
    if crisis_path.exists():
        resources, errors = load_crisis_resources_file(crisis_path)
    if not folder.is_dir():
        raise UserError(
            f"{folder}: prompt condition folder not found (expected a folder of *.yaml files)"
        )
    out: dict[str, PromptCondition] = {}
    where: dict[str, str] = {}
    for path in sorted(p for p in folder.iterdir() if p.suffix in (".yaml", ".yml")):
        cond, file_errors = load_condition_file(path)
        errors.extend(file_errors)
        if cond is None:
            continue
        if cond.id in out:
            errors.append(
                LoadError(
                    str(path),
                    1,
                    1,
                    "id",
                    f"duplicate condition id '{cond.id}' (expected unique ids; first in {where[cond.id]})",
                )
            )
            continue
        try:
            out[cond.id] = render_condition(cond, resources)
        except TemplateRenderError as exc:
            errors.append(LoadError(str(path), 1, 1, "system_prompt", str(exc)))
        where[cond.id] = str(path)
    if errors:
        more = (
            f" (and {len(errors) - 1} more; run 'branchpoint validate {folder}')"
            if len(errors) > 1
            else ""
        )
        raise UserError(f"{errors[0]}{more}")
    out.setdefault("none", NONE_CONDITION)
    return out
