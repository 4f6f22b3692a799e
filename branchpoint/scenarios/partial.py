"""The cross-field checks of a scenario whose schema check failed, so that one run of
``branchpoint validate`` reports every problem of a file, not the schema's first.

The invalid values are left out (an unknown key, a value of the wrong type or range) and the rest
is validated again; the checks of ``branchpoint.scenarios.checks`` (and ``validate``'s criteria checks) then
run on what remains. A required text field left out is filled with a placeholder. Leaving a value
out gives its field the default, so this stops (reporting no cross-field problem) wherever that
could make a check speak of something the author did not write: a list item (removing it would
renumber the items after it) or an id other fields refer to. A field other fields are checked
against (``_READ_ACROSS``) gets a stand-in instead, and the checks that read it are left out
(``scenario_problems``' ``stand_ins``), so that the others still run.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from branchpoint.scenarios.checks import Loc, Problem, scenario_problems

if TYPE_CHECKING:
    from branchpoint.scenarios.models import Scenario

# Values that other fields are checked against: max_turns bounds the turns, vars and the
# persona's name, age and gender feed every template, profile and design decide which checks
# apply. An invalid one gets a valid stand-in (``_stand_in``), named in the stand-ins the checks
# are given, and each check that reads it is left out (``checks.scenario_problems``).
_READ_ACROSS: tuple[Loc, ...] = (
    ("max_turns",),
    ("vars",),
    ("persona", "name"),
    ("persona", "age"),
    ("persona", "gender"),
    ("profile",),
    ("design",),
)
_PERSONA_STAND_INS: dict[str, Any] = {"name": "placeholder", "age": 30}  # gender: left out
_PLACEHOLDER = "placeholder"  # valid as an id and as text; has no template in it
_ROUNDS = 4  # leave out, then fill a required one, then what that reveals


def problems_despite(data: Any) -> list[Problem]:
    """``scenario_problems`` of ``data`` less its invalid values ([] where that is unsound)."""
    found = _partial(data)
    return [] if found is None else scenario_problems(found[0], found[1])


def partial_scenario(data: Any) -> Scenario | None:
    """The scenario ``data`` describes, its invalid values left out (None where unsound)."""
    found = _partial(data)
    return None if found is None else found[0]


def _partial(data: Any) -> tuple[Scenario, frozenset[Loc]] | None:
    """``partial_scenario``, and the fields of ``_READ_ACROSS`` given a stand-in."""
    from branchpoint.scenarios.models import Scenario

    if not isinstance(data, dict):
        return None
    pruned = copy.deepcopy(data)
    left_out: set[Loc] = set()
    stand_ins: set[Loc] = set()
    for _ in range(_ROUNDS):
        try:
            scenario = Scenario.model_validate(pruned, context={"defer_checks": True})
            return scenario, frozenset(stand_ins)
        except ValidationError as exc:
            errors = {tuple(e["loc"]): e for e in exc.errors(include_url=False)}
            for loc, err in errors.items():
                read_across = any(loc[: len(r)] == r for r in _READ_ACROSS)
                if read_across and err["type"] != "extra_forbidden":
                    if not _stand_in(pruned, loc, err["type"], stand_ins):
                        return None
                elif not _mend(pruned, loc, err["type"], left_out):
                    return None
    return None


def _stand_in(data: dict[str, Any], loc: Loc, kind: str, stand_ins: set[Loc]) -> bool:
    """Give the read-across field at ``loc`` a valid stand-in and add it to ``stand_ins``.

    max_turns and design get their default: the checks that read them are left out (no turn is
    compared with max_turns, the variants are not counted). A profile is left out whole: only its
    own checks read it, and a default in place of one of its values (design: pairs) could make
    them speak of what the author did not write. A persona value or a var gets a value of the
    right type, and no template that reads it is rendered; when vars is no mapping (or has a key
    that is not text) no template is checked for unknown names either."""
    field = loc[0]
    if field in ("max_turns", "design", "profile"):
        data.pop(str(field), None)
        stand_ins.add((field,))
        return True
    if field == "persona":
        persona = data.get("persona")
        if kind == "missing" or not isinstance(persona, dict):
            return False  # missing in the file: only the schema's error is sound, as in _mend
        name = str(loc[1])
        if name in _PERSONA_STAND_INS:
            persona[name] = _PERSONA_STAND_INS[name]
        else:
            persona.pop(name, None)
        stand_ins.add(("persona", name))
        return True
    values = data.get("vars")  # the one field left
    if len(loc) > 1 and isinstance(values, dict) and isinstance(loc[1], str) and loc[1] in values:
        values[loc[1]] = _PLACEHOLDER
        stand_ins.add(("vars", loc[1]))
    else:
        data["vars"] = {}
        stand_ins.add(("vars",))
    return True


def _mend(data: dict[str, Any], loc: Loc, kind: str, left_out: set[Loc]) -> bool:
    """Leave out (or fill) the value at ``loc``; False when that would not be sound."""
    if not loc or not isinstance(loc[-1], str):
        return False
    if kind != "extra_forbidden" and loc[-1] == "id" and len(loc) > 1:
        return False  # a stage's or branch point's id: other fields refer to it
    parent = _at(data, loc[:-1])
    if not isinstance(parent, dict):
        return False
    if kind == "missing":
        if loc not in left_out or ("filled", *loc) in left_out:
            return False  # missing in the file: only the schema's error is sound
        parent[loc[-1]] = _PLACEHOLDER
        left_out.add(("filled", *loc))
        return True
    if loc[-1] not in parent or ("filled", *loc) in left_out:
        return False
    del parent[loc[-1]]
    left_out.add(loc)
    return True


def _at(data: Any, loc: Loc) -> Any:
    for part in loc:
        in_list = isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data)
        if not in_list and not (isinstance(data, dict) and part in data):
            return None
        data = data[part]
    return data
