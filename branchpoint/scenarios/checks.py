"""Checks that need the whole scenario: references between fields, turn order, templates.

Each problem is ``(loc, message)`` with ``loc`` the path of the offending value inside the scenario,
so that the YAML loader can point at its line and column, and the message follows the
``what is wrong (expected ...)`` form.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from branchpoint.core.templates import (
    render_problem,
    syntax_problem,
    undeclared_names,
    unsafe_attribute,
)
from branchpoint.scenarios.parts import ScenarioFields

Loc = tuple[str | int, ...]
Problem = tuple[Loc, str]

# A factorial design multiplies option counts; beyond this it is almost surely a mistake.
MAX_VARIANTS = 10_000


def _one_of(names: list[str]) -> str:
    return ", ".join(names) if names else "none defined"


def scenario_problems(s: ScenarioFields, stand_ins: frozenset[Loc] = frozenset()) -> list[Problem]:
    """The problems of ``s``. ``stand_ins``: the fields whose values stand in for invalid ones
    (``branchpoint.scenarios.partial``); a check that reads one is left out, not run on it."""
    problems: list[Problem] = []
    problems += _stage_problems(s, stand_ins)
    problems += _branch_problems(s, stand_ins)
    if ("design",) not in stand_ins:
        problems += _size_problems(s)
    problems += _criteria_problems(s)
    problems += _profile_problems(s)
    problems += _template_problems(s, stand_ins)
    return problems


def _stage_problems(s: ScenarioFields, stand_ins: frozenset[Loc]) -> list[Problem]:
    out: list[Problem] = []
    first: dict[str, int] = {}
    last_until: tuple[int, int] | None = None  # (index, until_turn)
    for i, stage in enumerate(s.stages):
        if stage.id in first:
            out.append(
                (
                    ("stages", i, "id"),
                    f"duplicate stage id '{stage.id}' (expected unique ids; first at stages[{first[stage.id]}])",
                )
            )
        else:
            first[stage.id] = i
        if stage.until_turn is not None:
            if ("max_turns",) not in stand_ins and stage.until_turn > s.max_turns:
                out.append(
                    (
                        ("stages", i, "until_turn"),
                        f"turn {stage.until_turn} is beyond max_turns {s.max_turns} "
                        f"(expected a turn from 1 to {s.max_turns})",
                    )
                )
            if last_until is not None and stage.until_turn <= last_until[1]:
                out.append(
                    (
                        ("stages", i, "until_turn"),
                        f"turn {stage.until_turn} is not after stages[{last_until[0]}].until_turn "
                        f"{last_until[1]} (expected until_turn to increase from stage to stage)",
                    )
                )
            last_until = (i, stage.until_turn)
    return out


def _branch_problems(s: ScenarioFields, stand_ins: frozenset[Loc]) -> list[Problem]:
    out: list[Problem] = []
    stages = s.stage_ids()
    first: dict[str, int] = {}
    for i, bp in enumerate(s.branch_points):
        if bp.id in first:
            out.append(
                (
                    ("branch_points", i, "id"),
                    f"duplicate branch point id '{bp.id}' (expected unique ids; first at "
                    f"branch_points[{first[bp.id]}])",
                )
            )
        else:
            first[bp.id] = i
        if bp.baseline not in bp.options:
            out.append(
                (
                    ("branch_points", i, "baseline"),
                    f"{bp.baseline!r} is not one of the options "
                    f"(expected one of: {', '.join(bp.options)})",
                )
            )
        at = bp.trigger.at_turn
        if at is not None and ("max_turns",) not in stand_ins and at > s.max_turns:
            out.append(
                (
                    ("branch_points", i, "trigger", "at_turn"),
                    f"turn {at} is beyond max_turns {s.max_turns} (expected a turn from 1 to {s.max_turns})",
                )
            )
        for name, option in bp.options.items():
            if option.goto_stage is not None and option.goto_stage not in stages:
                out.append(
                    (
                        ("branch_points", i, "options", name, "goto_stage"),
                        f"unknown stage '{option.goto_stage}' (expected one of: {_one_of(stages)})",
                    )
                )
    return out


def _size_problems(s: ScenarioFields) -> list[Problem]:
    if s.design != "factorial":
        return []
    n = 1
    for bp in s.branch_points:
        n *= len(bp.options)
    if n > MAX_VARIANTS:
        return [
            (
                ("design",),
                f"factorial gives {n} variants (expected at most {MAX_VARIANTS}; "
                "use one_at_a_time or fewer options)",
            )
        ]
    return []


def _criteria_problems(s: ScenarioFields) -> list[Problem]:
    out: list[Problem] = []
    seen: set[str] = set()
    for i, crit in enumerate(s.criteria):
        if crit in seen:
            out.append(
                (("criteria", i), f"criterion '{crit}' is listed twice (expected unique ids)")
            )
        seen.add(crit)
    own: set[str] = set()
    for i, custom in enumerate(s.custom_criteria):
        if custom.id in own:
            out.append(
                (
                    ("custom_criteria", i, "id"),
                    f"duplicate criterion id '{custom.id}' (expected unique ids)",
                )
            )
        own.add(custom.id)
    return out


def _profile_problems(s: ScenarioFields) -> list[Problem]:
    p = s.profile
    if p is None:
        return []
    out: list[Problem] = []
    if p.design == "pairs" and len(p.attributes) < 2:
        out.append(
            (
                ("profile", "design"),
                f"design 'pairs' needs at least two attributes, found {len(p.attributes)} "
                "(expected design: full, or more attributes)",
            )
        )
    if not p.cue_settings:
        out.append(
            (("profile", "cue_settings"), "is empty (expected [false], [true] or [false, true])")
        )
    elif len(set(p.cue_settings)) != len(p.cue_settings):
        out.append(
            (
                ("profile", "cue_settings"),
                "lists a setting twice (expected each of false/true once)",
            )
        )
    if p.explicit_cue is None and "cue_settings" in p.model_fields_set and True in p.cue_settings:
        out.append(
            (
                ("profile", "cue_settings"),
                "includes true but profile.explicit_cue is not set (expected an explicit_cue sentence)",
            )
        )
    return out


def template_context(s: ScenarioFields) -> dict[str, Any]:
    """What a scenario's templates see when it runs: its ``vars`` and ``persona``.

    Defined here because the checks render templates inside model validation;
    ``branchpoint.scenarios.variants.template_context`` builds on it."""
    ctx: dict[str, Any] = dict(s.vars)
    ctx["persona"] = {"name": s.persona.name, "age": s.persona.age, "gender": s.persona.gender}
    return ctx


def _template_fields(s: ScenarioFields) -> Iterator[tuple[Loc, str, dict[str, Any]]]:
    """Every field that may hold a template, with the values it is rendered with."""
    base = template_context(s)
    for field in ("name", "gender", "background", "voice", "context"):
        value = getattr(s.persona, field)
        if isinstance(value, str):
            yield ("persona", field), value, base
    yield ("opening",), s.opening, base
    for i, stage in enumerate(s.stages):
        yield ("stages", i, "instructions"), stage.instructions, base
    for i, bp in enumerate(s.branch_points):
        for name, option in bp.options.items():
            yield ("branch_points", i, "options", name, "instruction"), option.instruction, base
    if s.profile is not None:
        prof = {**base, **s.profile.vars}
        for attr, spec in s.profile.attributes.items():
            for level, text in spec.levels.items():
                yield ("profile", "attributes", attr, "levels", level), text, prof
        if s.profile.explicit_cue is not None:
            yield ("profile", "explicit_cue"), s.profile.explicit_cue, prof
        # A bio's sentences are its attributes' levels; any one of each shows the template works.
        sentences = [next(iter(spec.levels.values()), "") for spec in s.profile.attributes.values()]
        yield ("profile", "template"), s.profile.template, {**prof, "sentences": sentences}


def _template_problems(s: ScenarioFields, stand_ins: frozenset[Loc]) -> list[Problem]:
    # A template that reads a stand-in value is not rendered (the author's value might render);
    # when vars is a stand-in as a whole, which names are defined is not known either.
    unsure = {str(loc[1]) for loc in stand_ins if loc[0] == "vars" and len(loc) > 1}
    if any(loc[0] == "persona" for loc in stand_ins):
        unsure.add("persona")
    out: list[Problem] = []
    for loc, text, context in _template_fields(s):
        names = frozenset(context)
        read = undeclared_names(text) if "{" in text and not syntax_problem(text) else set()
        if ("vars",) in stand_ins:
            out.extend(template_problems(loc, text, names | read))
        elif read & unsure:
            out.extend(template_problems(loc, text, names))
        else:
            out.extend(template_problems(loc, text, names, context))
    return out


def template_problems(
    loc: Loc,
    text: str,
    names: frozenset[str] | set[str],
    context: Mapping[str, Any] | None = None,
) -> list[Problem]:
    """The first problem of one template field: it does not parse, reaches for an internal
    attribute, names an unknown variable, or (given the ``context`` it runs with) fails to render.
    """
    if "{" not in text:
        return []
    problem = syntax_problem(text)
    if problem:
        return [(loc, f"{problem} (expected a Jinja2 template such as 'I am {{{{ age }}}}')")]
    unsafe = unsafe_attribute(text)
    if unsafe:
        return [
            (
                loc,
                f"template reaches for {unsafe!r}, an internal attribute the sandbox forbids "
                "(expected only variables and their keys, such as '{{ persona.name }}')",
            )
        ]
    unknown = sorted(undeclared_names(text) - set(names))
    if unknown:
        return [
            (
                loc,
                f"unknown template variable{'s' if len(unknown) > 1 else ''} "
                f"{', '.join(repr(u) for u in unknown)} (expected one of: {_one_of(sorted(names))})",
            )
        ]
    if context is not None:
        failed = render_problem(text, context)
        if failed:
            return [
                (
                    loc,
                    f"{failed} (expected a template that renders with the scenario's values: "
                    f"{_one_of(sorted(context))})",
                )
            ]
    return []
