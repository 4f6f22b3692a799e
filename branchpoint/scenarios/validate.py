"""``branchpoint validate``: every YAML file of the project's formats, each with its own model.

When rubrics are validated together with scenarios (``branchpoint validate branchpoint/scenarios/library
branchpoint/judges/rubrics``), every criterion a scenario lists must be defined by one of those rubrics.
Rubrics belong to ``judges``, a layer above this one, so the caller passes their loader in.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from branchpoint.core.yamlio import LoadError, read_yaml
from branchpoint.scenarios.conditions import load_condition_file, load_crisis_resources_file
from branchpoint.scenarios.loader import (
    _load_parsed,
    classify,
    duplicate_id_errors,
    partial_scenarios,
    yaml_files,
)
from branchpoint.scenarios.models import Scenario


@dataclass
class ValidationReport:
    files: int = 0
    scenarios: list[Scenario] = field(default_factory=list)
    rubrics: int = 0
    prompts: int = 0
    errors: list[LoadError] = field(default_factory=list)

    def summary(self) -> str:
        return f"{self.files} files, {len(self.scenarios)} scenarios, {len(self.errors)} errors"


def unknown_criteria_errors(scenarios: Iterable[Scenario], known: set[str]) -> list[LoadError]:
    errors: list[LoadError] = []
    for s in scenarios:
        for i, crit in enumerate(s.criteria):
            if crit in known:
                continue
            line, col = s.position_of(("criteria", i))
            close = difflib.get_close_matches(crit, sorted(known), n=1, cutoff=0.6)
            hint = (
                f"did you mean '{close[0]}'?"
                if close
                else "expected a criterion id of the rubrics given"
            )
            errors.append(
                LoadError(
                    s.source_path or "<memory>",
                    line,
                    col,
                    f"criteria[{i}]",
                    f"criterion '{crit}' is in none of the rubrics validated with it ({hint})",
                )
            )
    return errors


def rubric_name_errors(
    scenarios: Iterable[Scenario], rubrics: dict[str, set[str]]
) -> list[LoadError]:
    """A scenario's ``rubric`` given by name must be one of the rubrics validated with it, and
    every criterion it lists must be in that rubric (a path is checked when it is judged)."""
    errors: list[LoadError] = []
    known = set().union(*rubrics.values()) if rubrics else set()
    for s in scenarios:
        if not s.rubric or "/" in s.rubric or s.rubric.endswith((".yaml", ".yml")):
            continue
        where = s.source_path or "<memory>"
        if s.rubric not in rubrics:
            line, col = s.position_of(("rubric",))
            errors.append(
                LoadError(
                    where,
                    line,
                    col,
                    "rubric",
                    f"rubric '{s.rubric}' is none of the rubrics validated with it "
                    f"(expected one of: {', '.join(sorted(rubrics))}, or a rubric YAML path)",
                )
            )
            continue
        for i, crit in enumerate(s.criteria):
            # a criterion in no rubric at all is already reported by unknown_criteria_errors
            if crit in known and crit not in rubrics[s.rubric]:
                line, col = s.position_of(("criteria", i))
                errors.append(
                    LoadError(
                        where,
                        line,
                        col,
                        f"criteria[{i}]",
                        f"criterion '{crit}' is not in rubric '{s.rubric}' "
                        "(expected a criterion of the rubric the scenario names)",
                    )
                )
    return errors


# ``(rubric or None, [LoadError])`` for a rubric file, as ``judges.load_rubric_file`` returns.
RubricLoader = Callable[[Path], tuple[Any, Sequence[LoadError]]]


def named_rubric_errors(
    scenarios: Iterable[Scenario], rubric_loader: RubricLoader, bundled: Mapping[str, Path]
) -> list[LoadError]:
    """Each scenario's criteria against the rubric it names (``rubric:``, a bundled name or a
    path relative to its file), loaded with ``rubric_loader``: a criterion the rubric lacks
    would be dropped at judging without a word. The rubric's own errors are reported too."""
    errors: list[LoadError] = []
    loaded: dict[Path, set[str] | None] = {}
    for s in scenarios:
        if not s.rubric:
            errors.extend(_unnamed_rubric_errors(s, rubric_loader, bundled, loaded))
            continue
        where = s.source_path or "<memory>"
        path = bundled.get(s.rubric) or Path(where).parent / Path(s.rubric).expanduser()
        if not path.is_file():
            line, col = s.position_of(("rubric",))
            errors.append(
                LoadError(
                    where, line, col, "rubric",
                    f"rubric '{s.rubric}' is no bundled rubric and no file (expected one of: "
                    f"{', '.join(sorted(bundled))}, or a rubric YAML path relative to this file)",
                )
            )  # fmt: skip
            continue
        if path not in loaded:
            rubric, more = rubric_loader(path)
            errors.extend(more)
            loaded[path] = (
                None if rubric is None else {str(c.id) for c in getattr(rubric, "criteria", [])}
            )
        known = loaded[path]
        if known is None:
            continue  # the rubric's own errors say why
        known = known | {c.id for c in s.custom_criteria}
        errors += _missing_criteria(
            s, known, f"is not in rubric '{s.rubric}'", "expected one of its criteria"
        )
    return errors


