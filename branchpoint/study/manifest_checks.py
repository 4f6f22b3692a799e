"""The manifest's checks beyond its schema: every path, glob, rubric and variant it names.

They run with the schema check, on the parsed YAML (so a schema error elsewhere in the file does
not hide them), and each problem is one positioned line of the manifest; a scenario or rubric
file it names that has errors of its own adds those files' lines. Everything here is known before
any model is called: a misspelt rubric or variant fails ``--plan``, not the judging after the
conversations ran.
"""

from __future__ import annotations

import glob as globbing
from pathlib import Path
from typing import Any

from branchpoint.core.yamlio import LoadError, Loc, PosMap, error_at


def glob_matches(pattern: str, base: Path) -> list[str]:
    """The files ``pattern`` matches, sorted: relative to ``base``, or absolute as written."""
    where = pattern if Path(pattern).is_absolute() else str(base / pattern)
    return sorted(globbing.glob(where, recursive=True))


def resolve_path(text: str, base: Path) -> Path:
    """A path of the manifest: absolute as written, else relative to the manifest's folder."""
    path = Path(text).expanduser()
    return path if path.is_absolute() else base / path


def rubric_reference(name: str, base: Path) -> str:
    """What the judges load for a manifest's rubric: a bundled name as is, a path made absolute
    (relative to the manifest's folder, as its scenario paths are)."""
    from branchpoint.judges.loading import bundled_rubrics

    return name if name in bundled_rubrics() else str(resolve_path(name, base))


def manifest_problems(data: Any, pos: PosMap, path: str | Path) -> list[LoadError]:
    """Every problem of the names in ``data`` (a parsed manifest), in file order."""
    if not isinstance(data, dict):
        return []  # the schema check says what the document should be
    shown = str(path)
    base = Path(path).resolve().parent
    out: list[LoadError] = []

    def at(loc: Loc, message: str) -> None:
        out.append(error_at(pos, loc, shown, message, at_key=False))

    selection = data.get("scenarios")
    sources: list[str] = []
    if isinstance(selection, dict):
        sources = _scenario_sources(selection, base, at)
    complete = not out  # every path and glob names files: the variant filters can be checked
    judges = data.get("judges")
    if isinstance(judges, list):
        for i, judge in enumerate(judges):
            rubrics = judge.get("rubrics") if isinstance(judge, dict) else None
            for j, name in enumerate(rubrics if isinstance(rubrics, list) else []):
                if isinstance(name, str):
                    out += _rubric_problems(name, base, ("judges", i, "rubrics", j), at)
    if sources and complete and isinstance(selection, dict):
        out += _variant_problems(selection, sources, at)
    _cross_field_problems(data, at)
    if isinstance(data.get("analysis"), dict):
        _analysis_problems(data, sources if complete else [], at)
        _analysis_judging_problems(data, base, at)
    return sorted(set(out), key=lambda e: (e.path != shown, e.path, e.line, e.col, e.field))


def _scenario_sources(selection: dict[str, Any], base: Path, at: Any) -> list[str]:
    """The scenario files and folders the selection names; a line for each that names none."""
    found: list[str] = []
    paths = selection.get("paths")
    for i, text in enumerate(paths if isinstance(paths, list) else []):
        if not isinstance(text, str):
            continue
        if not text.strip():
            at(("scenarios", "paths", i), "is empty (expected a scenario file or folder)")
        elif not resolve_path(text, base).exists():
            at(
                ("scenarios", "paths", i),
                f"no such file or folder {text!r} (expected a scenario file or folder; a "
                f"relative path is read from the manifest's folder {base})",
            )
        else:
            found.append(str(resolve_path(text, base)))
    globs = selection.get("globs")
    for i, pattern in enumerate(globs if isinstance(globs, list) else []):
        if not isinstance(pattern, str):
            continue
        if not pattern.strip():
            at(("scenarios", "globs", i), "is empty (expected a pattern such as 'teen/*.yaml')")
            continue
        matches = glob_matches(pattern, base)
        if not matches:
            where = "" if Path(pattern).is_absolute() else f" under {base}"
            at(("scenarios", "globs", i), f"{pattern!r} matches no file{where} (expected a pattern "
               "that matches scenario files)")  # fmt: skip
        found += matches
    return found


