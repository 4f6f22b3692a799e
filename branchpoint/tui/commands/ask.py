"""A yes/no question, asked the same way by every command that asks one."""

from __future__ import annotations

import sys

import typer


def ask(question: str, *, refusal: str | None = None) -> bool:
    """``question`` answered with a line on stdin (y/N); no answer at all (end of input, Ctrl-D)
    is no, never a traceback or "Aborted!". ``refusal``: with no terminal on stdin, print it as
    one error line and end with exit 2 instead of reading (what a costly start needs, so that a
    script never starts one by default)."""
    if refusal is not None and not sys.stdin.isatty():
        typer.echo(f"error: {refusal}", err=True)
        raise typer.Exit(2)
    typer.echo(f"{question} [y/N] ", nl=False)
    try:
        answer = input()
    except EOFError:  # no answer is no (Ctrl-C stays an interrupt: 130)
        typer.echo()
        return False
    return answer.strip().lower() in ("y", "yes")
