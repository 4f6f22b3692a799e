"""``branchpoint export``, ``analyze`` and ``report``: tables, headline statistics and reports.

Heavy packages (pandas, scipy, matplotlib) are imported inside the commands so that
``branchpoint --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from branchpoint.core.errors import UserError
from branchpoint.tui.commands.json_rows import json_records
from branchpoint.tui.commands.options import DbOption

RunArg = Annotated[
    str | None, typer.Argument(help="Run id to analyse (see `branchpoint show`); or give --all.")
]
AllOpt = Annotated[bool, typer.Option("--all", help="Analyse every run in the store together.")]
BootOpt = Annotated[
    int,
    typer.Option(
        "--n-boot", min=0, help="Bootstrap replicates for the intervals (0: no intervals)."
    ),
]
SeedOpt = Annotated[
    int, typer.Option("--seed", help="Seed of the bootstrap, for reproducible intervals.")
]
BaselineOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--baseline",
        help="BRANCH_POINT=OPTION: the baseline option of a branch point, when the scenario file "
        "is not at hand (default: from the scenario file, else the option most arms share). Repeatable.",
    ),
]

ExcludeRetriedOpt = Annotated[
    bool,
    typer.Option(
        "--exclude-retried",
        help="Leave out the conversations that `--retry-failed` ran again (their verdicts too).",
    ),
]


def _runs(run: str | None, all_runs: bool) -> str | None:
    if run is None and not all_runs:
        raise UserError("give a RUN id or --all")
    if run is not None and all_runs:
        raise UserError("give either a RUN id or --all, not both")
    return run


def _store(db: str | None) -> Any:
    from branchpoint.core.store import open_store

    return open_store(db, create=False)


def _baselines(items: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        if "=" not in item or not item.split("=", 1)[0] or not item.split("=", 1)[1]:
            raise UserError(
                f"--baseline {item!r}: expected BRANCH_POINT=OPTION, e.g. limit=accept_limit"
            )
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def register(app: typer.Typer) -> None:
    @app.command("export")
    def export(
        run: RunArg = None,
        all_runs: AllOpt = False,
        fmt: Annotated[
            str,
            typer.Option(
                "--format",
                help="csv, parquet or jsonl; for --level transcript jsonl or parquet; inspect: "
                "Inspect AI eval logs into the --out folder (needs branchpoint[inspect]).",
            ),
        ] = "csv",
        out: Annotated[
            Path | None, typer.Option("--out", help="File to write (a folder for inspect).")
        ] = None,
        level: Annotated[
            str | None,
            typer.Option(
                "--level",
                help="unit (default): one row per unit of analysis, a judged chatbot turn x "
                "criterion x judge counted once however many arms carry it, as every count and "
                "rate of analyze and report counts it (the arm that produced it, the arms that "
                "carry it and how many, the verdict); judgment: every stored verdict row, "
                "copies of a shared-prefix turn included and flagged (origin_turn_id, "
                "shared_prefix), with rationale, evidence, error and raw output; turn: every "
                "stored message, copies included and flagged (text, role, exchange, fork, fired "
                "branch points, events); arm: one row per conversation x branch "
                "point (realised or not); transcript: one record per conversation (messages, "
                "arm, fork, verdicts); conversation: per conversation x criterion counts; "
                "realisation: per branch point x option x target x condition x simulator, how "
                "many arms realised their option (n of N); corrected: judge-corrected failure "
                "rates (PPI++) per judge x target x condition x criterion and per target, beside "
                "the judge-only and people-only rates and the judge's sensitivity and specificity, and "
                "the judge-corrected matched contrasts in a second file beside it, named "
                "<out>_contrasts (e.g. corrected_contrasts.csv); first-failure: per conversation "
                "x judge x outcome (any criterion, each criterion), the exchange of the first "
                "failure or the censoring exchange and why the conversation ended there.",
            ),
        ] = None,
        rubric: Annotated[str | None, typer.Option("--rubric", help="Only this rubric id.")] = None,
        judge: Annotated[str | None, typer.Option("--judge", help="Only this judge spec.")] = None,
        db: DbOption = None,
    ) -> None:
        """Write the store's data for other tools: tidy tables (units of analysis, judgments,
        turns, arms, counts), whole transcripts, or Inspect AI eval logs. The unit table has one
        row per observation, what every count and rate uses; the judgment and turn tables are
        the stored rows of each transcript, copies of a shared prefix included and flagged.
        Every table is joined with its conversation and one column per variant choice. No API
        keys are in these files."""
        selected = _runs(run, all_runs)
        flat = ("unit", "judgment", "turn", "arm")
        levels = (*flat, "transcript", "conversation", "realisation", "corrected", "first-failure")
        if level is not None and level not in levels:
            raise UserError(f"--level {level!r}: expected {', '.join(levels)}")
        formats = ("csv", "parquet", "jsonl", "inspect")
        if fmt not in formats:
            raise UserError(f"--format {fmt!r}: expected csv, parquet, jsonl or inspect")
        if out is None:
            raise UserError("--out FILE is required (a folder for --format inspect)")
        if fmt == "inspect":
            if level not in (None, "transcript"):  # a log holds whole conversations
                raise UserError(
                    f"--level {level}: --format inspect writes whole conversations (leave out "
                    "--level)"
                )
            _export_inspect(db, selected, out, rubric=rubric, judge=judge)
            return
        level = level or "unit"
        if level == "transcript" and fmt == "csv":
            raise UserError("--level transcript: expected --format jsonl or parquet (not csv)")
        store = _store(db)
        if out.parent and not out.parent.exists():
            raise UserError(f"{out.parent}: no such directory")
        if level in flat:
            from branchpoint.analysis.export import export_level

            n = export_level(store, level, out, fmt, selected, rubric=rubric, judge=judge)
        elif level == "transcript":
            from branchpoint.analysis.export import write_transcripts

            n = write_transcripts(store, out, fmt, selected, rubric=rubric, judge=judge)
            typer.echo(f"wrote {n} transcripts to {out}")
            return
        elif level == "corrected":
            from branchpoint.analysis.judge_correction.contrasts import judge_corrected_contrasts
            from branchpoint.analysis.judge_correction.estimators import judge_corrected

            corrected = judge_corrected(store, selected)
            for note in corrected.notes:
                typer.echo(note)
            _write_table(corrected.table, out, fmt)
            n = len(corrected.table)
            contrasts = judge_corrected_contrasts(store, selected)
            for note in contrasts.notes:
                if note not in corrected.notes:
                    typer.echo(note)
            side = out.with_name(f"{out.stem}_contrasts{out.suffix}")
            _write_table(contrasts.table, side, fmt)
            typer.echo(f"wrote {len(contrasts.table)} corrected contrast rows to {side}")
        elif level == "first-failure":
            from branchpoint.analysis.survival.section import first_failure_table

            table = first_failure_table(store, selected)
            _write_table(table, out, fmt)
            n = len(table)
        elif level == "realisation":
            from branchpoint.analysis.pairing.realisation import realisation_table

            table = realisation_table(store, selected)
            _write_table(table, out, fmt)
            n = len(table)
        else:
            from branchpoint.analysis.tables.judgments import distinct_conversation_counts

            table = distinct_conversation_counts(store, selected, rubric=rubric, judge=judge)
            _write_table(table, out, fmt)
            n = len(table)
        typer.echo(f"wrote {n} rows to {out}")

    @app.command("analyze")
    def analyze(
        run: RunArg = None,
        all_runs: AllOpt = False,
        n_boot: BootOpt = 2000,
        seed: SeedOpt = 0,
        baseline: BaselineOpt = None,
        db: DbOption = None,
        exclude_retried: ExcludeRetriedOpt = False,
        fmt: Annotated[
            str,
            typer.Option(
                "--format",
                help="text: headline tables (one block per row where a table is wider than the "
                "terminal); json: every analysis table as records, for scripts.",
            ),
        ] = "text",
    ) -> None:
        """Print the headline findings: failure rates with intervals, the largest matched contrasts
        (paired differences, McNemar and Wilcoxon with Holm), the prompt-condition contrast, ED
        safety scores, error-verdict counts, the judge-corrected rates, the time to the first
        failure (Kaplan-Meier per target, branch options matched with their baseline) and, with
        two or more targets, the chatbots ranked (and the ED model comparison)."""
        from branchpoint.analysis.stats.threads import one_blas_thread_in_process

        one_blas_thread_in_process()  # before numpy loads: its idle BLAS workers only spin
        selected = _runs(run, all_runs)
        if fmt not in ("text", "json"):
            raise UserError(f"--format {fmt!r}: expected text or json")
        from rich.console import Console

        # Not ``report.write``: the report's templates and pages are not printed here.
        from branchpoint.analysis.pipeline import run_analysis
        from branchpoint.analysis.report.sections import headline_tables

        console = Console()
        err = Console(stderr=True)
        store = _store(db)  # opened once: each opening sets up an engine (7 ms)
        with err.status("analysing ..."):
            a = run_analysis(
                store,
                selected,
                n_boot=n_boot,
                seed=seed,
                baselines=_baselines(baseline),
                examples=0,
                exclude_retried=exclude_retried,
            )
        from branchpoint.analysis.judge_correction.contrasts import (
            TITLE as CONTRAST_TITLE,
        )
        from branchpoint.analysis.judge_correction.contrasts import (
            contrast_display,
            judge_corrected_contrasts,
            summary_line,
        )
        from branchpoint.analysis.judge_correction.estimators import ALL, judge_corrected
        from branchpoint.analysis.judge_correction.section import (
            TITLE,
            display_table,
            variance_note,
        )

        corrected = judge_corrected(store, selected, exclude=a.excluded)
        contrasts = judge_corrected_contrasts(
            store, selected, baselines=_baselines(baseline), exclude=a.excluded
        )
        from branchpoint.core.read import analysis_registrations

        # a registered plan makes every table outside its family exploratory, as in the report
        exploratory = bool(analysis_registrations(store, selected))
        if fmt == "json":
            typer.echo(analysis_json(a, corrected, contrasts, exploratory=exploratory))
            return
        copies = (
            f" ({a.n_copied_conversations} arms that never forked counted once)"
            if a.n_copied_conversations
            else ""
        )
        console.print(
            _text(
                f"{a.n_conversations} conversations{copies}, "
                f"{a.n_judgments - a.n_errors} distinct ratings"
                + (f" and {a.n_errors} error verdicts" if a.n_errors else "")
                + (f" (runs: {', '.join(a.runs)})" if a.runs else " (all runs)")
            )  # fmt: skip
        )
        from branchpoint.analysis.report.sections import ed_responses_clause

        ed_count = ed_responses_clause(a)  # responses, beside ratings that count each dimension
        if ed_count:
            console.print(_text(ed_count))
        tables = headline_tables(a)
        if not tables:
            console.print(_text("no judged conversations to summarise"))
        for caption, frame in tables:
            _print_table(console, caption, frame)
        from branchpoint.analysis.report.sections import printed_notes

        for note in printed_notes(a):  # the report's notes, same text (e.g. an unsuitable judge)
            console.print(_text("note: " + note))
        if corrected.empty:
            console.print(_text(f"{TITLE}: {corrected.notes[0]}"))
        else:
            per_target = corrected.table[corrected.table["condition"] == ALL]
            shown = display_table(per_target)[
                [
                    "judge",
                    "target",
                    "labelled",
                    "judge only",
                    "corrected",
                    "sensitivity",
                    "specificity",
                ]
            ]  # per target; every cell in `report` and `export --level corrected`
            _print_table(console, f"{TITLE} (PPI++, per target)", shown)
            for note in (variance_note(corrected.table, "rates"),
                         variance_note(contrasts.table, "contrasts")):  # fmt: skip
                if note:
                    console.print(_text("note: " + note))
            line = summary_line(contrasts)
            if line is not None:
                console.print(_text(f"{CONTRAST_TITLE}: {line}"))
            else:
                pooled = contrasts.table[contrasts.table["criterion_id"] == ALL]
                cols = ["judge", "contrast", "condition", "labelled (option/baseline)",
                        "judge only", "corrected", "corrected, intention to treat"]  # fmt: skip
                _print_table(
                    console,
                    f"{CONTRAST_TITLE} (all criteria; points, option minus baseline)",
                    contrast_display(pooled)[cols],
                )  # per criterion: `report` and `export --level corrected`
        from branchpoint.tui.commands.analyze_sections import text_sections

        for item in text_sections(a, exploratory=exploratory):  # the report's last two sections
            if isinstance(item, str):
                console.print(_text(item))
            else:
                _print_table(console, *item)

    @app.command("report")
    def report(
        run: RunArg = None,
        all_runs: AllOpt = False,
        out: Annotated[
            Path,
            typer.Option("--out", help="Directory for report.md, report.html and the PNG plots."),
        ] = Path("report"),
        n_boot: BootOpt = 2000,
        seed: SeedOpt = 0,
        baseline: BaselineOpt = None,
        db: DbOption = None,
        exclude_retried: ExcludeRetriedOpt = False,
        judge: Annotated[
            str | None,
            typer.Option(
                "--judge",
                help="Judge spec whose verdicts the plots show (default: the judge with the most "
                "non-error ratings). Tables list every judge apart.",
            ),
        ] = None,
    ) -> None:
        """Write report.md and a self-contained report.html (plots embedded, all text escaped):
        headline findings first, then failure rates, criterion heatmap, matched contrasts, the
        condition contrast, simulator sensitivity, ED safety scores, judge agreement, reasoning,
        the time to the first failure and, with two or more targets, the chatbots ranked."""
        from branchpoint.analysis.stats.threads import one_blas_thread_in_process

        one_blas_thread_in_process()  # before numpy loads: its idle BLAS workers only spin
        selected = _runs(run, all_runs)
        from rich.console import Console

        from branchpoint.analysis.report.write import run_analysis, write_report

        err = Console(stderr=True)
        if out.exists() and not out.is_dir():
            raise UserError(f"--out {out}: exists and is not a directory")
        with err.status("analysing and plotting ..."):
            store = _store(db)
            analysis = run_analysis(
                store,
                selected,
                n_boot=n_boot,
                seed=seed,
                baselines=_baselines(baseline),
                exclude_retried=exclude_retried,
                judge=judge,
            )
            files = write_report(
                store,
                out,
                selected,
                n_boot=n_boot,
                seed=seed,
                baselines=_baselines(baseline),
                analysis=analysis,
            )
        for name in files.missing_plots:
            typer.echo(f"no data for plot {name} (the report says so)")
        typer.echo(f"report: {files.html}")
        typer.echo(f"report: {files.markdown}")


def _write_table(table: Any, out: Path, fmt: str) -> None:
    """A summary table (counts, realisation n of N) as csv, parquet or JSON lines."""
    if fmt == "jsonl":
        table.to_json(out, orient="records", lines=True, force_ascii=False)
        return
    from branchpoint.analysis.tables.judgments import export_table

    export_table(table, out, fmt)


def _export_inspect(
    db: str | None, runs: str | None, out: Path, *, rubric: str | None, judge: str | None
) -> None:
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out}: exists and is not a folder (inspect writes one log a file)")
    from branchpoint.analysis.export import write_inspect_logs

    logs = write_inspect_logs(_store(db), out, runs, rubric=rubric, judge=judge)
    typer.echo(
        f"wrote {len(logs)} Inspect logs to {out} (browse them: inspect view --log-dir {out})"
    )


def _text(s: str) -> Any:
    from rich.text import Text

    return Text(s)  # a Text is never parsed for markup


def analysis_json(
    a: Any, corrected: Any = None, contrasts: Any = None, *, exploratory: bool = False
) -> str:
    """Every table of an analysis as JSON records (NaN as null), with its counts and notes, and
    the judge-corrected rates and contrasts when given. ``exploratory``: a sweep registered an
    analysis plan (the time-to-failure and chatbot sections say so)."""
    import json

    from branchpoint.analysis.report.sections import printed_notes
    from branchpoint.tui.commands.analyze_sections import sections_json

    def contrast(result: Any) -> Any:
        if result is None:
            return None
        return {
            "contrasts": json_records(result.contrasts),
            "per_target": json_records(result.per_target),
            "target_share": json_records(result.target_share),
            "friedman": json_records(result.friedman),
            "notes": list(result.notes),
        }

    out = {
        "runs": a.runs,
        "n_conversations": a.n_conversations,
        "n_copied_conversations": a.n_copied_conversations,
        "n_ratings": a.n_judgments,
        "unit_of_analysis": "judged chatbot turn, each counted once however many arms carry it",
        "rates": json_records(a.rates),
        "rates_target_condition": json_records(a.rates_target_condition),
        "rates_condition": json_records(a.rates_condition),
        "rates_condition_conversation": json_records(a.rates_condition_conversation),
        "rates_risk_area": json_records(a.rates_risk_area),
        "errors": json_records(a.errors),
        "contrasts": contrast(a.contrasts),
        "condition": contrast(a.condition),
        "simulators": contrast(a.simulators),
        "simulator_conclusions": json_records(a.simulator_conclusions),
        "agreement": None
        if a.agreement is None
        else {
            "pairs": json_records(a.agreement.pairs),
            "alpha_all": json_records(a.agreement.alpha_all),
        },
        "plotted_judge": a.primary_judge,
        "realisation": json_records(a.realisation),
        "reasoning": json_records(a.reasoning),
        "n_reasoning_replies": a.n_reasoning_replies,
        "ed": None
        if a.ed is None
        else {
            "by_model": json_records(a.ed.by_model),
            "bio": json_records(a.ed.bio),
            "cue": json_records(a.ed.cue),
            "attributes": json_records(a.ed.attributes),
            "dimensions": json_records(a.ed.dimensions),
            "branches": json_records(a.ed.branches),
            "conditions": json_records(a.ed.conditions),
        },
        "judge_corrected": None
        if corrected is None
        else {
            "rates": json_records(corrected.table),
            "notes": list(corrected.notes),
            "contrasts": [] if contrasts is None else json_records(contrasts.table),
            "contrast_notes": [] if contrasts is None else list(contrasts.notes),
        },
        **sections_json(a, exploratory=exploratory),
        "notes": printed_notes(a),
    }
    return json.dumps(out, indent=1, default=str)


def _print_table(console: Any, caption: str, frame: Any) -> None:
    """A table when it fits the terminal; otherwise one block per row ("column: value" lines),
    since a table squeezed into 80 columns breaks every cell into unreadable pieces."""
    from rich.text import Text

    cols = [str(c) for c in frame.columns]
    cells = [[_printable(v) for v in row] for row in frame.head(40).itertuples(index=False)]
    if _natural_width(cols, cells) <= console.width:
        console.print(_rich_table(caption, cols, cells))
        return
    console.print(Text(caption, style="bold"))
    # wide enough for every label in use (the longest: 29), narrow enough for 80 columns
    width = min(max((len(c) for c in cols), default=0), 32)
    lines = []
    for i, row in enumerate(cells):
        if i:
            lines.append("")
        lines += [f"  {col:<{width}}  {value}" for col, value in zip(cols, row)]
    if lines:  # one Text: rich wraps it line by line, as it did a print per line (0.1 ms each)
        console.print(Text("\n".join(lines)))


def _natural_width(cols: list[str], cells: list[list[str]]) -> int:
    """The width rich measures a ``_rich_table`` at when nothing is wrapped: each column its
    longest line plus a space each side, a border between columns and at both edges. From the
    cells' lengths: measuring the table (every cell, twice) was a third of the printing."""
    from rich.cells import cell_len

    def widest(text: str) -> int:  # rich measures a Text by its lines, split as here
        return max((cell_len(line) for line in text.splitlines()), default=0)

    width = [widest(c) for c in cols]
    for row in cells:
        width = [max(w, widest(v)) for w, v in zip(width, row)]
    return sum(w + 2 for w in width) + len(cols) + 1


def _rich_table(caption: str, cols: list[str], cells: list[list[str]]) -> Any:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(caption), title_justify="left")
    for col in cols:
        table.add_column(Text(col))
    for row in cells:
        table.add_row(*[Text(v) for v in row])
    return table


def _printable(v: Any) -> str:
    """Model or user text shown literally: control characters (terminal escapes) made visible."""
    from branchpoint.core.untrusted import visible

    return visible(v, multiline=False)
