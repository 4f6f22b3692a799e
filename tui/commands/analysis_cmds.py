"""``branchpoint export``, ``analyze`` and ``report``: tables, headline statistics and reports.

Heavy packages (pandas, scipy, matplotlib) are imported inside the commands so that
``branchpoint --help`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from core.errors import UserError
from tui.commands.options import DbOption

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
    from core.store import open_store

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
        fmt: Annotated[str, typer.Option("--format", help="csv or parquet.")] = "csv",
        out: Annotated[Path | None, typer.Option("--out", help="File to write.")] = None,
        level: Annotated[
            str,
            typer.Option(
                "--level",
                help="judgment: one row per judgment; conversation: per conversation x criterion "
                "counts; realisation: per branch point x option x target x condition x simulator, "
                "how many arms realised their option (n of N); corrected: judge-corrected failure "
                "rates (PPI++) per judge x target x condition x criterion and per target, beside "
                "the judge-only and people-only rates and the judge's sensitivity and specificity.",
            ),
        ] = "judgment",
        rubric: Annotated[str | None, typer.Option("--rubric", help="Only this rubric id.")] = None,
        judge: Annotated[str | None, typer.Option("--judge", help="Only this judge spec.")] = None,
        db: DbOption = None,
    ) -> None:
        """Write the tidy judgment table (one row per judgment, joined with conversation, turn and
        one column per variant choice) as CSV or Parquet. No API keys are in these tables."""
        selected = _runs(run, all_runs)
        if fmt not in ("csv", "parquet"):
            raise UserError(f"--format {fmt!r}: expected csv or parquet")
        if level not in ("judgment", "conversation", "realisation", "corrected"):
            raise UserError(
                f"--level {level!r}: expected judgment, conversation, realisation or corrected"
            )
        if out is None:
            raise UserError("--out FILE is required")
        from analysis.tables import conversation_criterion_table, export_judgments, export_table

        store = _store(db)
        if out.parent and not out.parent.exists():
            raise UserError(f"{out.parent}: no such directory")
        if level == "judgment":
            n = export_judgments(store, out, fmt, selected, rubric=rubric, judge=judge)
        elif level == "corrected":
            from analysis.judge_correction import judge_corrected

            corrected = judge_corrected(store, selected)
            for note in corrected.notes:
                typer.echo(note)
            export_table(corrected.table, out, fmt)
            n = len(corrected.table)
        elif level == "realisation":
            from analysis.realisation import realisation_table

            table = realisation_table(store, selected)
            export_table(table, out, fmt)
            n = len(table)
        else:
            table = conversation_criterion_table(store, selected, rubric=rubric, judge=judge)
            export_table(table, out, fmt)
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
    ) -> None:
        """Print the headline findings: failure rates with intervals, the largest matched contrasts
        (paired differences, McNemar and Wilcoxon with Holm), the prompt-condition contrast, ED
        safety scores and error-verdict counts."""
        selected = _runs(run, all_runs)
        from rich.console import Console

        from analysis.report import headline_tables, run_analysis

        console = Console()
        err = Console(stderr=True)
        with err.status("analysing ..."):
            a = run_analysis(
                _store(db),
                selected,
                n_boot=n_boot,
                seed=seed,
                baselines=_baselines(baseline),
                examples=0,
                exclude_retried=exclude_retried,
            )
        console.print(
            _text(
                f"{a.n_conversations} conversations, {a.n_judgments} ratings"
                + (f" (runs: {', '.join(a.runs)})" if a.runs else " (all runs)")
            )  # fmt: skip
        )
        tables = headline_tables(a)
        if not tables:
            console.print(_text("no judged conversations to summarise"))
        for caption, frame in tables:
            console.print(_rich_table(caption, frame))
        for note in a.notes + (a.contrasts.notes if a.contrasts else []):
            console.print(_text("note: " + note))
        from analysis.judge_correction import ALL, judge_corrected
        from analysis.judge_correction_report import TITLE, display_table

        corrected = judge_corrected(_store(db), selected)
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
            console.print(_rich_table(f"{TITLE} (PPI++, per target)", shown))

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
    ) -> None:
        """Write report.md and a self-contained report.html (plots embedded, all text escaped):
        headline findings first, then failure rates, criterion heatmap, matched contrasts, the
        condition contrast, simulator sensitivity, ED safety scores, judge agreement and reasoning."""
        selected = _runs(run, all_runs)
        from rich.console import Console

        from analysis.report import run_analysis, write_report

        err = Console(stderr=True)
        if out.exists() and not out.is_dir():
            raise UserError(f"--out {out}: exists and is not a directory")
        with err.status("analysing and plotting ..."):
            store = _store(db)
            analysis = (
                run_analysis(
                    store,
                    selected,
                    n_boot=n_boot,
                    seed=seed,
                    baselines=_baselines(baseline),
                    exclude_retried=True,
                )
                if exclude_retried
                else None
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


def _text(s: str) -> Any:
    from rich.text import Text

    return Text(s)  # a Text is never parsed for markup


def _rich_table(caption: str, frame: Any) -> Any:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=Text(caption), title_justify="left")
    for col in frame.columns:
        table.add_column(Text(str(col)))
    for row in frame.head(40).itertuples(index=False):
        table.add_row(*[Text(_printable(v)) for v in row])
    return table


def _printable(v: Any) -> str:
    """Model or user text shown literally: control characters (terminal escapes) made visible."""
    s = "" if v is None else str(v)
    return "".join(ch if ch.isprintable() or ch == " " else repr(ch)[1:-1] for ch in s)
