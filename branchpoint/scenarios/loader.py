"""Load scenario files and folders: single scenarios and scenario sets, with cross-file checks.

A file holds one scenario mapping, or a *set*::

    defaults: {...}          # optional, deep-merged under every item
    scenarios:
      - {...}                # item keys win over defaults
      - {...}

Errors point at the item, or at the defaults, where the offending value is written.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal

from branchpoint.core.yamlio import (
    ROOT_FIELD,
    LoadError,
    PosMap,
    error_at,
    read_yaml,
    validate_data,
)
from branchpoint.scenarios.checks import scenario_problems
from branchpoint.scenarios.models import Scenario
from branchpoint.scenarios.partial import partial_scenario, problems_despite

YAML_SUFFIXES = (".yaml", ".yml")
SET_KEYS = ("defaults", "scenarios")
FileKind = Literal["scenario", "set", "rubric", "prompt", "crisis_resources", "unknown"]


def yaml_files(paths: Iterable[str | Path]) -> tuple[list[Path], list[LoadError]]:
    """Files named directly, and every *.yaml / *.yml under folders (sorted, recursively)."""
    files: list[Path] = []
    errors: list[LoadError] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = sorted(
                f
                for f in p.rglob("*")
                if f.suffix in YAML_SUFFIXES
                and f.is_file()
                and not any(part.startswith(".") for part in f.relative_to(p).parts)
            )
            files.extend(found)
            if not found:  # nothing to check is not "0 errors": the path is likely wrong
                errors.append(
                    LoadError(
                        str(p), 1, 1, "<folder>",
                        "no *.yaml or *.yml files in this folder (expected scenario, rubric or "
                        "prompt YAML files)",
                    )
                )  # fmt: skip
        elif p.exists():
            files.append(p)
        else:
            errors.append(
                LoadError(
                    str(p), 1, 1, "<file>", "file not found (expected a YAML file or a folder)"
                )
            )
    unique = list(dict.fromkeys(files))
    return unique, errors


def classify(path: Path, data: Any) -> FileKind:
    """What a parsed YAML file holds, from its place and its top-level keys."""
    if isinstance(data, dict):
        if "criteria" in data and "scale" in data:
            return "rubric"
        if path.stem.replace("-", "_") == "crisis_resources" or (
            "resources" in data and "persona" not in data
        ):
            return "crisis_resources"
        if path.parent.name == "prompts" and "persona" not in data and "scenarios" not in data:
            return "prompt"
        if "scenarios" in data and "persona" not in data:
            return "set"
        return "scenario"
    return "unknown"


def deep_merge(base: Any, over: Any) -> Any:
    """``over`` on top of ``base``: mappings merge key by key, everything else is replaced."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for key, value in over.items():
            out[key] = deep_merge(base[key], value) if key in base else value
        return out
    return over


def _rebase(pos: PosMap, prefix: tuple[str | int, ...]) -> PosMap:
    out = PosMap()
    n = len(prefix)
    for loc, node in pos.items():
        if loc[:n] == prefix:
            out[loc[n:]] = node
    return out


def _merged_positions(pos: PosMap, index: int, has_defaults: bool) -> PosMap:
    """Positions for a merged set item: from the item where it says so, else from defaults."""
    merged = _rebase(pos, ("defaults",)) if has_defaults else PosMap()
    merged.update(_rebase(pos, ("scenarios", index)))
    return merged


def _scenario_from_data(
    data: Any, pos: PosMap, path: str
) -> tuple[Scenario | None, list[LoadError]]:
    scenario, errors = validate_data(data, pos, Scenario, path, context={"defer_checks": True})
    if scenario is None:
        more = [error_at(pos, loc, path, message) for loc, message in problems_despite(data)]
        return None, sorted(set(errors + more), key=lambda e: (e.line, e.col, e.field, e.message))
    problems = [error_at(pos, loc, path, message) for loc, message in scenario_problems(scenario)]
    if problems:
        return None, sorted(set(problems), key=lambda e: (e.line, e.col, e.field, e.message))
    id_node = pos.get(("id",))
    scenario.with_source(
        path,
        (id_node.line, id_node.col) if id_node else None,
        {loc: (node.line, node.col) for loc, node in pos.items()},
    )
    return scenario, []


def _set_from_data(
    data: dict[str, Any], pos: PosMap, path: str
) -> tuple[list[Scenario], list[LoadError]]:
    errors: list[LoadError] = []
    for key in data:
        if key not in SET_KEYS:
            close = difflib.get_close_matches(str(key), SET_KEYS, n=1, cutoff=0.6)
            hint = f"did you mean '{close[0]}'?" if close else "expected defaults or scenarios"
            errors.append(
                error_at(
                    pos,
                    (key,),
                    path,
                    f"unknown key '{key}' in a scenario set ({hint})",
                    at_key=True,
                )
            )
    defaults = data.get("defaults", {})
    if not isinstance(defaults, dict):
        errors.append(
            error_at(
                pos, ("defaults",), path, "is not a mapping (expected a mapping of scenario fields)"
            )
        )
        defaults = {}
    items = data.get("scenarios")
    if not isinstance(items, list) or not items:
        errors.append(
            error_at(
                pos,
                ("scenarios",),
                path,
                "is not a non-empty list (expected a list of scenario mappings)",
            )
        )
        return [], errors
    out: list[Scenario] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            errors.append(
                error_at(
                    pos, ("scenarios", i), path, "is not a mapping (expected a scenario mapping)"
                )
            )
            continue
        merged = deep_merge(defaults, item)
        merged_pos = _merged_positions(pos, i, "defaults" in data)
        scenario, item_errors = _scenario_from_data(merged, merged_pos, path)
        errors.extend(item_errors)
        if scenario is not None:
            out.append(scenario)
    # A bad default shows up once per item: report it once.
    unique = sorted(set(errors), key=lambda e: (e.line, e.col, e.field, e.message))
    return out, unique


