"""``branchpoint runs``: the runs and sweeps in a store; ``branchpoint runs rm ID`` deletes one."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from branchpoint.core.errors import UserError
from branchpoint.tui.commands.ask import ask
from branchpoint.tui.commands.options import DbOption

if TYPE_CHECKING:
    from branchpoint.core.read.persona_flags import PersonaFlagCounts

app = typer.Typer(
    help="List the runs and sweeps in a store, or delete one.",
    invoke_without_command=True,
    no_args_is_help=False,
    rich_markup_mode=None,
)


@app.callback()
def runs_command(ctx: typer.Context, db: DbOption = None) -> None:
    """Every run and sweep, newest first: conversations by status, model calls, recorded cost,
    and (where ``judge --persona-judge`` rated its persona) the persona turns not enacted and
    rated low realism, each out of those rated ("-": none rated).

    USD is what the recorded calls cost (settled; "unpriced" where a call has no price known);
    reserved is the upper bound of priced attempts whose cost is not recorded: calls in flight
    now, or ones that may have been billed with no answer stored (a timeout, a process that died)
    (a budget counts them at that bound, as the provider may have billed them).
    cached is the share of the calls' input tokens a provider's prompt cache served (billed at
    its cached rate; "-": no call reports it)."""
    if ctx.invoked_subcommand is not None:
        return
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from branchpoint.core.read import (
        list_runs,
        persona_flag_counts,
        run_cache_shares,
        run_costs,
        run_reserved,
    )
    from branchpoint.core.read.costs import share_text
    from branchpoint.core.store import open_store
    from branchpoint.simulator.transcript import safe_text

    store = open_store(db, create=False)
    try:
        runs = list_runs(store)
        costs = run_costs(store)
        reserved = run_reserved(store)
        shares = run_cache_shares(store)
        persona = persona_flag_counts(store)
    finally:
        store.close()
    if not runs:
        typer.echo("no runs in this store")
        return
    table = Table(box=box.SIMPLE_HEAD)
    for name in ("id", "kind", "status", "conversations", "completed", "failed", "running"):
        table.add_column(name, no_wrap=True)
    table.add_column("calls", justify="right")
    table.add_column("USD", justify="right")
    table.add_column("reserved", justify="right")
    table.add_column("cached", justify="right")
    table.add_column("not enacted", justify="right")
    table.add_column("low realism", justify="right")
    table.add_column("created", no_wrap=True)
    for r in runs:
        calls, usd = costs.get(r.id, (0, 0.0))
        # "unpriced" where a call has no price known, as the live view says (never $0.0000)
        values = [
            r.id,
            r.kind,
            r.status,
            r.n_conversations,
            r.n_completed,
            r.n_failed,
            r.n_running,
            calls,
            "unpriced" if usd is None else f"{usd:.4f}",
            f"{reserved[r.id]:.4f}" if r.id in reserved else "-",
            share_text(shares.get(r.id)),
            *_persona_cells(persona.get(r.id)),
            r.created_at.strftime("%Y-%m-%d %H:%M") if r.created_at else "",
        ]
        table.add_row(*(Text(safe_text(str(v))) for v in values))
    console = Console()
    if not console.is_terminal:
        console = Console(width=200)
    console.print(table)


def _persona_cells(counts: PersonaFlagCounts | None) -> tuple[str, str]:
    """``flagged/rated`` for the manipulation checks and the realism ratings, ``-`` if none."""
    if counts is None:
        return "-", "-"
    enacted = f"{counts.not_enacted}/{counts.enactment_rated}" if counts.enactment_rated else "-"
    realism = f"{counts.low_realism}/{counts.realism_rated}" if counts.realism_rated else "-"
    return enacted, realism


@app.command("rm")
def rm_command(
    run_id: Annotated[str, typer.Argument(help="The run or sweep id.", show_default=False)],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    db: DbOption = None,
) -> None:
    """Delete a run or sweep with its conversations, turns, verdicts, human labels and calls."""
    from branchpoint.core.read import find_run
    from branchpoint.core.store import open_store, redact_url
    from branchpoint.study.removal import delete_run, run_contents

    store = open_store(db, create=False)
    try:
        if find_run(store, run_id) is None:
            raise UserError(
                f"no run {run_id!r} in {redact_url(store.url)} (see `branchpoint runs`)"
            )
        c = run_contents(store, run_id)
        what = (
            f"{run_id}: {c.conversations} conversations, {c.turns} turns, {c.judgments} "
            f"verdicts, {c.human_labels} human labels, {c.model_calls} model calls"
        )
        if not yes and not ask(f"delete {what}?"):
            typer.echo("nothing deleted")  # declined: done as asked, exit 0 (as sweep's question)
            return
        delete_run(store, run_id)
    finally:
        store.close()
    typer.echo(f"deleted {what}")


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="runs")
