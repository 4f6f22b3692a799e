"""``branchpoint replay CONVERSATION_ID --at TURN --message TEXT [--continue N]`` (issue 47)."""

from __future__ import annotations

import getpass
from typing import Annotated

import typer

from branchpoint.tui.commands.options import DbOption


def replay_command(
    conversation_id: Annotated[
        str, typer.Argument(help="The stored conversation to fork (an id or a unique prefix).")
    ],
    at: Annotated[
        int,
        typer.Option(
            "--at",
            metavar="TURN",
            help="The persona turn (its index) to replace; one past the last reply: a new "
            "persona message (take-over).",
        ),
    ],
    message: Annotated[
        str, typer.Option("--message", metavar="TEXT", help="The persona message to send instead.")
    ],
    continue_n: Annotated[
        int,
        typer.Option(
            "--continue",
            metavar="N",
            help="Exchanges the persona goes on for after the chatbot's reply (default 0).",
        ),
    ] = 0,
    annotator: Annotated[
        str | None,
        typer.Option("--annotator", help="Who made the replay (default: the login name)."),
    ] = None,
    db: DbOption = None,
) -> None:
    """Fork a stored conversation at a persona turn with another message, against the same
    target (a live call, the same params, condition and seeds), and let the persona go on for N
    exchanges. The branch is stored in the run `<run>-replays` with its provenance (replay,
    parent turn, annotator): judge it with `branchpoint judge <run>-replays`; the TUI's compare
    shows it beside its original; designed contrasts never count it."""
    from branchpoint.core.store import open_store
    from branchpoint.gateway import event_loop
    from branchpoint.simulator.replay import areplay

    who = annotator or getpass.getuser()
    store = open_store(db, create=False)
    try:
        result = event_loop.run(
            areplay(store, conversation_id, at, message, continue_n=continue_n, annotator=who)
        )
    finally:
        store.close()
    typer.echo(
        f"replay {result.conversation_id} of {result.parent_id} at turn {result.at}: "
        f"{result.status} ({result.stop_reason}), {result.n_turns} turns, in run {result.run_id}"
    )
    if result.error:
        typer.echo(f"error: {result.error}", err=True)
    typer.echo(f"  read it:  branchpoint show {result.conversation_id}")
    typer.echo(f"  judge it: branchpoint judge {result.run_id}")
    if result.status == "failed":
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("replay", no_args_is_help=True)(replay_command)