def _rubric_problems(name: str, base: Path, loc: Loc, at: Any) -> list[LoadError]:
    from branchpoint.judges.loading import bundled_rubrics, load_rubric_file

    ref = rubric_reference(name, base)
    if ref == name and not Path(ref).is_absolute():  # bundled
        return []
    if not Path(ref).is_file():
        at(
            loc,
            f"rubric {name!r} is no bundled rubric and no file (expected one of: "
            f"{', '.join(bundled_rubrics())}, or a rubric YAML path relative to the manifest)",
        )
        return []
    _, errors = load_rubric_file(ref)
    return list(errors)


def _variant_problems(selection: dict[str, Any], sources: list[str], at: Any) -> list[LoadError]:
    """The named scenarios' own errors, or a line for each variant filter that keeps nothing."""
    from branchpoint.scenarios.loader import load_scenarios
    from branchpoint.scenarios.variants import expand

    scenarios, errors = load_scenarios(sources)
    if errors:
        return list(errors)
    if not scenarios:
        at(("scenarios",), "the paths and globs name no scenario (expected scenario files)")
        return []
    known = {v.id for s in scenarios for v in expand(s)}
    for field in ("variants", "exclude_variants"):
        ids = selection.get(field)
        for i, vid in enumerate(ids if isinstance(ids, list) else []):
            if isinstance(vid, str) and vid not in known:
                at(
                    ("scenarios", field, i),
                    f"no variant {vid!r} in these scenarios (expected a variant id; see "
                    "`branchpoint variants FILE`)",
                )
    return []


def _cross_field_problems(data: dict[str, Any], at: Any) -> None:
    """The schema's checks across items, run again on the parsed YAML: pydantic runs them only
    once every item is valid, so a duplicate target beside a misspelt one, or a batch judge under
    a budget beside any other mistake, showed up only on the next pass. The messages are the
    schema's own (``branchpoint.study.manifest.Manifest``), so a problem found both ways is one line."""
    for field, role in (("targets", "target"), ("simulators", "simulator")):
        items = data.get(field)
        seen: dict[str, int] = {}
        for i, item in enumerate(items if isinstance(items, list) else []):
            spec = (
                item
                if isinstance(item, str)
                else (item or {}).get("spec")
                if isinstance(item, dict)
                else None
            )
            if not isinstance(spec, str):
                continue
            if spec in seen:
                at(
                    (field, i, "spec"),  # the schema's loc, short form or not (one line)
                    f"{role} {spec!r} is listed twice (expected each once; first is "
                    f"{field}[{seen[spec]}])",
                )
            else:
                seen[spec] = i
    judges = data.get("judges")
    if data.get("budget") is not None and isinstance(judges, list):
        for i, judge in enumerate(judges):
            if isinstance(judge, dict) and judge.get("batch") is True:
                at(
                    ("judges", i, "batch"),
                    "batch judging cannot be bounded by a budget yet (expected batch: false, "
                    "or no budget)",
                )


