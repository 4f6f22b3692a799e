"""``branchpoint labels export`` and ``branchpoint labels import``: human labels as CSV, so that
clinicians who label in a spreadsheet count as much as those who use ``branchpoint tui``.

Columns (a header row first; the order is free, unknown columns are an error):

  conversation_id  required; must exist in the store
  turn_index       the turn's index in the transcript; empty for the whole conversation; must be
                   a turn of that conversation (for realism: a persona turn)
  rubric_id        required: teen, ed, another rubric id, or realism (persona realism ratings)
  criterion_id     required (for realism: persona_realism or conversation_realism)
  annotator        required: who labelled
  verdict          a level of the rubric's scale (pass/partial/fail; high/medium/low/refusal;
                   very/mostly/mixed/not for realism); empty: not applicable
  note, confidence (low/medium/high or empty), time_spent_s (seconds), blind (true/false or empty)
  design_id        the labelling design whose queue the item came from (as exported); empty:
                   made outside any design, kept but not used by the judge-corrected estimates.
                   When given, the design must be in the store and must have drawn this item.

An import is checked whole before anything is stored: every problem is one line
``FILE:LINE:COL: field: problem (expected ...)`` and nothing is written. Importing a label again
replaces the earlier one (one label per annotator and key).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated, Any

import typer

from branchpoint.core.errors import UserError
from branchpoint.tui.commands.options import DbOption

REQUIRED = ("conversation_id", "rubric_id", "criterion_id", "annotator", "verdict")
TRUE = {"true", "yes", "1"}
FALSE = {"false", "no", "0"}
MAX_SHOWN = 50


class LabelFileError(UserError):
    """Problems in a labels CSV, one line each."""


def field_columns(line: str) -> list[int]:
    """1-based column where each CSV field of ``line`` starts (quotes respected)."""
    starts, quoted = [1], False
    for i, ch in enumerate(line):
        if ch == '"':
            quoted = not quoted
        elif ch == "," and not quoted:
            starts.append(i + 2)
    return starts


def read_label_file(
    path: Path,
    known_conversations: Any,
    drawn_items: Any = lambda designs: set(),
    known_criteria: dict[str, set[str]] | None = None,
    turn_roles: Callable[[Iterable[str]], dict[tuple[str, int], str]] | None = None,
) -> list[Any]:
    """The rows of a labels CSV as ``LabelRow``; raises LabelFileError listing every problem.

    ``known_conversations(ids) -> set`` says which conversation ids the store holds;
    ``drawn_items(design_ids) -> set`` the (design_id, conversation_id, turn_index, rubric_id,
    criterion_id) items those designs drew.
    ``known_criteria`` (rubric id -> criterion ids), when given, which rubrics and criteria a
    label may name: a label no judgment can be compared with is refused, not stored unseen.
    ``turn_roles(ids)`` (``branchpoint.core.read.turn_roles``), when given, checks every ``turn_index``: a
    turn of its conversation, and for a realism rating a persona turn (a rating nobody can pair
    with the automatic rater's is a mistake, not a label).
    """
    from branchpoint.core.human_labels import (
        CONFIDENCE_LEVELS,
        LABEL_COLUMNS,
        REALISM_CONVERSATION,
        REALISM_RUBRIC,
        REALISM_TURN,
        LabelRow,
    )
    from branchpoint.tui.app.label_scales import levels_for

    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise LabelFileError(f"{path}: no such file") from None
    except UnicodeDecodeError as exc:
        raise LabelFileError(
            f"{path}:1:1: file: not UTF-8 ({exc.reason}) (expected a UTF-8 CSV)"
        ) from None
    physical = text.splitlines()
    reader = csv.reader(io.StringIO(text, newline=""))
    problems: list[str] = []

    def problem(line: int, col: int, field: str, what: str) -> None:
        problems.append(f"{path}:{line}:{col}: {field}: {what}")

    try:
        header = next(reader)
        while not any(h.strip() for h in header):  # blank lines before the header: still empty
            header = next(reader)
    except StopIteration:
        raise LabelFileError(
            f"{path}:1:1: header: empty file (expected a header row: {', '.join(LABEL_COLUMNS)})"
        ) from None
    header = [h.strip() for h in header]
    cols = field_columns(physical[0]) if physical else [1]
    for i, name in enumerate(header):
        if name not in LABEL_COLUMNS:
            problem(
                1,
                cols[min(i, len(cols) - 1)],
                name or "header",
                f"unknown column (expected one of {', '.join(LABEL_COLUMNS)})",
            )
    for name in REQUIRED:
        if name not in header:
            problem(1, 1, name, "missing column (expected it in the header row)")
    if problems:
        raise LabelFileError("\n".join(problems))

    rows: list[tuple[int, list[int], dict[str, str]]] = []
    last_line = reader.line_num
    try:
        for record in reader:
            start = last_line + 1
            last_line = reader.line_num
            if not any(v.strip() for v in record):
                continue
            cols = field_columns(physical[start - 1]) if start - 1 < len(physical) else [1]
            if len(record) != len(header):
                problem(
                    start,
                    1,
                    "row",
                    f"{len(record)} fields (expected {len(header)}, as in the header)",
                )
                continue
            rows.append((start, cols, dict(zip(header, record))))
    except csv.Error as exc:
        problem(reader.line_num, 1, "row", f"{exc} (expected valid CSV)")

    if not rows and not problems:
        raise LabelFileError(
            f"{path}:{last_line + 1}:1: row: no labels after the header (expected one row per label)"
        )
    known = known_conversations({r["conversation_id"].strip() for _, _, r in rows})
    drawn = drawn_items({r.get("design_id", "").strip() for _, _, r in rows} - {""})
    roles = turn_roles(known) if turn_roles is not None else None
    out = []
    for line, cols, raw in rows:

        def at(name: str, cols: list[int] = cols) -> int:
            return cols[min(header.index(name), len(cols) - 1)]

        values: dict[str, Any] = {k: v.strip() if k != "note" else v for k, v in raw.items()}
        for name in ("conversation_id", "rubric_id", "criterion_id", "annotator"):
            if not values[name]:
                problem(line, at(name), name, "empty (expected a value)")
        if known_criteria is not None:
            _check_criterion(
                values, known_criteria, lambda n, w, row=line: problem(row, at(n), n, w)
            )
        cid = values["conversation_id"]
        if cid and cid not in known:
            problem(
                line,
                at("conversation_id"),
                "conversation_id",
                f"{cid!r} is not in the store (expected a conversation id from this store)",
            )
        turn = values.get("turn_index", "")
        values["turn_index"] = None
        if turn:
            if turn.isdigit():
                values["turn_index"] = int(turn)
                if roles is not None and cid in known:
                    bad = _turn_problem(cid, int(turn), values["rubric_id"], roles)
                    if bad:
                        problem(line, at("turn_index"), "turn_index", bad)
            else:
                problem(
                    line,
                    at("turn_index"),
                    "turn_index",
                    f"{turn!r} is not a turn index (expected a whole number >= 0, or empty)",
                )
        verdict = values["verdict"]
        levels = levels_for(values["rubric_id"]) if values["rubric_id"] else ()
        if verdict and verdict not in levels:
            problem(
                line,
                at("verdict"),
                "verdict",
                f"{verdict!r} is not a level of {values['rubric_id']!r} (expected {' / '.join(levels)}, or empty for not applicable)",
            )
        if values["rubric_id"] == REALISM_RUBRIC and not verdict:
            problem(
                line,
                at("verdict"),
                "verdict",
                "empty (expected a realism level: very / mostly / mixed / not)",
            )
        if values["rubric_id"] == REALISM_RUBRIC and values["criterion_id"]:
            # A persona turn's rating and a whole conversation's pair with different things.
            want = (
                REALISM_TURN if values["turn_index"] is not None or turn else REALISM_CONVERSATION
            )
            if values["criterion_id"] != want:
                problem(
                    line,
                    at("criterion_id"),
                    "criterion_id",
                    f"{values['criterion_id']!r} (expected {want} for a realism rating "
                    + (
                        "of one persona turn)"
                        if want == REALISM_TURN
                        else "with no turn_index: the whole conversation)"
                    ),
                )
        values["verdict"] = verdict or None
        conf = values.get("confidence", "")
        if conf and conf not in CONFIDENCE_LEVELS:
            problem(
                line,
                at("confidence"),
                "confidence",
                f"{conf!r} (expected {' / '.join(CONFIDENCE_LEVELS)}, or empty)",
            )
        values["confidence"] = conf or None
        spent = values.get("time_spent_s", "")
        values["time_spent_s"] = None
        if spent:
            try:
                values["time_spent_s"] = float(spent)
                if not values["time_spent_s"] >= 0:
                    raise ValueError
            except ValueError:
                problem(
                    line,
                    at("time_spent_s"),
                    "time_spent_s",
                    f"{spent!r} (expected seconds, a number >= 0, or empty)",
                )
        blind = values.get("blind", "").lower()
        values["blind"] = True if blind in TRUE else False if blind in FALSE else None
        if blind and blind not in TRUE | FALSE:
            problem(line, at("blind"), "blind", f"{blind!r} (expected true or false, or empty)")
        design = values.get("design_id", "")
        values["design_id"] = design or None
        key = (design, cid, values["turn_index"], values["rubric_id"], values["criterion_id"])
        if design and key not in drawn:
            problem(
                line,
                at("design_id"),
                "design_id",
                f"{design!r} did not draw this item (expected a design of this store that drew "
                "it, or empty for a label outside any design)",
            )
        out.append(LabelRow(**values))
    if problems:
        shown = problems[:MAX_SHOWN]
        if len(problems) > MAX_SHOWN:
            shown.append(f"{path}: and {len(problems) - MAX_SHOWN} more problems")
        raise LabelFileError("\n".join(shown))
    return out


def _turn_problem(cid: str, index: int, rubric_id: str, roles: dict[tuple[str, int], str]) -> str:
    """Why turn ``index`` of ``cid`` cannot carry a label of ``rubric_id``, or ""."""
    from branchpoint.core.human_labels import REALISM_RUBRIC

    role = roles.get((cid, index))
    expected = (
        "expected the index of a persona turn of that conversation, or an empty turn_index with "
        "criterion_id conversation_realism for the whole conversation"
    )
    if rubric_id == REALISM_RUBRIC and role != "user":
        what = "it has no such turn" if role is None else "it is the chatbot's"
        return f"{index} is not a persona turn of {cid!r} ({what}; {expected})"
    if role is None:
        return f"{index} is not a turn of {cid!r} (expected a turn index of that conversation, or empty)"
    return ""


def write_label_file(rows: Any, out: Path) -> int:
    from branchpoint.core.human_labels import LABEL_COLUMNS

    n = 0
    with out.open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(LABEL_COLUMNS))
        writer.writeheader()
        for row in rows:
            data = row.model_dump()
            data = {
                k: ("" if v is None else str(v).lower() if isinstance(v, bool) else v)
                for k, v in data.items()
            }
            writer.writerow(data)
            n += 1
    return n


labels_app = typer.Typer(
    help="Human labels as CSV: export them, or import labels made in a spreadsheet.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@labels_app.command("export")
def export_command(
    out: Annotated[Path, typer.Option("--out", metavar="FILE.csv", help="File to write.")],
    run: Annotated[
        str | None, typer.Option("--run", metavar="RUN", help="Only this run's conversations.")
    ] = None,
    db: DbOption = None,
) -> None:
    """Write every human label (and realism rating) as CSV, in the columns `labels import` reads."""
    from branchpoint.core.human_labels import iter_labels
    from branchpoint.core.store import open_store

    if out.parent and not out.parent.exists():
        raise UserError(f"--out {out}: no such directory {out.parent}")
    store = open_store(db, create=False)
    try:
        n = write_label_file(iter_labels(store, run), out)
    finally:
        store.close()
    typer.echo(f"wrote {n} labels to {out}")


def _check_criterion(values: dict[str, Any], known: dict[str, set[str]], problem: Any) -> None:
    """A line for a rubric or criterion id in ``known`` (and realism's) nowhere."""
    import difflib

    from branchpoint.core.human_labels import REALISM_CONVERSATION, REALISM_RUBRIC, REALISM_TURN

    known = {**known, REALISM_RUBRIC: {REALISM_TURN, REALISM_CONVERSATION}}
    rubric, criterion = values["rubric_id"], values["criterion_id"]
    if not rubric or not criterion:
        return  # said empty already
    if rubric not in known:
        problem(
            "rubric_id",
            f"{rubric!r} is the rubric of no judgment in this store (expected one of: "
            f"{', '.join(sorted(known))})",
        )
    elif criterion not in known[rubric]:
        close = difflib.get_close_matches(criterion, sorted(known[rubric]), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}?" if close else "expected a criterion it judged"
        problem("criterion_id", f"{criterion!r} is no criterion of {rubric!r} judged here ({hint})")


def _judged_criteria(store: Any) -> dict[str, set[str]]:
    """Rubric id -> the criterion ids the store's judgments have."""
    from sqlmodel import select

    from branchpoint.core.records import Judgment

    out: dict[str, set[str]] = {}
    with store.session() as s:
        for rubric, criterion in s.exec(
            select(Judgment.rubric_id, Judgment.criterion_id).distinct()
        ):
            out.setdefault(rubric, set()).add(criterion)
    return out


@labels_app.command("import")
def import_command(
    file: Annotated[
        Path,
        typer.Argument(metavar="FILE.csv", help="Labels CSV (columns: listed above)."),
    ],
    db: DbOption = None,
) -> None:
    """Check a labels CSV whole and store its labels; on any problem, list them all and store none.

    Columns: conversation_id, turn_index (empty: whole conversation), rubric_id, criterion_id,
    annotator, verdict (empty: not applicable), note, confidence (low/medium/high), time_spent_s,
    blind (true/false), design_id (empty: outside any labelling design)."""
    from branchpoint.core.human_labels import drawn_items, save_labels
    from branchpoint.core.read import existing_conversations, turn_roles
    from branchpoint.core.store import open_store

    store = open_store(db, create=False)
    try:
        rows = read_label_file(
            file,
            lambda ids: existing_conversations(store, ids),
            lambda designs: drawn_items(store, designs),
            _judged_criteria(store),
            lambda ids: turn_roles(store, ids),
        )
        n = save_labels(store, rows)
    finally:
        store.close()
    typer.echo(f"imported {n} labels from {file}")


@labels_app.command("plan")
def plan_command(
    width: Annotated[
        float,
        typer.Option(
            "--width",
            min=0.1,
            max=50,
            metavar="PP",
            help="Target half-width of each stratum's corrected failure rate, in percentage points.",
        ),
    ] = 5.0,
    run: Annotated[
        str | None, typer.Option("--run", metavar="RUN", help="Only this run's conversations.")
    ] = None,
    by_criterion: Annotated[
        bool,
        typer.Option(
            "--by-criterion",
            help="Strata target x condition x criterion (before any design; a design keeps its own).",
        ),
    ] = False,
    db: DbOption = None,
) -> None:
    """How many blind design labels each stratum (judge x target x condition) needs for a
    judge-corrected failure rate of +/- WIDTH points at 95%, from the judge's disagreement with
    the labels so far (before any label: a stated prior of 15% disagreement)."""
    from branchpoint.analysis.judge_correction.estimators import label_plan
    from branchpoint.core.human_labels import design_population, designs_of
    from branchpoint.core.store import open_store

    store = open_store(db, create=False)
    try:
        # the designs' strata counted now (once), so that their inclusion probabilities are stored
        for design in designs_of(store):
            design_population(store, design)
        table, notes = label_plan(store, run, width=width, by_criterion=by_criterion)
    finally:
        store.close()
    for note in notes:
        typer.echo(note)
    if table.empty:
        typer.echo("no judged turns to label")
        return
    typer.echo(f"labels for a half-width of {width:g} points (95%):")
    head = f"{'judge':24} {'stratum':44} {'judged':>8} {'labelled':>8} {'disagree':>8} {'needed':>7} {'more':>6}"
    typer.echo(head)
    for r in table.itertuples():
        typer.echo(
            f"{_cell(r.judge, 24)} {_cell(r.stratum, 44)} {r.judged:>8} {r.labelled:>8} "
            f"{r.disagreement:>8.1%} {r.needed:>7} {r.more:>6}"
        )
    typer.echo(f"total more labels: {int(table['more'].sum())}")


def _cell(value: object, width: int) -> str:
    """A column of plain text: control characters as escapes (branchpoint.core.untrusted), cut to ``width``."""
    from branchpoint.core.untrusted import visible

    text = visible(value, multiline=False)
    return (text if len(text) <= width else text[: width - 1] + "~").ljust(width)


def register(app: typer.Typer) -> None:
    app.add_typer(labels_app, name="labels")
