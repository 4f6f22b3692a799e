"""The scenario authoring format: models, YAML loading with precise errors, matched variants.

Names are imported lazily so that ``import scenarios`` stays cheap for the command line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.lazy import lazy_getattr

_EXPORTS = {
    # rating the persona's turns: manipulation checks and realism
    "rate_enactment": "scenarios.persona_rubric",
    "rate_realism": "scenarios.persona_rubric",
    "realism_at_least": "scenarios.persona_rubric",
    "enactment_rubric": "scenarios.persona_rubric",
    "realism_rubric": "scenarios.persona_rubric",
    "PersonaVerdict": "scenarios.persona_rubric",
    # models
    "Scenario": "scenarios.models",
    "Persona": "scenarios.models",
    "Stage": "scenarios.models",
    "Trigger": "scenarios.models",
    "BranchPoint": "scenarios.models",
    "BranchOption": "scenarios.models",
    "ProfileAttribute": "scenarios.models",
    "ProfileFactors": "scenarios.models",
    "CustomCriterion": "scenarios.models",
    "ID_PATTERN": "scenarios.models",
    # loading
    "LoadError": "core.yamlio",
    "load_model": "core.yamlio",
    "validate_data": "core.yamlio",
    "read_yaml": "core.yamlio",
    "load_scenarios": "scenarios.loader",
    "load_scenario_file": "scenarios.loader",
    "require_scenarios": "scenarios.loader",
    "validate_paths": "scenarios.validate",
    # variants
    "Variant": "scenarios.variants",
    "expand": "scenarios.variants",
    "expand_by_cue": "scenarios.variants",
    "scenario_hash": "scenarios.variants",
    "trigger_order": "scenarios.variants",
    "render_opening": "scenarios.variants",
    "render_text": "scenarios.variants",
    "render_persona": "scenarios.variants",
    "render_bio": "scenarios.variants",
    "OPENING": "scenarios.variants",
    # templates
    "render": "core.templates",
    "TemplateRenderError": "core.templates",
    # system-prompt conditions
    "PromptCondition": "scenarios.conditions",
    "CrisisResource": "scenarios.conditions",
    "CrisisResources": "scenarios.conditions",
    "load_conditions": "scenarios.conditions",
    "load_crisis_resources_file": "scenarios.conditions",
    # the bundled library
    "LIBRARY": "scenarios.bundled",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)


if TYPE_CHECKING:  # for type checkers and editors
    from core.templates import TemplateRenderError, render
    from core.yamlio import LoadError, load_model, read_yaml, validate_data
    from scenarios.bundled import LIBRARY
    from scenarios.conditions import (
        CrisisResource,
        CrisisResources,
        PromptCondition,
        load_conditions,
        load_crisis_resources_file,
    )
    from scenarios.loader import load_scenario_file, load_scenarios, require_scenarios
    from scenarios.models import (
        ID_PATTERN,
        BranchOption,
        BranchPoint,
        CustomCriterion,
        Persona,
        ProfileAttribute,
        ProfileFactors,
        Scenario,
        Stage,
        Trigger,
    )
    from scenarios.validate import validate_paths
    from scenarios.variants import (
        OPENING,
        Variant,
        expand,
        expand_by_cue,
        render_bio,
        render_opening,
        render_persona,
        render_text,
        scenario_hash,
        trigger_order,
    )
