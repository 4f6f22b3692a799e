"""One run on several cores: the plan's trees split across worker processes (``--processes N``).

One process runs the engine on one asyncio loop, so a sweep against a fast provider is bound by
that one core long before the provider is. ``execute_in_processes`` sends each of N worker
processes (forked from a fork server, or spawned: never a fork of the parent, whose threads and
database connections a child would copy half-made) a share of the plan's trees, balanced by their planned model calls
(``branchpoint.simulator.call_tally``). Each worker opens its own store connection and its own gateway and
runs ``branchpoint.simulator.execute.execute`` on its share; the parent keeps what belongs to the run as a
whole: the lease, the Run row and provenance, the progress bar, the final status.

Provider limits are not shared between processes, so each worker gets its share of them: calls
in flight (``max_concurrency``) and ``--concurrency`` are divided so that the shares add up to
the limit (each at least 1), requests and tokens per minute are divided by N.

Workers report the turns they wrote a few times a second (not per turn) through a pipe, and
their model-call counts at the end. A worker that dies fails the run (``WorkerFailed`` names the
worker, its pid and exit code) and the others are stopped; a stop (Ctrl-C, SIGTERM) stops them
all. Either way the workers commit what they queued before they exit, and the parent then marks
the unfinished conversations interrupted, so that a re-run resumes them. A worker whose parent
dies (``kill -9``) sees its control pipe close and stops the same way, so a re-run can take over.

A Python program that runs with ``processes`` > 1 guards its entry point with
``if __name__ == "__main__":``, as any program that starts processes this way must: each worker
imports the program's main module.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from branchpoint.core.errors import UserError
from branchpoint.gateway import event_loop

if TYPE_CHECKING:
    from multiprocessing.context import ForkServerContext, SpawnContext

    from branchpoint.core.store import Store
    from branchpoint.gateway.gateway import Gateway
    from branchpoint.gateway.limits import ProviderLimits
    from branchpoint.simulator.execute import Progress
    from branchpoint.simulator.plan import RunPlan, TreeSpec
    from branchpoint.simulator.run_config import RunConfig

# Local models load their weights in every process that uses them: N copies of the model, and
# each process's batches get smaller. One process batches better.
LOCAL_PREFIXES = ("embedded", "hf")
REPORT_S = 0.25  # how often a worker reports the turns it wrote
POLL_S = 0.05  # how often the parent looks at its workers' pipes and exit codes
STOP_GRACE_S = 20.0  # a stopped worker's time to commit what it queued before it is killed
EXIT_STOPPED = 3  # a worker's exit code when it was stopped before it finished


class WorkerFailed(Exception):
    """A worker process died or failed; the message names it (a one-line reason)."""


class WorkerReport(BaseModel):
    """What a worker sends its parent: turns written since the last report, or how it ended."""

    kind: Literal["turns", "done", "error", "stopped"]
    turns: int = 0
    calls: dict[str, int] = Field(default_factory=dict)
    error: str | None = None


@dataclass
class WorkerJob:
    """Everything one worker needs: its share of the plan, its share of the limits, the store."""

    index: int  # 1-based, as messages name it
    of: int
    plan: RunPlan  # with only this worker's trees
    config: RunConfig  # concurrency and limits already divided
    db: str  # the store's URL (with its password: it goes over a pipe, never to argv or a log)
    # The parent's environment and import path now: a fork server started by an earlier run of
    # this process holds those of then ($BRANCHPOINT_PLUGINS, keys read from the environment).
    env: dict[str, str]
    sys_path: list[str]
    # How the worker makes its gateway, plugins loaded (the runner's: sent by reference)
    gateway_factory: Callable[[RunConfig, Store], Gateway]


# -- how many, and who gets what ----------------------------------------------------------------


def local_model_specs(config: RunConfig) -> list[str]:
    """The run's specs served by a model loaded in the process (each worker would load it)."""
    from branchpoint.gateway.specs import parse_spec
    from branchpoint.simulator.adaptive import split_mode

    sims = [split_mode(s)[1] for s in config.simulators]
    specs = [*config.targets, *sims, *([config.detector] if config.detector else [])]
    return [s for s in specs if parse_spec(s).kind in LOCAL_PREFIXES]