def _analysis_problems(data: dict[str, Any], sources: list[str], at: Any) -> None:
    """The ``analysis:`` block names what the manifest runs: its targets and conditions, and
    branch points and options of its scenarios (``sources``: empty when they could not be read)."""
    block = data["analysis"]
    targets = [str(t.get("spec") if isinstance(t, dict) else t) for t in data.get("targets") or []]
    conditions = data.get("conditions") or ["none"]
    options: dict[str, set[str]] = {}
    if sources:
        from branchpoint.scenarios.loader import load_scenarios

        scenarios, errors = load_scenarios(sources)
        if not errors:
            for scenario in scenarios:
                for point in scenario.branch_points:
                    options.setdefault(point.id, set()).update(point.options)

    def known(loc: Loc, value: Any, names: list[str], what: str) -> None:
        if isinstance(value, str) and value not in names:
            at(loc, f"{value!r} is not one of the manifest's {what} (expected one of: "
               f"{', '.join(map(str, names))})")  # fmt: skip

    scope = block.get("scope") if isinstance(block.get("scope"), dict) else {}
    for i, t in enumerate(scope.get("targets") or []):
        known(("analysis", "scope", "targets", i), t, targets, "targets")
    for i, c in enumerate(scope.get("conditions") or []):
        known(("analysis", "scope", "conditions", i), c, conditions, "conditions")
    primary = block.get("primary")
    for i, contrast in enumerate(primary if isinstance(primary, list) else []):
        if not isinstance(contrast, dict):
            continue
        loc = ("analysis", "primary", i)
        for j, t in enumerate(contrast.get("chatbots") or []):
            known((*loc, "chatbots", j), t, targets, "targets")
        for key in ("condition", "reference"):
            if key in contrast:
                known((*loc, key), contrast[key], conditions, "conditions")
        bp, opt = contrast.get("branch_point"), contrast.get("option")
        if options and isinstance(bp, str):
            if bp not in options:
                at((*loc, "branch_point"), f"no branch point {bp!r} in the scenarios (expected "
                   f"one of: {', '.join(sorted(options))})")  # fmt: skip
            elif isinstance(opt, str) and opt not in options[bp]:
                at((*loc, "option"), f"branch point {bp!r} has no option {opt!r} (expected one "
                   f"of: {', '.join(sorted(options[bp]))})")  # fmt: skip


def _judged_rubrics(judges: list[Any], base: Path) -> dict[str, dict[str, list[str]]]:
    """Judge spec -> rubric id -> its criterion ids, of the rubrics that load."""
    from branchpoint.core.errors import UserError
    from branchpoint.judges.loading import load_rubric_file, resolve_rubric_path

    out: dict[str, dict[str, list[str]]] = {}
    for judge in judges:
        spec = judge.get("spec") if isinstance(judge, dict) else judge
        rubrics = judge.get("rubrics") if isinstance(judge, dict) else None
        if not isinstance(spec, str):
            continue
        found = out.setdefault(spec, {})
        for name in rubrics if isinstance(rubrics, list) else []:
            if not isinstance(name, str):
                continue
            try:
                rubric, _ = load_rubric_file(resolve_rubric_path(rubric_reference(name, base)))
            except UserError:  # its own line comes from _rubric_problems
                continue
            if rubric is not None:
                found[rubric.id] = [c.id for c in rubric.criteria]
    return out


def _analysis_judging_problems(data: dict[str, Any], base: Path, at: Any) -> None:
    """The block's ``rubric``, ``judge`` and ``criteria`` name what the manifest judges: a
    rubric, judge or criterion it does not left the family untestable ('no pair rated in both
    arms'), found only in the report."""
    block = data["analysis"]
    judges = data.get("judges")
    if not isinstance(judges, list) or not judges:
        return
    judged = _judged_rubrics(judges, base)
    judge = block.get("judge")
    if isinstance(judge, str) and judge not in judged:
        at(("analysis", "judge"), f"{judge!r} is not a judge of the manifest (expected one of: "
           f"{', '.join(judged)})")  # fmt: skip
        judge = None
    by_judge = judged[judge] if isinstance(judge, str) else {
        rid: crit for rubrics in judged.values() for rid, crit in rubrics.items()}  # fmt: skip
    if not by_judge:
        return  # the rubrics did not load: their own lines say why
    rubric = block.get("rubric")
    if isinstance(rubric, str) and rubric not in by_judge:
        whose = f"judge {judge!r}" if isinstance(judge, str) else "the manifest"
        at(("analysis", "rubric"), f"{rubric!r} is not a rubric {whose} judges (expected one "
           f"of: {', '.join(by_judge)})")  # fmt: skip
        rubric = None
    if isinstance(rubric, str):
        criteria, of = by_judge[rubric], f"the rubric {rubric!r}"
    elif len(by_judge) == 1:
        ((only, criteria),) = by_judge.items()
        of = f"the rubric {only!r}"
    else:
        criteria = sorted({c for crit in by_judge.values() for c in crit})
        of = "the rubrics judged"
    names = block.get("criteria")
    for i, name in enumerate(names if isinstance(names, list) else []):
        if isinstance(name, str) and name not in criteria:
            at(("analysis", "criteria", i), f"{name!r} is not a criterion of {of} (expected "
               f"one of: {', '.join(criteria)})")  # fmt: skip
