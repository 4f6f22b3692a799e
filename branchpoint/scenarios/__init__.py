"""The scenario authoring format: models, YAML loading with precise errors, matched variants.

Names are imported lazily so that ``import scenarios`` stays cheap for the command line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from branchpoint.core.lazy import lazy_getattr

_EXPORTS = {
    # rating the persona's turns: manipulation checks and realism
    "rate_enactment": "branchpoint.scenarios.persona_rubric",
    "rate_realism": "branchpoint.scenarios.persona_rubric",
    "realism_at_least": "branchpoint.scenarios.persona_rubric",
    "enactment_rubric": "branchpoint.scenarios.persona_rubric",
    "realism_rubric": "branchpoint.scenarios.persona_rubric",
    "PersonaVerdict": "branchpoint.scenarios.persona_rubric",
    # models
    "Scenario": "branchpoint.scenarios.models",
    "Persona": "branchpoint.scenarios.models",
    "Stage": "branchpoint.scenarios.models",
    "Trigger": "branchpoint.scenarios.models",
    "BranchPoint": "branchpoint.scenarios.models",
    "BranchOption": "branchpoint.scenarios.models",
    "ProfileAttribute": "branchpoint.scenarios.models",
    "ProfileFactors": "branchpoint.scenarios.models",
    "CustomCriterion": "branchpoint.scenarios.models",
    "ID_PATTERN": "branchpoint.scenarios.models",
    # loading
    "LoadError": "branchpoint.core.yamlio",
    "load_model": "branchpoint.core.yamlio",
    "validate_data": "branchpoint.core.yamlio",
    "read_yaml": "branchpoint.core.yamlio",
    "load_scenarios": "branchpoint.scenarios.loader",
    "load_scenario_file": "branchpoint.scenarios.loader",
    "require_scenarios": "branchpoint.scenarios.loader",
    "validate_paths": "branchpoint.scenarios.validate",
    # variants
    "Variant": "branchpoint.scenarios.variants",
    "expand": "branchpoint.scenarios.variants",
    "expand_by_cue": "branchpoint.scenarios.variants",
    "scenario_hash": "branchpoint.scenarios.variants",
    "trigger_order": "branchpoint.scenarios.variants",
    "render_opening": "branchpoint.scenarios.variants",
    "render_text": "branchpoint.scenarios.variants",
    "render_persona": "branchpoint.scenarios.variants",
    "render_bio": "branchpoint.scenarios.variants",
    "OPENING": "branchpoint.scenarios.variants",
    # templates
    "render": "branchpoint.core.templates",
    "TemplateRenderError": "branchpoint.core.templates",
    # system-prompt conditions
    "PromptCondition": "branchpoint.scenarios.conditions",
    "CrisisResource": "branchpoint.scenarios.conditions",
    "CrisisResources": "branchpoint.scenarios.conditions",
    "load_conditions": "branchpoint.scenarios.conditions",
    "load_crisis_resources_file": "branchpoint.scenarios.conditions",
    # the bundled library
    "LIBRARY": "branchpoint.scenarios.bundled",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)


if TYPE_CHECKING:  # for type checkers and editors
    from branchpoint.core.templates import TemplateRenderError, render
    from branchpoint.core.yamlio import LoadError, load_model, read_yaml, validate_data
    from branchpoint.scenarios.bundled import LIBRARY
    from branchpoint.scenarios.conditions import (
        CrisisResource,
        CrisisResources,
        PromptCondition,
        load_conditions,
        load_crisis_resources_file,
    )
    from branchpoint.scenarios.loader import load_scenario_file, load_scenarios, require_scenarios
    from branchpoint.scenarios.models import (
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
    from branchpoint.scenarios.persona_rubric import (
        PersonaVerdict,
        enactment_rubric,
        rate_enactment,
        rate_realism,
        realism_at_least,
        realism_rubric,
    )
    from branchpoint.scenarios.validate import validate_paths
    from branchpoint.scenarios.variants import (
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