def partial_scenarios(path: Path, data: Any, pos: PosMap) -> list[Scenario]:
    """The scenarios of a file that has errors, each less its invalid values where that is
    sound (``branchpoint.scenarios.partial``), with their positions: what the checks that compare a
    scenario with other files (its rubric's criteria) still run on."""
    if not isinstance(data, dict):
        return []
    if classify(path, data) == "set":
        items = data.get("scenarios")
        defaults = data.get("defaults") if isinstance(data.get("defaults"), dict) else {}
        pairs = [
            (deep_merge(defaults, item), _merged_positions(pos, i, "defaults" in data))
            for i, item in enumerate(items if isinstance(items, list) else [])
            if isinstance(item, dict)
        ]
    else:
        pairs = [(data, pos)]
    out = []
    for item, item_pos in pairs:
        scenario = partial_scenario(item)
        if scenario is not None:
            id_node = item_pos.get(("id",))
            scenario.with_source(
                str(path),
                (id_node.line, id_node.col) if id_node else None,
                {loc: (node.line, node.col) for loc, node in item_pos.items()},
            )
            out.append(scenario)
    return out


def load_scenario_file(path: str | Path) -> tuple[list[Scenario], list[LoadError]]:
    """Every scenario of one file (a single scenario or a set)."""
    data, pos, errors = read_yaml(path)
    if data is None:
        return [], errors
    return _load_parsed(Path(path), data, pos, errors)


def duplicate_id_errors(scenarios: Sequence[Scenario]) -> list[LoadError]:
    """Scenario ids must be unique across everything loaded together."""
    errors: list[LoadError] = []
    first: dict[str, Scenario] = {}
    for s in scenarios:
        if s.id in first:
            line, col = _id_position(s)
            earlier = first[s.id]
            e_line, _ = _id_position(earlier)
            errors.append(
                LoadError(
                    s.source_path or "<memory>",
                    line,
                    col,
                    "id",
                    f"duplicate scenario id '{s.id}' (expected unique ids; first in "
                    f"{earlier.source_path}:{e_line})",
                )
            )
        else:
            first[s.id] = s
    return errors


def _id_position(s: Scenario) -> tuple[int, int]:
    return s.source_pos or (1, 1)


def load_scenarios(
    paths: str | Path | Iterable[str | Path],
) -> tuple[list[Scenario], list[LoadError]]:
    """Load scenario files and folders. Folders skip rubrics, prompt conditions and crisis resources.

    Returns every scenario (each knows its ``source_path``) and every error; callers should refuse
    to run anything while errors are non-empty.
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    paths = list(paths)
    files, errors = yaml_files(paths)
    explicit = {Path(p) for p in paths if Path(p).is_file()}
    scenarios: list[Scenario] = []
    for f in files:
        loaded, file_errors = _load_for_scenarios(f, explicit=f in explicit)
        scenarios.extend(loaded)
        errors.extend(file_errors)
    errors.extend(duplicate_id_errors(scenarios))
    return scenarios, errors


def _load_for_scenarios(path: Path, *, explicit: bool) -> tuple[list[Scenario], list[LoadError]]:
    data, pos, errors = read_yaml(path)
    if data is None:
        return [], errors
    kind = classify(path, data)
    if kind in ("rubric", "prompt", "crisis_resources") and not explicit:
        return [], []
    return _load_parsed(path, data, pos, errors)


def _load_parsed(
    path: Path, data: Any, pos: PosMap, errors: list[LoadError]
) -> tuple[list[Scenario], list[LoadError]]:
    shown = str(path)
    kind = classify(path, data)
    if kind == "set":
        scenarios, more = _set_from_data(data, pos, shown)
    elif kind in ("scenario", "unknown"):
        scenario, more = _scenario_from_data(data, pos, shown)
        scenarios = [scenario] if scenario is not None else []
    else:
        _, root = pos.nearest(())
        more = [
            LoadError(
                shown,
                root.line,
                root.col,
                ROOT_FIELD,
                f"this is a {kind.replace('_', ' ')} file (expected a scenario or a scenario set)",
            )
        ]
        scenarios = []
    all_errors = sorted(set(errors + more), key=lambda e: (e.line, e.col, e.field, e.message))
    return (scenarios if not all_errors else []), all_errors


def require_scenarios(paths: str | Path | Iterable[str | Path]) -> list[Scenario]:
    """Like :func:`load_scenarios`, for commands that must not go on with bad input.

    Raises :class:`~branchpoint.core.errors.UserError` (one line: the first error and how many more)
    when any file has an error or no scenario was found.
    """
    from branchpoint.core.errors import UserError

    if isinstance(paths, (str, Path)):
        paths = [paths]
    paths = list(paths)
    scenarios, errors = load_scenarios(paths)
    shown = " ".join(str(p) for p in paths)
    if errors:
        more = f" (and {len(errors) - 1} more errors)" if len(errors) > 1 else ""
        raise UserError(f"{errors[0]}{more}; see all with 'branchpoint validate {shown}'")
    if not scenarios:
        raise UserError(f"no scenarios found in {shown} (expected scenario YAML files)")
    return scenarios
