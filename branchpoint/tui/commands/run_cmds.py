"""``branchpoint run`` (play scenarios against target chatbots) and ``branchpoint show`` (a transcript)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from branchpoint.core.domain import EVENTS
from branchpoint.core.errors import UserError
from branchpoint.tui.commands.options import DbOption, TimeoutOption

if TYPE_CHECKING:
    from collections.abc import Callable

    from branchpoint.scenarios.models import Scenario
    from branchpoint.simulator.runner import RunConfig, RunResult


def run_command(
    scenario: Annotated[
        list[Path],
        typer.Argument(
            help="Scenario YAML file(s) or folder(s).", show_default=False, metavar="SCENARIO"
        ),
    ],
    target: Annotated[
        list[str] | None,
        typer.Option(
            "--target",
            "-t",
            metavar="SPEC",
            help="Target model spec (repeatable): embedded, hf:MODEL, litellm:PROVIDER/MODEL, oai:MODEL, scripted:NAME. Default: embedded.",
        ),
    ] = None,
    condition: Annotated[
        list[str] | None,
        typer.Option(
            "--condition",
            "-c",
            metavar="NAME",
            help="System-prompt condition (repeatable): none, teen_aware, or a prompt in branchpoint/scenarios/library/prompts. Default: none.",
        ),
    ] = None,
    simulator: Annotated[
        list[str] | None,
        typer.Option(
            "--simulator",
            metavar="SPEC",
            help="Model spec that plays the persona (repeatable: every tree is played by each, "
            "for simulator sensitivity; the report pairs them). Default: embedded.",
        ),
    ] = None,
    detector: Annotated[
        str | None,
        typer.Option(
            "--detector",
            metavar="SPEC",
            help="Model spec that classifies chatbot replies for events (structured output). Default: keyword rules.",
        ),
    ] = None,
    replicates: Annotated[
        int,
        typer.Option(
            "--replicates",
            "-n",
            metavar="N",
            min=1,
            help="Samples per scenario x target x condition, each with its own seed.",
        ),
    ] = 1,
    max_turns: Annotated[
        int | None,
        typer.Option(
            "--max-turns",
            metavar="N",
            min=1,
            max=200,
            help="Exchanges at most (default: the scenario's max_turns).",
        ),
    ] = None,
    variant: Annotated[
        list[str] | None,
        typer.Option("--variant", metavar="ID", help="Run only this variant id (repeatable)."),
    ] = None,
    fork: Annotated[
        str | None,
        typer.Option(
            "--fork",
            metavar="shared|independent",
            help="shared: arms share their common prefix (default, or the scenario's setting); independent: every arm from scratch.",
        ),
    ] = None,
    db: DbOption = None,
    timeout: TimeoutOption = None,
    run_id: Annotated[
        str | None,
        typer.Option(
            "--run-id", metavar="ID", help="Name the run; an existing run of that id is resumed."
        ),
    ] = None,
    resume: Annotated[
        str | None,
        typer.Option(
            "--resume",
            metavar="RUN_ID",
            help="Resume this run id: finish its interrupted conversations without redoing stored turns.",
        ),
    ] = None,
    concurrency: Annotated[
        int,
        typer.Option(
            "--concurrency",
            metavar="N",
            min=1,
            help="Conversation groups in flight at once (a local model batches them); also the "
            "calls in flight of API providers without a --limit.",
        ),
    ] = 16,
    processes: Annotated[
        str,
        typer.Option(
            "--processes",
            metavar="N|auto",
            help="Worker processes on this machine (auto: one per CPU), each running a share of "
            "the conversation trees. Limits are not shared between processes: each gets "
            "1/N of --concurrency and of every --limit/--limits value (at least 1). Not with a "
            "local model (embedded, hf:), which every process would load.",
        ),
    ] = "1",
    seed: Annotated[
        int, typer.Option("--seed", metavar="N", help="Base seed; replicate r uses seed + r.")
    ] = 0,
    target_param: Annotated[
        list[str] | None,
        typer.Option(
            "--target-param",
            metavar="NAME=VALUE",
            help="Target generation param NAME=VALUE (repeatable), e.g. temperature=0.7, api_base=http://127.0.0.1:8000/v1.",
        ),
    ] = None,
    simulator_param: Annotated[
        list[str] | None,
        typer.Option(
            "--simulator-param",
            metavar="NAME=VALUE",
            help="Persona model param NAME=VALUE (repeatable).",
        ),
    ] = None,
    detector_param: Annotated[
        list[str] | None,
        typer.Option(
            "--detector-param",
            metavar="NAME=VALUE",
            help="Detector model param NAME=VALUE (repeatable); structured=json_schema|json_object|prompt pins the JSON mode.",
        ),
    ] = None,
    event_rules: Annotated[
        Path | None,
        typer.Option(
            "--event-rules",
            metavar="FILE",
            help=f"YAML of event -> regex patterns replacing the default keyword rules of those events ({', '.join(EVENTS)}).",
        ),
    ] = None,
    limit: Annotated[
        list[str] | None,
        typer.Option(
            "--limit",
            metavar="KEY,FIELD=N",
            help="Provider limits, e.g. 'litellm:openai,max_concurrency=64,rpm=5000,tpm=2000000' "
            "(KEY: a spec, oai:API_BASE, a prefix or *); repeatable, wins over --limits.",
        ),
    ] = None,
    limits_file: Annotated[
        Path | None,
        typer.Option(
            "--limits",
            metavar="FILE",
            help="YAML of provider limits: {limits: {KEY: {max_concurrency, rpm, tpm}}}.",
        ),
    ] = None,
    persona_retries: Annotated[
        int,
        typer.Option(
            "--persona-retries",
            metavar="N",
            min=0,
            help="Retries when the persona breaks character.",
        ),
    ] = 2,
    realism_min: Annotated[
        str | None,
        typer.Option(
            "--realism-min",
            metavar="LEVEL",
            help="Realism gate (off by default): a persona turn the offline realism rater puts below LEVEL (very, mostly, mixed, not) is regenerated, within --persona-retries; every attempt is stored.",
            show_default=False,
        ),
    ] = None,
    retry_failed: Annotated[
        bool,
        typer.Option(
            "--retry-failed",
            help="With --run-id/--resume: run that run's failed conversations again from their "
            "last stored turn (each attempt is recorded; `analyze --exclude-retried` leaves them out).",
        ),
    ] = False,
) -> None:
    """Play every variant of the scenarios against each target and condition, storing every turn.

    Arms share the conversation until a branch point separates them (fork: shared). Stop with
    Ctrl-C at any time: conversations are marked interrupted, and --resume RUN_ID finishes them.
    """
    # Not from branchpoint.simulator.runner, which imports the store and the engine (half a second): with
    # --processes the fork server's imports start before those, on the other core.
    from branchpoint.gateway.limits import load_limits
    from branchpoint.gateway.specs import pairs_to_dict
    from branchpoint.simulator.events import load_patterns
    from branchpoint.simulator.plan import check_specs, load, new_run_id
    from branchpoint.simulator.processes import resolve_processes, start_fork_server
    from branchpoint.simulator.run_config import RunConfig

    if fork not in (None, "shared", "independent"):
        raise UserError(f"--fork {fork!r}: expected shared or independent")
    if resume and run_id and resume != run_id:
        raise UserError("--resume and --run-id name different runs; give one")
    if retry_failed and not (resume or run_id):
        raise UserError(
            "--retry-failed: expected --run-id ID or --resume ID naming the run to retry"
        )
    config = RunConfig(
        scenarios=[str(p) for p in scenario],
        targets=target or ["embedded"],
        target_params=pairs_to_dict(target_param or [], where="--target-param"),
        conditions=condition or ["none"],
        simulators=simulator or ["embedded"],
        simulator_params=pairs_to_dict(simulator_param or [], where="--simulator-param"),
        detector=detector,
        detector_params=pairs_to_dict(detector_param or [], where="--detector-param"),
        replicates=replicates,
        max_turns=max_turns,
        variants=variant or [],
        fork=fork,
        db=db,
        run_id=resume or run_id or new_run_id(),  # known up front: an interrupt message can name it
        resume=resume is not None,
        concurrency=concurrency,
        processes=_processes(processes),
        seed=seed,
        persona_retries=persona_retries,
        realism_min=_realism_level(realism_min),
        event_patterns=load_patterns(str(event_rules)) if event_rules else None,
        limits=load_limits(limits_file, limit or []),
        **({} if timeout is None else {"timeout_s": timeout}),
    )
    if resolve_processes(config) > 1:  # (a local model with --processes > 1 fails here)
        start_fork_server(config)  # its imports overlap the loading and planning below
    # Bad scenarios or specs fail here, as one line, before any progress bar is drawn.
    scenarios = load(config.scenarios)
    check_specs(config)
    _run_with_progress(config, scenarios, retry_failed=retry_failed)


def _processes(value: str) -> int | Literal["auto"]:
    if value.strip() == "auto":
        return "auto"
    if not value.strip().isdigit() or int(value) < 1:
        raise UserError(f"--processes {value!r}: expected a number >= 1 or auto")
    return int(value)


def _run_with_progress(
    config: RunConfig, scenarios: list[Scenario], *, retry_failed: bool = False
) -> None:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from branchpoint.simulator.runner import run
    from branchpoint.tui.commands.interrupts import until_signalled

    console = Console(stderr=True)
    progress = Progress(
        TextColumn("turns"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )
    task = progress.add_task("turns", total=None)
    if console.is_terminal:
        on_progress = _Throttled(
            lambda done, total: progress.update(task, completed=done, total=total or None)
        )
    else:
        # A pipe or a log file: rich draws no live bar there, only the last state at the end,
        # so a long run looked hung. A plain line every few seconds instead.
        progress.disable = True
        on_progress = _Throttled(_Lines(console), interval_s=PIPED_EVERY_S)

    def interrupted(name: str) -> None:
        # The store is already marked (the runner did it on cancellation).
        progress.stop()
        console.print(
            f"interrupted ({name}): running conversations were marked interrupted; "
            f"resume with --resume {getattr(config, 'run_id', None)}",
            markup=False,
            highlight=False,
        )

    async def main() -> RunResult:
        return await until_signalled(
            lambda: run(
                config, on_progress=on_progress, scenarios=scenarios, retry_failed=retry_failed
            ),
            interrupted,
        )

    from branchpoint.simulator.processes import WorkerFailed

    try:
        from branchpoint.gateway import event_loop

        with progress:
            try:
                result = event_loop.run(main())
            finally:
                on_progress.flush()  # the last count, which the throttle may have held back
    except WorkerFailed as exc:  # the run is marked failed; its conversations can be resumed
        console.print(
            f"error: {exc}; resume with --resume {config.run_id}", markup=False, highlight=False
        )
        raise typer.Exit(1) from None
    _print_summary(result)
    if _print_failures(result):
        raise typer.Exit(1)  # some conversations failed: a script must not take it for success


PIPED_EVERY_S = 5.0  # seconds between progress lines when stderr is not a terminal


class _Lines:
    """Progress as plain lines (``turns 12/40, 30%, 0:00:15``), for a pipe or a log file."""

    def __init__(self, console: Any) -> None:
        self.console = console
        self.started = time.monotonic()
        self.last: tuple[int, int] | None = None

    def __call__(self, done: int, total: int) -> None:
        if (done, total) == self.last:
            return  # the final flush repeats the last line otherwise
        self.last = (done, total)
        elapsed = int(time.monotonic() - self.started)
        share = f", {100 * done // total}%" if total else ""
        clock = f"{elapsed // 3600}:{elapsed // 60 % 60:02d}:{elapsed % 60:02d}"
        of = f"/{total}" if total else ""
        self.console.print(f"turns {done}{of}{share}, {clock}", markup=False, highlight=False)


class _Throttled:
    """A progress callback passed on at most every ``interval_s`` (and when done reaches total):
    the engine reports every turn, thousands a second in a big run, and the bar redraws only
    ten times a second, so each update in between would only cost the event loop."""

    def __init__(self, show: Callable[[int, int], object], interval_s: float = 0.05) -> None:
        self.show = show
        self.interval_s = interval_s
        self.shown_at = 0.0
        self.latest = (0, 0)

    def __call__(self, done: int, total: int) -> None:
        self.latest = (done, total)
        now = time.monotonic()
        if now - self.shown_at >= self.interval_s or 0 < total <= done:
            self.shown_at = now
            self.show(done, total)

    def flush(self) -> None:
        self.show(*self.latest)


def _print_failures(result: RunResult) -> int:
    """How many conversations did not complete, and why (the first reasons); returns the count."""
    from rich.console import Console
    from rich.text import Text

    from branchpoint.simulator.transcript import safe_text

    failed = [c for c in result.conversations if c.status != "completed"]
    err = Console(stderr=True)
    if result.retried:
        err.print(Text(f"retried {result.retried} failed conversation(s) (--retry-failed)"))
    if failed:
        reasons: dict[str, int] = {}
        for c in failed:
            why = (c.error or c.stop_reason or c.status).splitlines()[0][:160]
            reasons[why] = reasons.get(why, 0) + 1
        top = sorted(reasons.items(), key=lambda kv: -kv[1])[:3]
        err.print(
            Text(
                f"{len(failed)} of {len(result.conversations)} conversation(s) did not complete: "
                + "; ".join(f"{n} x {safe_text(why)}" for why, n in top)
            ),
            soft_wrap=True,
        )
        if any(c.status == "failed" for c in failed):
            err.print(
                Text(
                    "run again with --run-id "
                    f"{result.run_id} --retry-failed to continue the failed ones from their "
                    "last stored turn"
                ),
                soft_wrap=True,
            )
    return len(failed)


MAX_ROWS = 60  # a sweep of thousands of conversations gets a tally, not a wall of rows


def _print_summary(result: RunResult) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from branchpoint.core.read.calls import calls_text
    from branchpoint.simulator.transcript import safe_text

    console = Console()
    if not console.is_terminal:
        console = Console(width=200)  # a pipe or a log file: keep each conversation on one line
    rows = result.conversations
    many_targets = len({c.target for c in rows}) > 1
    many_conditions = len({c.condition for c in rows}) > 1
    table = Table(title=None, show_lines=False, box=box.SIMPLE_HEAD)
    many_scenarios = len({c.scenario_id for c in rows}) > 1
    columns = (
        ["conversation"]
        + (["scenario"] if many_scenarios else [])
        + ["variant"]
        + (["target"] if many_targets else [])
        + (["condition"] if many_conditions else [])
        + ["rep", "turns", "stop reason", "status", "fork"]
    )
    for col in columns:
        table.add_column(col, no_wrap=True)
    for c in rows[:MAX_ROWS]:
        fork = (
            f"{c.parent_id[:8]}@{c.fork_turn}"
            if c.parent_id and c.fork_turn is not None
            else (f"={c.parent_id[:8]}" if c.parent_id else "")
        )
        values = (
            [c.id]
            + ([c.scenario_id] if many_scenarios else [])
            + [c.variant_id]
            + ([c.target] if many_targets else [])
            + ([c.condition] if many_conditions else [])
            + [c.replicate, c.n_turns, c.stop_reason or "-", c.status, fork]
        )
        table.add_row(*(Text(safe_text(str(v))) for v in values))
    console.print(table)
    if len(rows) > MAX_ROWS:
        console.print(Text(f"... and {len(rows) - MAX_ROWS} more conversations"))
    tally: dict[str, int] = {}
    for c in rows:
        key = f"{c.status}/{c.stop_reason or '-'}"
        tally[key] = tally.get(key, 0) + 1
    console.print(
        Text("by status/stop reason: " + ", ".join(f"{k} {v}" for k, v in sorted(tally.items())))
    )
    calls, hits = result.calls, calls_text(result.cached_calls)
    db = result.db.removeprefix("sqlite:///")
    resumed = (
        f" (resumed: {result.interrupted_before} unfinished conversations continued)"
        if result.resumed
        else ""
    )
    console.print(
        Text(
            f"run {result.run_id}{resumed}: {len(result.conversations)} conversations in "
            f"{db}; "
            f"model calls: {calls.get('persona', 0)} persona, {calls.get('target', 0)} target, "
            f"{calls.get('detector', 0)} detector"
            + (f" (of them answered from the cache: {hits})" if hits else "")
        )
    )
    if result.persona_flags:  # the realism gate rated its persona turns
        console.print(Text(result.persona_flags))
    if rows:
        import shlex

        # a real id the reader can paste: a completed arm that forked shows the most (its shared
        # prefix, the fork and what followed), else any completed one, else the first
        _, example = min(
            enumerate(rows),
            key=lambda ic: (ic[1].status != "completed", ic[1].fork_turn is None, ic[0]),
        )
        console.print(
            Text(f"see one with: branchpoint show {example.id} --db {shlex.quote(db)}"),
            soft_wrap=True,
        )


def show_command(
    conversation: Annotated[
        str,
        typer.Argument(
            help="Conversation id (or a unique prefix of it).",
            show_default=False,
            metavar="CONV_ID",
        ),
    ],
    db: DbOption = None,
) -> None:
    """Print a stored transcript with its stages, the branch points that fired, events and fork
    point, then its provenance (config hash, the prompts' and rules' hashes, the detector, and the
    code and package versions a sweep recorded)."""
    from rich.console import Console

    from branchpoint.core.read import conversation_provenance, find_run
    from branchpoint.core.store import open_store
    from branchpoint.simulator.transcript import (
        load_conversation,
        render_conversation,
        render_provenance,
    )

    store = open_store(db, create=False)
    try:
        conv, turns = load_conversation(store, conversation)
        provenance = conversation_provenance(store, conv.id)
        run = find_run(store, conv.run_id)
    finally:
        store.close()
    console = Console()
    console.print(render_conversation(conv, turns))
    console.print(render_provenance(provenance, run))


def register(app: typer.Typer) -> None:
    app.command("run")(run_command)
    app.command("show")(show_command)


def _realism_level(level: str | None) -> str | None:
    from branchpoint.core.domain import (
        REALISM_LEVELS,  # not branchpoint.core.human_labels: that imports the store
    )

    if level is not None and level not in REALISM_LEVELS:
        raise UserError(
            f"--realism-min {level!r}: unknown level (expected one of: {', '.join(REALISM_LEVELS)})"
        )
    return level
