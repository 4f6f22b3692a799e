"""``branchpoint sweep FILE``: plan and run a study from one manifest, resumably.

Exit status: 0 when every conversation completed and no verdict is an error, 1 when some failed
(the summary says how many and why), 2 for usage errors (a bad manifest included, and a run
above the cost threshold with neither a terminal to ask on nor --yes), 130 when interrupted.
Declining at the cost question ("Run it? [y/N]") is the user's choice: exit 0, nothing run.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from core.store import Store
    from judges.runner import JudgeSummary
    from study.manifest import Manifest
    from study.plan import SweepPlan
    from study.run import SweepResult


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
    from core.store import open_store, resolve_url
    from study.identity import check_compatible
    from study.manifest import ManifestError, load_manifest, sweep_id_for

    try:
        manifest = load_manifest(manifest_file)
    except ManifestError as exc:
        for error in exc.errors:
            typer.echo(str(error), err=True)
        raise typer.Exit(2) from None
    sweep_id = sweep_id_for(manifest, manifest_file)
    url = db or _store_url(manifest, manifest_file)
    # A plan of a sweep never run needs no store: --plan leaves none behind, and neither does a
    # run refused or declined at the cost question (the store is opened after it).
    store = open_store(url) if _exists(url) else None
    try:
        sweep_id, stored = _identify(store, sweep_id, new_sweep)
        plan = _plan(
            manifest,
            manifest_file,
            sweep_id,
            store,
            with_keys=not plan_only,
            retry_failed=retry_failed,
        )
        if stored is not None:
            check_compatible(
                stored, manifest, sweep_id, str(manifest_file), plan.scenario_hashes,
                add_cells=add_cells,
            )  # fmt: skip
        for line in plan.lines():
            typer.echo(line)
        if plan_only:
            return
        _check_runnable(plan, resolve_url(url))
        if not yes and not _confirmed(plan):
            typer.echo("nothing run")
            return
        if store is None:
            store = open_store(url)
        result, judging = _run(plan, store, retry_failed=retry_failed)
    finally:
        if store is not None:
            store.close()
    code = _summary(result, judging)
    if code:
        raise typer.Exit(code)


def _store_url(manifest: Manifest, path: Path) -> str | None:
    """The manifest's store: a URL as is, a path relative to the manifest's folder."""
    if manifest.store is None:
        return None
    if "://" in manifest.store or Path(manifest.store).is_absolute():
        return manifest.store
    return str(path.resolve().parent / manifest.store)


def _exists(url: str | None) -> bool:
    from core.store import resolve_url

    resolved = resolve_url(url)
    if not resolved.startswith("sqlite"):
        return True
    return Path(resolved.removeprefix("sqlite:///")).exists()


def _identify(
    store: Store | None, sweep_id: str, new_sweep: bool
) -> tuple[str, dict[str, Any] | None]:
    """The id to run under (a new one with ``new_sweep``), and its stored identity if any."""
    from core.read import find_run

    if new_sweep:
        return f"{sweep_id}-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}", None
    existing = find_run(store, sweep_id) if store is not None else None
    return sweep_id, (dict(existing.config or {}) if existing is not None else None)


def _plan(
    manifest: Manifest,
    path: Path,
    sweep_id: str,
    store: Store | None,
    *,
    with_keys: bool,
    retry_failed: bool = False,
) -> SweepPlan:
    from study.judge_estimate import estimate_judging
    from study.plan import plan_sweep

    plan = plan_sweep(
        manifest, path, sweep_id, store=store, with_keys=with_keys, retry_failed=retry_failed
    )
    plan.attach_judging(estimate_judging(plan, store))  # its calls, costs and wall time
    return plan


def _confirmed(plan: SweepPlan) -> bool:
    """Whether to run ``plan``: yes when its cost bound is under the threshold
    (study/confirm.py), else the answer on a terminal; with no terminal on stdin a
    one-line refusal (exit 2), so a script never starts a costly sweep by accident."""
    import sys

    from study.confirm import cost_check

    check = cost_check(plan)
    if not check.needed:
        return True
    if not sys.stdin.isatty():
        typer.echo(
            f"error: {plan.path}: {check.reason()}; no terminal to ask on (expected --yes to "
            "run it)",
            err=True,
        )
        raise typer.Exit(2)
    typer.echo(f"{check.reason()}.")
    typer.echo("Run it? [y/N] ", nl=False)
    try:
        answer = input()
    except EOFError:  # Ctrl-D: no answer is no (Ctrl-C stays an interrupt: 130)
        typer.echo()
        return False
    return answer.strip().lower() in ("y", "yes")


def _check_runnable(plan: SweepPlan, store_url: str) -> None:
    """Refuse what cannot run: on Ray, a SQLite store or a budget, or Ray not installed. (A
    budget is enforced while a local sweep runs; the plan has already refused a budget with an
    unpriced model.)"""
    if plan.manifest.execution.mode == "ray":
        from study.ray_exec import check_ray

        check_ray(plan, store_url)


def _run(
    plan: SweepPlan, store: Store, *, retry_failed: bool = False
) -> tuple[SweepResult, JudgeSummary]:
    from rich.console import Console

    from gateway.limits import LimiterFactory, SharedLimiters
    from study.monitor import SweepMonitor
    from study.ray_exec import ClusterLimiters, run_sweep_ray
    from study.run import run_sweep, sweep_budget, sweep_gateway, sweep_prices
    from tui.commands.interrupts import until_signalled
    from tui.commands.live_view import LiveView

    console = Console(stderr=True)
    planned: dict[str, list[str]] = {}
    for _, run_plan in plan.runs:
        for tree in run_plan.trees:
            planned.setdefault(tree.target, []).extend(a.conversation_id for a in tree.arms)
    judges = plan.manifest.judges
    monitor = SweepMonitor(
        store,
        plan.sweep_id,
        planned,
        judging_planned=sum(
            len(e.rubrics) * (len(plan.runs) if e.when == "live" else 1) for e in judges
        ),
    )
    view = LiveView(monitor, console)
    target_of = {i: target for target, ids in planned.items() for i in ids}
    summaries: list[JudgeSummary] = []  # every judge, rubric and pass
    local = plan.manifest.execution.mode != "ray"
    # A local sweep's judges share its budget object (live ones judge while trees still
    # reserve); on Ray the actors' is gone by then, and one rebuilt from the stored calls is exact.
    budget = sweep_budget(plan, store) if local else None
    # and its provider limiters: a judge calling a target's provider draws on the same limits
    # (on Ray, while the workers run, the limiter actors they share)
    cluster = None if local else ClusterLimiters()
    limiters: LimiterFactory = SharedLimiters() if cluster is None else cluster

    async def judge(ids: list[str] | None, when: str) -> None:
        from gateway.specs import params_from
        from judges.runner import ajudge_run
        from simulator.runner import load_plugins

        entries = [e for e in plan.manifest.judges if e.when == when]
        if not entries:
            return
        gateway = sweep_gateway(plan, store, write_behind=False, limiters=limiters)
        load_plugins(gateway)  # a judge may be a plugin's model, as a target may
        gateway.budget = budget if local else sweep_budget(plan, store)
        if gateway.budget is not None:
            gateway.prices = sweep_prices(plan)
        try:
            for entry in entries:
                for rubric in entry.rubrics:
                    on = sorted({target_of[i] for i in ids or [] if i in target_of})
                    label = f"{entry.spec}/{rubric} {when}" + (f" on {', '.join(on)}" if on else "")
                    monitor.judge_started(label, when, len(ids if ids is not None else target_of))
                    summary = await ajudge_run(
                        None if ids is not None else plan.sweep_id,
                        store=store,
                        rubric=rubric,
                        judges=[entry.spec],
                        params=params_from(entry.params, where="judges.params")
                        if entry.params
                        else None,
                        conversation_ids=ids,
                        gateway=gateway,
                        # as many in flight as the sweep's conversations (the limits still hold)
                        concurrency=plan.manifest.execution.concurrency,
                    )
                    summaries.append(summary)
                    monitor.judge_finished(label, rows=summary.rows, errors=summary.errors)
        finally:
            await gateway.aclose()

    async def live(ids: list[str]) -> None:
        await judge(ids, "live")

    def interrupted(name: str) -> None:
        view.stop()
        console.print(
            f"interrupted ({name}): run the same manifest again to continue sweep {plan.sweep_id}",
            markup=False,
            highlight=False,
        )

    async def work() -> SweepResult:
        if not local:
            result = await run_sweep_ray(
                plan,
                store,
                on_target_done=live,
                retry_failed=retry_failed,
                monitor=monitor,
                limiters=cluster,
            )
        else:
            result = await run_sweep(
                plan,
                store,
                on_target_done=live,
                retry_failed=retry_failed,
                monitor=monitor,
                budget=budget,
                limiters=limiters,
            )
        await judge(None, "after")
        if result.spent_usd is not None:  # the judges' spend too, from the call rows
            from core.read import reserved_by_target
            from gateway.budget import spend_of_run

            result.spent_usd = sum(spend_of_run(store, plan.sweep_id).values())
            result.reserved_usd = sum(reserved_by_target(store, plan.sweep_id).values())
        return result

    async def main() -> SweepResult:
        return await until_signalled(work, interrupted)

    from gateway import event_loop
    from judges.scenario_rubrics import merge_summaries

    with view:
        result = event_loop.run(main())
    return result, merge_summaries(summaries)


def _summary(result: SweepResult, judging: JudgeSummary) -> int:
    """Print the outcome; the exit status it calls for (0 all done, 1 some failed)."""
    from rich.console import Console
    from rich.text import Text

    console = Console()

    def say(line: str) -> None:
        console.print(Text(line))  # Text: a model name or an error is never read as markup

    calls = ", ".join(f"{n} {purpose}" for purpose, n in sorted(result.calls.items()))
    say(
        f"sweep {result.sweep_id}: {result.conversations} conversations, "
        f"{result.completed} completed, {result.n_failed} not completed; "
        f"model calls now: {calls or 'none'}"
    )
    if result.retried:
        say(f"retried {result.retried} failed conversation(s) (--retry-failed)")
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
    stopped = result.stopped_by_budget or judging.stopped_by_budget
    return 1 if result.n_failed or judging.errors or stopped else 0


def register(app: typer.Typer) -> None:
    app.command("sweep", no_args_is_help=True)(sweep_command)
