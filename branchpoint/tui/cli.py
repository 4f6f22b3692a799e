"""The ``branchpoint`` command. Its verbs follow the flow of data:

validate -> variants -> run -> judge -> analyze/report -> tui, plus schema, import, show, export.

This module only assembles the verbs; each lives in ``branchpoint/tui/commands`` and imports its
package lazily so that ``branchpoint --help`` stays fast.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

import typer

from branchpoint.core.errors import UserError
from branchpoint.tui.commands import (
    analysis_cmds,
    compare_cmd,
    demo_cmd,
    judge_cmds,
    labels_cmds,
    replay_cmd,
    run_cmds,
    runs_cmds,
    scenario_cmds,
    sweep_cmds,
    tui_cmd,
)

app = typer.Typer(
    name="branchpoint",
    help="Multi-turn safety evaluation of chatbots with vulnerable users, along matched branches.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    add_completion=False,
)

for module in (
    scenario_cmds,
    run_cmds,
    sweep_cmds,
    runs_cmds,
    judge_cmds,
    analysis_cmds,
    compare_cmd,
    tui_cmd,
    labels_cmds,
    demo_cmd,
    replay_cmd,
):
    module.register(app)


def main() -> None:
    code: object = 0
    try:
        app()
    except SystemExit as exc:  # how the command line ends every command
        code = exc.code
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        code = 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = 130
    except Exception as exc:
        from branchpoint.core.store import store_failure

        failure = store_failure(exc)  # the store went away, or is no store: one line
        if failure is None:
            raise
        line, code = failure
        print(line, file=sys.stderr)
    _exit(code)


def _exit(code: object) -> NoReturn:
    """End the process as CPython ends a multiprocessing child: join the threads that must be
    joined and run the exit hooks, then leave without tearing the interpreter down.

    The teardown frees every object the command made, one by one, and does nothing else:
    after a run of 1,000 conversations it took half a second of the whole command's time."""
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # sys.exit("message"), as the interpreter does it
        print(code, file=sys.stderr)
        status = 1
    import atexit
    import threading

    threading._shutdown()  # type: ignore[attr-defined]  # non-daemon threads, thread pools
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or a broken pipe: nothing more to say there
            pass
    os._exit(status)


if __name__ == "__main__":
    main()