def _missing_criteria(s: Scenario, known: set[str], what: str, expected: str) -> list[LoadError]:
    """A line for each criterion of ``s`` not in ``known``: ``criterion 'x' WHAT (did you mean
    'y'? / EXPECTED)``."""
    errors: list[LoadError] = []
    for i, crit in enumerate(s.criteria):
        if crit in known:
            continue
        line, col = s.position_of(("criteria", i))
        close = difflib.get_close_matches(crit, sorted(known), n=1, cutoff=0.6)
        hint = f"did you mean '{close[0]}'?" if close else expected
        errors.append(
            LoadError(
                s.source_path or "<memory>", line, col, f"criteria[{i}]",
                f"criterion '{crit}' {what} ({hint})",
            )
        )  # fmt: skip
    return errors


def _unnamed_rubric_errors(
    s: Scenario,
    rubric_loader: RubricLoader,
    bundled: Mapping[str, Path],
    loaded: dict[Path, set[str] | None],
) -> list[LoadError]:
    """A scenario that names no rubric: each criterion must be one that some bundled rubric or
    the scenario's own ``custom_criteria`` defines, else ``judge`` would drop it without a word
    (a criterion of a rubric file of one's own is checked once ``rubric:`` names that file)."""
    known = {c.id for c in s.custom_criteria}
    for path in bundled.values():
        if path not in loaded:
            rubric, _ = rubric_loader(path)
            loaded[path] = (
                None if rubric is None else {str(c.id) for c in getattr(rubric, "criteria", [])}
            )
        known |= loaded[path] or set()
    return _missing_criteria(
        s, known, "is in no bundled rubric and not in custom_criteria",
        "expected a bundled criterion, or `rubric:` naming the rubric file that has it",
    )  # fmt: skip


def validate_paths(
    paths: Iterable[str | Path],
    progress: Callable[[int, int], None] | None = None,
    rubric_loader: RubricLoader | None = None,
    bundled_rubrics: Mapping[str, Path] | None = None,
) -> ValidationReport:
    """Check every file under ``paths``; ``progress(done, total)`` is called after each file.

    Without ``rubric_loader`` a rubric file is reported as one error (no loader to check it).
    With it, and no rubric among ``paths``, each scenario's criteria are checked against the
    rubric it names (``bundled_rubrics``: name -> file)."""
    report = ValidationReport()
    files, errors = yaml_files(paths)
    report.errors.extend(errors)
    criterion_ids: set[str] = set()
    rubric_criteria: dict[str, set[str]] = {}
    condition_ids: dict[str, str] = {}
    checkable: list[Scenario] = []  # the loaded scenarios, and those of files with errors
    for path in files:
        if progress is not None:
            progress(report.files, len(files))
        report.files += 1
        data, pos, file_errors = read_yaml(path)
        if data is None:
            report.errors.extend(file_errors)
            continue
        kind = classify(path, data)
        if kind == "rubric":
            if rubric_loader is None:
                report.errors.append(
                    LoadError(
                        str(path),
                        1,
                        1,
                        "<file>",
                        "a rubric file, and no rubric loader was given (expected a scenario file)",
                    )
                )
                continue
            rubric, more = rubric_loader(path)
            report.rubrics += 1
            report.errors.extend(file_errors + list(more))
            if rubric is not None:
                own = {str(c.id) for c in getattr(rubric, "criteria", [])}
                criterion_ids.update(own)
                rubric_criteria[str(getattr(rubric, "id", path.stem))] = own
        elif kind == "prompt":
            condition, more = load_condition_file(path)
            report.prompts += 1
            report.errors.extend(more)
            if condition is not None:
                where = pos.get(("id",))
                line, col = (where.line, where.col) if where else (1, 1)
                if condition.id in condition_ids:
                    report.errors.append(
                        LoadError(
                            str(path),
                            line,
                            col,
                            "id",
                            f"duplicate condition id '{condition.id}' (expected unique ids; first in "
                            f"{condition_ids[condition.id]})",
                        )
                    )
                else:
                    condition_ids[condition.id] = f"{path}:{line}"
        elif kind == "crisis_resources":
            _, more = load_crisis_resources_file(path)
            report.errors.extend(more)
        else:
            scenarios, more = _load_parsed(path, data, pos, file_errors)
            report.scenarios.extend(scenarios)
            report.errors.extend(more)
            # a file with errors still has its criteria checked, as far as that is sound
            checkable.extend(scenarios if not more else partial_scenarios(path, data, pos))
    report.errors.extend(duplicate_id_errors(report.scenarios))
    if criterion_ids:  # rubrics validated together: scenario criteria must name their criteria
        report.errors.extend(unknown_criteria_errors(checkable, criterion_ids))
        report.errors.extend(rubric_name_errors(checkable, rubric_criteria))
    elif rubric_loader is not None:
        more = named_rubric_errors(checkable, rubric_loader, bundled_rubrics or {})
        report.errors.extend(more)
    # Unique, in file order then position, so the output reads top to bottom.
    rank = {str(f): i for i, f in enumerate(files)}
    report.errors = sorted(
        dict.fromkeys(report.errors), key=lambda e: (rank.get(e.path, len(rank)), e.line, e.col)
    )
    return report
