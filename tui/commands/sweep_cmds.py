"""``branchpoint sweep FILE``: plan and run a study from one manifest, resumably.

Exit status: 0 when every conversation completed and no verdict is an error, 1 when some failed
(the summary says how many and why), 2 for usage errors (a bad manifest included), 130 when
interrupted.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from core.errors import UserError

if TYPE_CHECKING:
    from core.store import Store
    from simulator.sweep.manifest import Manifest
    from simulator.sweep.plan import SweepPlan
    from simulator.sweep.run import SweepResult


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
    db: Annotated[
        str | None,
        typer.Option(
            "--db", metavar="PATH", help="Store: a SQLite path or URL (wins over the manifest's)."
        ),
    ] = None,
) -> None:
    """Plan the manifest's cells and run the ones not done yet; the plan is printed first.

    Re-running the same manifest continues it; a manifest that adds targets, conditions or
    replicates adds only the new cells; a change that would alter existing cells is refused.
    """
    from core.store import open_store
    from simulator.sweep.identity import check_compatible
    from simulator.sweep.manifest import ManifestError, load_manifest, sweep_id_for

    try:
        manifest = load_manifest(manifest_file)
    except ManifestError as exc:
        for error in exc.errors:
            typer.echo(str(error), err=True)
        raise typer.Exit(2) from None
    sweep_id = sweep_id_for(manifest, manifest_file)
    url = db or _store_url(manifest, manifest_file)
    # A plan of a sweep never run needs no store, and --plan leaves none behind.
    store = open_store(url) if not plan_only or _exists(url) else None
    try:
        sweep_id, stored = _identify(store, sweep_id, new_sweep)
        plan = _plan(manifest, manifest_file, sweep_id, store, with_keys=not plan_only)
        if stored is not None:
            check_compatible(stored, manifest, sweep_id, str(manifest_file), plan.scenario_hashes)
        for line in plan.lines():
            typer.echo(line)
        if plan_only:
            return
        assert store is not None
        _check_runnable(plan)
        result, verdict_errors = _run(plan, store)
    finally:
        if store is not None:
            store.close()
    code = _summary(result, verdict_errors)
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
    manifest: Manifest, path: Path, sweep_id: str, store: Store | None, *, with_keys: bool
) -> SweepPlan:
    from simulator.sweep.plan import plan_sweep

    return plan_sweep(manifest, path, sweep_id, store=store, with_keys=with_keys)


def _check_runnable(plan: SweepPlan) -> None:
    """Refuse what is planned but not built: Ray, and budgets beyond what the plan can bound."""
    m = plan.manifest
    if m.execution.mode == "ray":
        raise UserError(f"{plan.path}: execution.mode: ray is not built yet (expected local)")
    if m.budget is None:
        return
    # Spend is not yet enforced while running, so a budget is honoured only when the plan's
    # high estimate fits under it.
    high = plan.total("usd", "high") or 0.0
    if m.budget.usd_total is not None and high > m.budget.usd_total:
        raise UserError(
            f"{plan.path}: budget.usd_total: the high estimate ${high:.2f} exceeds "
            f"${m.budget.usd_total:.2f}, and spend is not enforced during a sweep yet "
            "(expected a budget above the plan's high estimate)"
        )
    for i, t in enumerate(plan.targets):
        usd = t.usd["high"] or 0.0
        if m.budget.usd_per_target is not None and usd > m.budget.usd_per_target:
            raise UserError(
                f"{plan.path}: budget.usd_per_target: targets[{i}] ({t.target}) may cost "
                f"${usd:.2f} (high estimate) over ${m.budget.usd_per_target:.2f}, and spend is "
                "not enforced during a sweep yet (expected a budget above the high estimate)"
            )


def _run(plan: SweepPlan, store: Store) -> tuple[SweepResult, int]:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from simulator.sweep.run import run_sweep
    from tui.commands.interrupts import until_signalled

    console = Console(stderr=True)
    progress = Progress(
        TextColumn("turns"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )
    task = progress.add_task("turns", total=None)
    verdict_errors = 0

    async def judge(ids: list[str] | None, when: str) -> None:
        nonlocal verdict_errors
        from judges.runner import ajudge_run
        from simulator.specs import params_from

        for entry in plan.manifest.judges:
            if entry.when != when:
                continue
            for rubric in entry.rubrics:
                summary = await ajudge_run(
                    None if ids is not None else plan.sweep_id,
                    store=store,
                    rubric=rubric,
                    judges=[entry.spec],
                    params=params_from(entry.params, where="judges.params")
                    if entry.params
                    else None,
                    conversation_ids=ids,
                )
                verdict_errors += summary.errors

    async def live(ids: list[str]) -> None:
        await judge(ids, "live")

    def interrupted(name: str) -> None:
        progress.stop()
        console.print(
            f"interrupted ({name}): run the same manifest again to continue sweep {plan.sweep_id}",
            markup=False,
            highlight=False,
        )

    async def work() -> SweepResult:
        result = await run_sweep(
            plan,
            store,
            on_progress=lambda done, total: progress.update(
                task, completed=done, total=total or None
            ),
            on_target_done=live,
        )
        await judge(None, "after")
        return result

    async def main() -> SweepResult:
        return await until_signalled(work, interrupted)

    with progress:
        result = asyncio.run(main())
    return result, verdict_errors


def _summary(result: SweepResult, verdict_errors: int) -> int:
    """Print the outcome; the exit status it calls for (0 all done, 1 some failed)."""
    from rich.console import Console
    from rich.text import Text

    console = Console()
    calls = ", ".join(f"{n} {purpose}" for purpose, n in sorted(result.calls.items()))
    console.print(
        Text(
            f"sweep {result.sweep_id}: {result.conversations} conversations, "
            f"{result.completed} completed, {result.n_failed} not completed; "
            f"model calls now: {calls or 'none'}"
        )
    )
    if result.failed:
        why = ", ".join(f"{reason} {n}" for reason, n in sorted(result.failed.items()))
        console.print(Text(f"not completed, by reason: {why}"))
    if verdict_errors:
        console.print(Text(f"{verdict_errors} verdict(s) are error"))
    return 1 if result.n_failed or verdict_errors else 0


def register(app: typer.Typer) -> None:
    app.command("sweep", no_args_is_help=True)(sweep_command)
