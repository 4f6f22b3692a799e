"""The cross-field checks of a scenario whose schema check failed, so that one run of
``branchpoint validate`` reports every problem of a file, not the schema's first.

The invalid values are left out (an unknown key, a value of the wrong type or range) and the rest
is validated again; the checks of ``branchpoint.scenarios.checks`` (and ``validate``'s criteria checks) then
run on what remains. A required text field left out is filled with a placeholder. Leaving a value
out gives its field the default, so this stops (reporting no cross-field problem) wherever that
could make a check speak of something the author did not write: a list item (removing it would
renumber the items after it), an id other fields refer to, or a field other fields are checked
against (``_READ_ACROSS``).
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
# apply.
_READ_ACROSS: tuple[Loc, ...] = (
    ("max_turns",),
    ("vars",),
    ("persona", "name"),
    ("persona", "age"),
    ("persona", "gender"),
    ("profile",),
    ("design",),
)
_PLACEHOLDER = "placeholder"  # valid as an id and as text; has no template in it
_ROUNDS = 4  # leave out, then fill a required one, then what that reveals


def problems_despite(data: Any) -> list[Problem]:
    """``scenario_problems`` of ``data`` less its invalid values ([] where that is unsound)."""
    scenario = partial_scenario(data)
    return [] if scenario is None else scenario_problems(scenario)


def partial_scenario(data: Any) -> Scenario | None:
    """The scenario ``data`` describes, its invalid values left out (None where unsound)."""
    from branchpoint.scenarios.models import Scenario

    if not isinstance(data, dict):
        return None
    pruned = copy.deepcopy(data)
    left_out: set[Loc] = set()
    for _ in range(_ROUNDS):
        try:
            return Scenario.model_validate(pruned, context={"defer_checks": True})
        except ValidationError as exc:
            errors = {tuple(e["loc"]): e for e in exc.errors(include_url=False)}
            for loc, err in errors.items():
                if not _mend(pruned, loc, err["type"], left_out):
                    return None
    return None


def _mend(data: dict[str, Any], loc: Loc, kind: str, left_out: set[Loc]) -> bool:
    """Leave out (or fill) the value at ``loc``; False when that would not be sound."""
    if not loc or not isinstance(loc[-1], str):
        return False
    if kind != "extra_forbidden":
        if any(loc[: len(r)] == r for r in _READ_ACROSS):
            return False
        if loc[-1] == "id" and len(loc) > 1:  # a stage's or branch point's: referred to
            return False
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
