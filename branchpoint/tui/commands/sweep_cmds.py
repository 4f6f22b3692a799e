"""``branchpoint sweep FILE``: plan and run a study from one manifest, resumably.

Exit status: 0 when every conversation completed and no verdict is an error, 1 when some failed
(the summary says how many and why), 2 for usage errors (a bad manifest included, and a run
above the cost threshold with neither a terminal to ask on nor --yes), 130 when interrupted.
Declining at the cost question ("Run it? [y/N]") is the user's choice: exit 0, nothing run.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from branchpoint.core.store import Store
    from branchpoint.study.api import StudyPlan, StudyResult
    from branchpoint.study.plan import SweepPlan


def sweep_command(
    manifest_file: Annotated[
        Path, typer.Argument(help="The sweep manifest (YAML).", show_default=False, metavar="FILE")
    ],
    plan_only: Annotated[
        bool,
        typer.Option("--plan", help="Print the plan (cells, calls, tokens, USD); run nothing."),
    ] = False,
    new_sweep: Annotated[
        bool,
        typer.Option(
            "--new-sweep",
            help="Start a new sweep (a new id) even when one of this manifest exists.",
        ),
    ] = False,
    add_cells: Annotated[
        bool,
        typer.Option(
            "--add-cells",
            help="Take scenario files added to the manifest's folders or globs since the sweep "
            "began as new cells (without it, such a sweep is refused).",
        ),
    ] = False,
    db: Annotated[
        str | None,
        typer.Option(
            "--db", metavar="PATH", help="Store: a SQLite path or URL (wins over the manifest's)."
        ),
    ] = None,
    retry_failed: Annotated[
        bool,
        typer.Option(
            "--retry-failed",
            help="Run the sweep's failed conversations again from their last stored turn (each "
            "attempt is recorded; `analyze --exclude-retried` leaves them out).",
        ),
    ] = False,
    amend: Annotated[
        str | None,
        typer.Option(
            "--amend",
            metavar="REASON",
            help="Accept an edited `analysis:` block after the sweep began: the new block is "
            "stored with a dated deviation giving REASON, which the report lists (without it, "
            "an edit of a pre-registered analysis is refused).",
        ),
    ] = None,
    yes: Annotated[
        bool,
        typer.Option(
            "--yes",
            "-y",
            help="Run without asking. Without it, when the plan's high USD for the cells to do "
            "(expected where that is larger; the budget's cap where lower; judging "
            "included) is above the manifest's confirm_above_usd (default $1), or a model is "
            "unpriced so nothing bounds the cost, `sweep` asks 'Run it? [y/N]' on a terminal "
            "and, with no terminal on stdin, refuses (exit 2) before writing anything. High, "
            "not expected: the question guards against a bill nobody meant to run up, so it "
            "asks whenever the run could exceed the threshold.",
        ),
    ] = False,
) -> None:
    """Plan the manifest's cells and run the ones not done yet; the plan is printed first.

    Re-running the same manifest continues it; a manifest that adds targets, conditions or
    replicates adds only the new cells; a change that would alter existing cells is refused.

    Exit status: 0 when every conversation completed and no verdict is an error (and when the
    cost question is answered no: nothing run), 1 when some failed, 2 for usage errors (a run
    above confirm_above_usd with no terminal to ask on and no --yes included), 130 when
    interrupted.
    """
    from branchpoint.core.store import open_store
    from branchpoint.study.api import plan_study
    from branchpoint.study.manifest import ManifestError

    try:
        plan = plan_study(
            manifest_file,
            db=db,
            new_sweep=new_sweep,
            add_cells=add_cells,
            retry_failed=retry_failed,
            with_keys=not plan_only,
            amend=amend,
        )
    except ManifestError as exc:
        for error in exc.errors:
            typer.echo(str(error), err=True)
        raise typer.Exit(2) from None
    for line in plan.lines():
        typer.echo(line)
    if plan_only:
        return
    plan.check_runnable()
    # A run refused or declined at the cost question leaves no store behind: it is opened after.
    if not yes and not _confirmed(plan.sweep):
        typer.echo("nothing run")
        return
    store = open_store(plan.store_url)
    try:
        result = _run(plan, store)
    finally:
        store.close()
    code = _summary(result)
    if code:
        raise typer.Exit(code)


def _confirmed(plan: SweepPlan) -> bool:
    """Whether to run ``plan``: yes when its cost bound is under the threshold
    (branchpoint/study/confirm.py), else the answer on a terminal; with no terminal on stdin a
    one-line refusal (exit 2), so a script never starts a costly sweep by accident."""
    from branchpoint.study.confirm import cost_check
    from branchpoint.tui.commands.ask import ask

    check = cost_check(plan)
    if not check.needed:
        return True
    refusal = f"{plan.path}: {check.reason()}; no terminal to ask on (expected --yes to run it)"
    typer.echo(f"{check.reason()}.")
    return ask("Run it?", refusal=refusal)


def _run(plan: StudyPlan, store: Store) -> StudyResult:
    """``arun_study`` under the live view; a signal stops it with a line on how to continue."""
    from rich.console import Console

    from branchpoint.gateway import event_loop
    from branchpoint.study.api import arun_study, study_monitor
    from branchpoint.tui.commands.interrupts import until_signalled
    from branchpoint.tui.commands.live_view import LiveView

    console = Console(stderr=True)
    monitor = study_monitor(plan, store)
    view = LiveView(monitor, console)

    def interrupted(name: str) -> None:
        view.stop()
        console.print(
            f"interrupted ({name}): run the same manifest again to continue sweep {plan.sweep_id}",
            markup=False,
            highlight=False,
        )

    async def main() -> StudyResult:
        return await until_signalled(lambda: arun_study(plan, store, monitor=monitor), interrupted)

    with view:
        return event_loop.run(main())


def _summary(outcome: StudyResult) -> int:
    """Print the outcome; the exit status it calls for (0 all done, 1 some failed)."""
    from rich.console import Console
    from rich.text import Text

    from branchpoint.core.read.calls import calls_text

    result, judging = outcome.sweep, outcome.judging

    console = Console()

    def say(line: str) -> None:
        console.print(Text(line))  # Text: a model name or an error is never read as markup

    # the store's call rows (what `runs` counts), not the calls attempted: a call the budget
    # refused was never sent
    calls = calls_text(outcome.stored_calls)
    say(
        f"sweep {result.sweep_id}: {result.conversations} conversations, "
        f"{result.completed} completed, {result.n_failed} not completed; "
        f"model calls stored: {calls or 'none'}"
    )
    if outcome.never_forked:
        say(
            f"{outcome.never_forked} of the {result.conversations} conversations are arms that "
            "never forked (their parents' conversations stored again): analyze and report count "
            "them once"
        )
    if hits := calls_text(outcome.cached_calls):
        say(f"of them answered from the cache (not sent): {hits}")
    if outcome.persona_flags:
        say(outcome.persona_flags)
    if result.retried:
        say(f"retried {result.retried} failed conversation(s) (--retry-failed)")
    if result.workers_replaced:
        say(
            f"{result.workers_replaced} Ray worker(s) died and were replaced; their trees were "
            "resumed from their stored turns"
        )
    if result.failed:
        why = ", ".join(f"{reason} {n}" for reason, n in sorted(result.failed.items()))
        say(f"not completed, by reason: {why}")
        if result.failed_status:
            say(
                f"{result.failed_status} conversation(s) failed: run again with "
                "--retry-failed to continue them from their last stored turn"
            )
    if result.stopped_by_budget:
        say(
            f"stopped by budget: {result.budget_note}; the cells not done are left "
            "interrupted: raise the budget and run the same manifest again to continue"
        )
    elif result.spent_usd is not None:
        lost = (
            f" (${result.reserved_usd:.4f} of it at the bound of calls whose cost was never "
            "recorded: sent by a process that died)"
            if result.reserved_usd
            else ""
        )
        say(f"spent ${result.spent_usd:.4f} of the budget{lost}")
    if judging.errors:
        say(f"{judging.errors} verdict(s) are error")
    if judging.stopped_by_budget:
        say(
            f"judging stopped by budget: {judging.budget_notes[0]}; {judging.stopped_by_budget} "
            "judging unit(s) left unjudged: raise the budget and run the same manifest again "
            "to judge them"
        )
    return 0 if outcome.ok else 1


def register(app: typer.Typer) -> None:
    app.command("sweep", no_args_is_help=True)(sweep_command)
