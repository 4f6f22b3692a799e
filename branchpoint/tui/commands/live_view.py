"""The live view of a running sweep, drawn from a ``SweepMonitor`` (branchpoint/study/monitor.py).

On a terminal (stderr) it is a rich ``Live`` display: conversations finished of those planned
(completed and failed apart, so the share never passes 100% and a failed one is never "done"),
the turns stored, one ETA; per target done / running / failed, calls, tokens, dollars; per role
(target, persona, detector, judge) with its spec, the calls, tokens and dollars of its call rows
(what ``branchpoint runs`` counts), "unpriced" where no price is known; per provider calls in flight against the current limit and the 429s;
the oldest running conversation; judging. Anywhere else (CI logs, a pipe) it prints one plain
line every ``plain_every_s`` seconds, so that a log stays readable.

Every value is a rich ``Text``: nothing read from the manifest or the store is parsed as markup
(a target named ``[red]x[/red]`` is shown as those characters). Model text is never shown.
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import TYPE_CHECKING, Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

# the monitor this view draws has imported it already
from branchpoint.core.read.costs import share_text

if TYPE_CHECKING:
    from branchpoint.study.monitor import MonitorSnapshot, SweepMonitor

PLAIN_EVERY_S = 10.0


def duration(seconds: float | None) -> str:
    """``1h02m``, ``3m05s``, ``12s``; ``-`` when unknown."""
    if seconds is None:
        return "-"
    s = max(0, int(round(seconds)))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    if s >= 60:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s}s"


def _usd(value: float | None) -> str:
    """Dollars; ``unpriced`` where a call's price is not known (never a made-up $0)."""
    if value is None:
        return "unpriced"
    return f"${value:.4f}" if value < 1 else f"${value:,.2f}"


def progress(snap: MonitorSnapshot) -> str:
    """``3 done, 40 failed, 1 running of 44 conversations (98%)``: finished of planned."""
    done = sum(t.done for t in snap.targets)
    failed = sum(t.failed for t in snap.targets)
    running = sum(t.running for t in snap.targets)
    return (
        f"{done} done, {failed} failed, {running} running of {snap.planned} conversations "
        f"({snap.finished_pct:.0f}%)"
    )


def _safe(value: object) -> str:
    """Control characters (terminal escapes) made visible: a name is shown, never obeyed."""
    return "".join(ch if ch.isprintable() or ch == " " else repr(ch)[1:-1] for ch in str(value))


def _t(value: object, style: str = "") -> Text:
    return Text(_safe(value), style=style)


def render(snap: MonitorSnapshot) -> Group:
    """The view of one snapshot: a heading line, the targets, the providers, the oldest running
    conversation and judging."""
    head = Text.assemble(
        _t(f"sweep {snap.sweep_id}", "bold"),
        _t(
            f"  {progress(snap)}  turns stored {snap.turns_done:,}  "
            f"{snap.calls_per_s:.1f} calls/s  {snap.tokens:,} tokens  {_usd(snap.usd)}  "
            f"elapsed {duration(snap.elapsed_s)}  ETA {duration(snap.eta_s)}"
        ),
    )
    targets = Table(box=None, pad_edge=False, show_edge=False)
    for name in ("target", "done", "running", "failed", "waiting", "calls", "tokens", "USD"):
        targets.add_column(Text(name), justify="left" if name == "target" else "right")
    for t in snap.targets:
        targets.add_row(
            _t(t.target),
            _t(f"{t.done}/{t.planned}"),
            _t(t.running),
            _t(t.failed, "red" if t.failed else ""),
            _t(t.waiting),
            _t(t.calls),
            _t(f"{t.tokens:,}"),
            _t(_usd(t.usd)),
        )
    parts: list[Any] = [head, targets]
    if snap.roles:
        roles = Table(box=None, pad_edge=False, show_edge=False)
        for name in ("role", "spec", "calls", "tokens", "USD", "cached"):
            roles.add_column(Text(name), justify="left" if name in ("role", "spec") else "right")
        for r in snap.roles:
            cached = share_text(r.cached_share)
            roles.add_row(
                _t(r.role), _t(r.spec), _t(r.calls), _t(f"{r.tokens:,}"), _t(_usd(r.usd)),
                _t(cached),
            )  # fmt: skip
        parts.append(roles)
    if snap.providers:
        providers = Table(box=None, pad_edge=False, show_edge=False)
        for name in ("provider of", "in flight", "limit", "configured", "429s", "cooling"):
            providers.add_column(Text(name), justify="left" if name == "provider of" else "right")
        for p in snap.providers:
            providers.add_row(
                _t(p.roles or p.key),  # the roles and specs it serves; its key until one is stored
                _t(p.in_flight),
                _t(p.limit),
                _t(p.configured),
                _t(p.throttled, "yellow" if p.throttled else ""),
                _t(duration(p.cooling_s) if p.cooling_s > 0 else "-"),
            )
        parts.append(providers)
    if snap.oldest_running is not None:
        conv, age = snap.oldest_running
        parts.append(_t(f"oldest running: {conv} ({duration(age)})"))
    parts.append(_t(judging_line(snap)))
    if snap.read_error:
        parts.append(_t(f"store read failed (retrying): {snap.read_error}", "yellow"))
    return Group(*parts)