def resolve_processes(config: RunConfig) -> int:
    """Processes ``config`` asks for: ``auto`` is one per CPU, or 1 with a local model; an
    explicit number above 1 with a local model is a UserError."""
    local = local_model_specs(config)
    if config.processes == "auto":
        return 1 if local else (os.cpu_count() or 1)
    if config.processes > 1 and local:
        raise UserError(
            f"--processes {config.processes}: {local[0]} is a local model, which every process "
            "would load again; run it with --processes 1 (one process batches its calls)"
        )
    return config.processes


def worker_count(config: RunConfig, trees: int) -> int:
    """Processes to run ``config``'s ``trees`` trees with: never more than there are trees."""
    return max(1, min(resolve_processes(config), trees))


def shares(total: int, n: int) -> list[int]:
    """``total`` split into ``n`` shares that add up to it (each at least 1)."""
    return [max(1, total // n + (1 if i < total % n else 0)) for i in range(n)]


def split_limits(limits: ProviderLimits, index: int, n: int) -> ProviderLimits:
    """Worker ``index``'s (0-based) share of one provider's limits."""
    return limits.model_copy(
        update={
            "max_concurrency": shares(limits.max_concurrency, n)[index],
            "rpm": limits.rpm / n if limits.rpm else limits.rpm,
            "tpm": limits.tpm / n if limits.tpm else limits.tpm,
        }
    )


def worker_config(config: RunConfig, index: int, n: int) -> RunConfig:
    """``config`` as worker ``index`` (0-based) of ``n`` runs it: its share of every limit."""
    return config.model_copy(
        update={
            "concurrency": shares(config.concurrency, n)[index],
            "limits": {k: split_limits(v, index, n) for k, v in config.limits.items()},
            "processes": 1,
        }
    )


def tree_weight(tree: TreeSpec) -> int:
    """A tree's planned model calls (events midway), what balancing the workers goes by."""
    from branchpoint.simulator.call_tally import schedules, tree_calls

    tally = tree_calls(tree, schedules(tree)["midway"])
    return max(1, tally.persona_calls + tally.target_calls)


def partition(trees: Sequence[TreeSpec], n: int) -> list[list[int]]:
    """Indexes of ``trees`` for each of ``n`` workers, even by planned calls (largest first, each
    to the least loaded worker), each worker's in plan order."""
    weights = [tree_weight(t) for t in trees]
    loads = [0] * n
    out: list[list[int]] = [[] for _ in range(n)]
    for i in sorted(range(len(trees)), key=lambda i: (-weights[i], i)):
        w = min(range(n), key=lambda k: (loads[k], k))
        out[w].append(i)
        loads[w] += weights[i]
    return [sorted(share) for share in out if share]


# -- the parent ---------------------------------------------------------------------------------


# What a worker imports before it can run (a second or two of CPU): a fork server imports it
# once, and each worker forked from it starts with it loaded.
PRELOAD = [
    "branchpoint.simulator.processes",
    "branchpoint.simulator.execute",
    "branchpoint.simulator.graph",
    "branchpoint.simulator.tree",
    "branchpoint.simulator.persona",
    "branchpoint.gateway.gateway",
    "branchpoint.simulator.turn_writer",
    "branchpoint.simulator.runner",  # the gateway factory's module
    "branchpoint.core.store",
]


def _context(config: RunConfig) -> ForkServerContext | SpawnContext:
    """A fork server where there is one, else spawn; never a plain fork of this process, whose
    threads (the store writer, the heartbeat) and database connections a child would copy
    half-made. The fork server is itself a fresh interpreter, started once."""
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    from branchpoint.gateway.providers.registry import BUILTIN
    from branchpoint.gateway.specs import parse_spec
    from branchpoint.simulator.adaptive import split_mode

    context = multiprocessing.get_context("forkserver")
    sims = [split_mode(s)[1] for s in config.simulators]
    specs = [*config.targets, *sims, *([config.detector] if config.detector else [])]
    providers = {BUILTIN[k] for k in (parse_spec(s).kind for s in specs) if k in BUILTIN}
    context.set_forkserver_preload([*PRELOAD, *sorted(providers)])  # used when it first starts
    return context


def start_fork_server(config: RunConfig) -> None:
    """Start the fork server that ``config``'s workers will come from, now: its imports (a second
    or more) then run on another core while this process loads and plans the run, instead of
    after. Nothing happens where workers are spawned, or where the server already runs."""
    context = _context(config)
    if context.get_start_method() == "forkserver":
        from multiprocessing import forkserver

        forkserver.ensure_running()


@dataclass
class _Worker:
    job_index: int
    process: BaseProcess
    control: Connection  # parent -> worker; closing it stops the worker
    reports: Connection  # worker -> parent
    ended: WorkerReport | None = None
    eof: bool = False


async def execute_in_processes(
    plan: RunPlan,
    config: RunConfig,
    db: str,
    n: int,
    progress: Progress,
    gateway_factory: Callable[[RunConfig, Store], Gateway],
) -> dict[str, int]:
    """Run ``plan``'s trees in ``n`` worker processes; returns the model calls made, by purpose.

    Each worker calls ``gateway_factory`` (a module-level function: it is pickled by name) with
    its share of ``config`` and its own store for the gateway it runs its trees through.

    ``progress`` advances as the workers report. Raises WorkerFailed when one dies or fails (the
    others are stopped first); a cancellation stops them all and propagates.
    """
    context = _context(config)
    groups = partition(plan.trees, n)
    n = len(groups)
    workers: list[_Worker] = []
    try:
        for i, indexes in enumerate(groups):
            job = WorkerJob(
                index=i + 1,
                of=n,
                plan=dataclasses.replace(
                    plan,
                    trees=[plan.trees[k] for k in indexes],
                    concurrency=shares(plan.concurrency, n)[i],
                ),
                config=worker_config(config, i, n),
                db=db,
                env=dict(os.environ),
                sys_path=list(sys.path),
                gateway_factory=gateway_factory,
            )
            control_r, control_w = context.Pipe(duplex=False)
            reports_r, reports_w = context.Pipe(duplex=False)
            process = context.Process(
                target=worker_main,
                args=(job, control_r, reports_w),
                name=f"branchpoint-worker-{i + 1}",
                daemon=True,  # a parent that exits normally never leaves one behind
            )
            process.start()
            # only the worker holds these ends now: its parent's death closes its control pipe
            control_r.close()
            reports_w.close()
            workers.append(_Worker(i + 1, process, control_w, reports_r))
        calls: dict[str, int] = {}
        running = list(workers)
        while running:
            await asyncio.sleep(POLL_S)
            for w in running:
                _read_reports(w, progress)
            for w in list(running):
                if w.process.exitcode is None:
                    continue
                _read_reports(w, progress)  # what it sent just before it exited
                if w.ended is None or w.ended.kind != "done":
                    raise WorkerFailed(_why(w, n))
                for purpose, k in w.ended.calls.items():
                    calls[purpose] = calls.get(purpose, 0) + k
                running.remove(w)
        return calls
    finally:
        await _stop(workers)


def _read_reports(w: _Worker, progress: Progress) -> None:
    while not w.eof:
        try:
            if not w.reports.poll():
                return
            report = w.reports.recv()
        except (EOFError, OSError):
            w.eof = True
            return
        if not isinstance(report, WorkerReport):
            continue
        if report.turns:
            progress.advance(report.turns)
        if report.kind != "turns":
            w.ended = report


def _why(w: _Worker, n: int) -> str:
    code = w.process.exitcode
    who = f"worker {w.job_index} of {n} (pid {w.process.pid})"
    if w.ended is not None and w.ended.kind == "error":
        return f"{who} failed: {w.ended.error}"
    if w.ended is not None and w.ended.kind == "stopped":
        return f"{who} was stopped before it finished: {w.ended.error}"
    if code is not None and code < 0:
        try:
            signame = signal.Signals(-code).name
        except ValueError:
            signame = f"signal {-code}"
        return f"{who} died: killed by {signame} (exit code {code})"
    return f"{who} exited with code {code} before it finished"


async def _stop(workers: list[_Worker]) -> None:
    """Stop the workers still running: each commits what it queued and exits; kill stragglers."""
    for w in workers:
        with contextlib.suppress(OSError):
            w.control.close()  # the stop signal: its control pipe reaches EOF
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STOP_GRACE_S
        while any(w.process.exitcode is None for w in workers) and loop.time() < deadline:
            await asyncio.sleep(POLL_S)
    finally:
        for w in workers:
            if w.process.exitcode is None:
                w.process.kill()
            w.process.join(5)
            with contextlib.suppress(OSError):
                w.reports.close()
        if workers:
            _stop_fork_server()


def _stop_fork_server() -> None:
    """End the fork server and wait for it. The workers are its children, not ours: waiting for
    it makes their CPU time count as this process's (what ``wait4`` and ``time`` report for a
    run), and no idle server outlives the run in a long-lived program. ``_stop`` is the method
    CPython's own tests use; without it the server ends with this process instead.

    It is killed first: its workers have ended and been reaped by it (their usage is in its own,
    which the wait reports), and a server that exits by itself tears down the interpreter it
    preloaded, half a second at the end of every run."""
    from multiprocessing import forkserver

    server = getattr(forkserver, "_forkserver", None)
    pid = getattr(server, "_forkserver_pid", None)
    if isinstance(pid, int):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    stop = getattr(server, "_stop", None)
    if callable(stop):
        with contextlib.suppress(Exception):
            stop()


# -- the worker ---------------------------------------------------------------------------------


def worker_main(job: WorkerJob, control: Connection, reports: Connection) -> None:
    """A worker process: run ``job``'s trees, report, exit 0 (done), 1 (failed) or 3 (stopped)."""
    # Ctrl-C reaches the whole process group; the parent decides, and stops us through the pipe.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ.clear()
    os.environ.update(job.env)
    sys.path[:] = job.sys_path
    code = 0
    try:
        event_loop.run(_work(job, control, reports))
    except _Stopped as stop:
        _send(reports, WorkerReport(kind="stopped", error=str(stop)))
        code = EXIT_STOPPED
    except BaseException as exc:  # the reason goes to the parent, which fails the run with it
        why = str(exc.args[0]) if exc.args else ""
        _send(reports, WorkerReport(kind="error", error=f"{type(exc).__name__}: {why}"[:2000]))
        code = 1
    finally:
        with contextlib.suppress(OSError):
            reports.close()
    os._exit(code)  # no atexit work: the store is closed, and a stuck thread must not hold us


class _Stopped(Exception):
    pass


def _send(reports: Connection, report: WorkerReport) -> bool:
    try:
        reports.send(report)
    except (OSError, ValueError):  # the parent is gone
        return False
    return True


async def _work(job: WorkerJob, control: Connection, reports: Connection) -> None:
    from branchpoint.core.store import open_store
    from branchpoint.simulator.execute import Progress, execute

    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    assert main is not None
    stopped: list[str] = []
    parent = os.getppid()  # the run's process, or the fork server it started

    def stop(why: str) -> None:
        if not stopped:
            stopped.append(why)
            main.cancel()

    def watch_control() -> None:
        # Blocks until the parent closes its end (a stop) or dies (the kernel closes it).
        try:
            control.recv()
            why = "stopped by the parent"
        except (EOFError, OSError):
            why = (
                "stopped by the parent" if os.getppid() == parent else "the parent process is gone"
            )
        with contextlib.suppress(RuntimeError):  # the loop has already closed
            loop.call_soon_threadsafe(stop, why)

    threading.Thread(target=watch_control, name="branchpoint-worker-control", daemon=True).start()
    loop.add_signal_handler(signal.SIGTERM, stop, "received SIGTERM")

    progress = Progress()
    sent = 0

    async def report() -> None:
        nonlocal sent
        while True:
            await asyncio.sleep(REPORT_S)
            if progress.done > sent:
                if not _send(reports, WorkerReport(kind="turns", turns=progress.done - sent)):
                    stop("the parent process is gone")
                sent = progress.done
            if os.getppid() != parent:
                stop("the parent process is gone")

    store = open_store(job.db)
    try:
        gateway = job.gateway_factory(job.config, store)
        try:
            reporter = asyncio.create_task(report())
            try:
                execution = await execute(job.plan, store, gateway, progress=progress)
            finally:
                reporter.cancel()
        finally:
            await gateway.aclose()
    except asyncio.CancelledError:
        if stopped:
            raise _Stopped(stopped[0]) from None
        raise
    finally:
        store.close()
    _send(
        reports,
        WorkerReport(kind="done", turns=progress.done - sent, calls=dict(execution.calls)),
    )
