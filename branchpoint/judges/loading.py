"""Loading rubrics: a bundled name (``teen``, ``ed``) or a YAML path, with precise errors.

Rubrics load through the same ``branchpoint.core.yamlio.load_model`` as scenarios, so a bad rubric fails
like a bad scenario: one line per problem, ``file:LINE:COL: field.path: message (expected ...)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from branchpoint.judges.rubric import Rubric

if TYPE_CHECKING:
    from branchpoint.core.yamlio import LoadError

RUBRICS_DIR = Path(__file__).resolve().parent / "rubrics"


def bundled_rubrics() -> dict[str, Path]:
    return {p.stem: p for p in sorted(RUBRICS_DIR.glob("*.yaml"))}


def load_rubric_file(path: str | Path) -> tuple[Rubric | None, list[LoadError]]:
    """``(Rubric | None, [LoadError])``: every problem of the file, or the rubric."""
    from branchpoint.core.yamlio import load_model

    return load_model(path, Rubric)


def resolve_rubric_path(name_or_path: str | Path) -> Path:
    from branchpoint.core.errors import UserError

    text = str(name_or_path)
    bundled = bundled_rubrics()
    if text in bundled:
        return bundled[text]
    path = Path(text).expanduser()
    if path.exists():
        return path
    raise UserError(
        f"rubric {text!r}: no such file and no bundled rubric of that name "
        f"(bundled: {', '.join(bundled)}; or give a path to a rubric YAML file)"
    )


def load_rubric(name_or_path: str | Path) -> Rubric:
    """The rubric named ``teen`` / ``ed`` or at a path; raises UserError listing every problem."""
    from branchpoint.core.errors import UserError

    path = resolve_rubric_path(name_or_path)
    rubric, errors = load_rubric_file(path)
    if rubric is None:
        shown = "; ".join(str(e) for e in errors[:10])
        more = f"; and {len(errors) - 10} more" if len(errors) > 10 else ""
        raise UserError(f"{len(errors)} problem(s) in the rubric: {shown}{more}")
    return rubric