def judging_line(snap: MonitorSnapshot) -> str:
    done = [j for j in snap.judging if j.state == "done"]
    running = [j for j in snap.judging if j.state == "running"]
    if not snap.judging_planned and not snap.judging:
        return "judging: none in the manifest"
    line = f"judging: {len(done)} of {snap.judging_planned or len(snap.judging)} passes done"
    errors = sum(j.errors for j in done)
    if errors:
        line += f", {errors} error verdict(s)"
    if running:
        line += "; now " + ", ".join(f"{j.label} ({j.conversations} conv.)" for j in running)
    return line


def plain_line(snap: MonitorSnapshot) -> str:
    """The one-line progress of a log: totals over the targets."""
    throttled = sum(p.throttled for p in snap.providers)
    return (
        f"sweep {snap.sweep_id}: {progress(snap)}; turns stored {snap.turns_done:,}; "
        f"{snap.calls_per_s:.1f} calls/s, "
        f"{snap.tokens:,} tokens, {_usd(snap.usd)}; 429s {throttled}; "
        f"elapsed {duration(snap.elapsed_s)}, ETA {duration(snap.eta_s)}"
    )


class LiveView:
    """``with LiveView(monitor, console): ...``: the display while the block runs (see the
    module docstring); ``stop()`` ends it early (an interrupt message follows it)."""

    def __init__(
        self,
        monitor: SweepMonitor,
        console: Console | None = None,
        *,
        plain_every_s: float = PLAIN_EVERY_S,
    ) -> None:
        self.monitor = monitor
        self.console = console or Console(stderr=True)
        self.plain_every_s = plain_every_s
        self._live: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> LiveView:
        if self.console.is_terminal:
            from rich.live import Live

            self._live = Live(
                get_renderable=lambda: render(self.monitor.snapshot()),
                console=self.console,
                refresh_per_second=2,
                transient=False,
            )
            self._live.start()
        else:
            self._thread = threading.Thread(target=self._plain, name="sweep-view", daemon=True)
            self._thread.start()
        return self

    def _plain(self) -> None:
        while not self._stop.wait(self.plain_every_s):
            self._print_line()

    def _print_line(self) -> None:
        self.console.print(
            Text(_safe(plain_line(self.monitor.snapshot()))), soft_wrap=True, highlight=False
        )

    def stop(self) -> None:
        if self._live is not None:
            self._live.refresh()
            self._live.stop()
            self._live = None
        if self._thread is not None:
            self._stop.set()
            self._thread.join(5)
            self._thread = None
            self._print_line()  # where it ended, whatever the interval

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
