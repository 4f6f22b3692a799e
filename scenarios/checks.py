"""Checks that need the whole scenario: references between fields, turn order, templates.

Each problem is ``(loc, message)`` with ``loc`` the path of the offending value inside the scenario,
so that the YAML loader can point at its line and column, and the message follows the
``what is wrong (expected ...)`` form.
"""

from __future__ import annotations

from collections.abc import Iterator

from core.templates import syntax_problem, undeclared_names
from scenarios.parts import ScenarioFields

Loc = tuple[str | int, ...]
Problem = tuple[Loc, str]

# A factorial design multiplies option counts; beyond this it is almost surely a mistake.
MAX_VARIANTS = 10_000

# Names every scenario template sees besides the scenario's own ``vars`` (see variants.render_*).
SCENARIO_TEMPLATE_NAMES = frozenset({"persona"})
PROFILE_TEMPLATE_NAMES = frozenset({"sentences"})


def _one_of(names: list[str]) -> str:
    return ", ".join(names) if names else "none defined"


def scenario_problems(s: ScenarioFields) -> list[Problem]:
    problems: list[Problem] = []
    problems += _stage_problems(s)
    problems += _branch_problems(s)
    problems += _size_problems(s)
    problems += _criteria_problems(s)
    problems += _profile_problems(s)
    problems += _template_problems(s)
    return problems


def _stage_problems(s: ScenarioFields) -> list[Problem]:
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
            if stage.until_turn > s.max_turns:
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


def _branch_problems(s: ScenarioFields) -> list[Problem]:
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
        at = bp.trigger.at_turn
        if at is not None and at > s.max_turns:
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


def _template_fields(s: ScenarioFields) -> Iterator[tuple[Loc, str, frozenset[str]]]:
    """Every field that may hold a template, with the names it may use."""
    base = SCENARIO_TEMPLATE_NAMES | frozenset(s.vars)
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
        prof = base | frozenset(s.profile.vars)
        for attr, spec in s.profile.attributes.items():
            for level, text in spec.levels.items():
                yield ("profile", "attributes", attr, "levels", level), text, prof
        if s.profile.explicit_cue is not None:
            yield ("profile", "explicit_cue"), s.profile.explicit_cue, prof
        yield ("profile", "template"), s.profile.template, prof | PROFILE_TEMPLATE_NAMES


def _template_problems(s: ScenarioFields) -> list[Problem]:
    out: list[Problem] = []
    for loc, text, names in _template_fields(s):
        out.extend(template_problems(loc, text, names))
    return out


def template_problems(loc: Loc, text: str, names: frozenset[str] | set[str]) -> list[Problem]:
    """Parse errors and unknown placeholder names of one template field."""
    if "{" not in text:
        return []
    problem = syntax_problem(text)
    if problem:
        return [(loc, f"{problem} (expected a Jinja2 template such as 'I am {{{{ age }}}}')")]
    unknown = sorted(undeclared_names(text) - set(names))
    if unknown:
        return [
            (
                loc,
                f"unknown template variable{'s' if len(unknown) > 1 else ''} "
                f"{', '.join(repr(u) for u in unknown)} (expected one of: {_one_of(sorted(names))})",
            )
        ]
    return []
