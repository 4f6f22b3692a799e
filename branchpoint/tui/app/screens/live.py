"""Watch a run while it writes: per target done / running / failed / pending, the rate, the cost so
far, and the age of the run's last heartbeat.

It shows one run: the one named, or else the latest running run (followed as runs start);
``]`` and ``[`` pick the next or previous run (newest first), which is then kept. It polls the
store once a second in a worker and updates only the cells that changed, so the table does not
flicker and the cursor stays where it is; when the run shown changes, its rows replace the last
run's.
"""

from __future__ import annotations

from datetime import UTC, datetime

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from branchpoint.core.read.browse import TargetProgress, latest_running_run, run_ids, run_progress
from branchpoint.core.read.persona_flags import persona_flags_line
from branchpoint.core.read.runs import find_run
from branchpoint.core.records import Run
from branchpoint.tui.app.context import AppContext
from branchpoint.tui.app.safe_text import one_line

COLUMNS = ("target", "done", "running", "failed", "pending", "per min", "cost")


def _aware(t: datetime | None) -> datetime | None:
    # SQLite hands timestamps back naive; they were written in UTC.
    return t.replace(tzinfo=UTC) if t is not None and t.tzinfo is None else t


def run_line(
    run: Run | None, now: datetime, position: str = "", persona: str | None = None
) -> Text:
    if run is None:
        return Text("no run in this store yet; waiting ...")
    out = Text("run ", style="bold")
    out.append_text(one_line(run.id))
    if position:
        out.append(f" ({position})", style="dim")
    out.append(f"  {run.status}", style="green" if run.status == "completed" else "yellow")
    beat = _aware(run.heartbeat_at)
    if beat is not None:
        age = max((now - beat).total_seconds(), 0.0)
        out.append(f"  heartbeat {age:.0f} s ago", style="red" if age > 60 else "")
    else:
        out.append("  no heartbeat", style="dim")
    if persona:  # live judging or the realism gate rates persona turns while the run writes
        # a line of its own: at 80 columns the run's line is full already
        out.append(f"\n{persona}", style="yellow")
    return out


def progress_cells(p: TargetProgress) -> tuple[Text, ...]:
    return (
        one_line(p.target, 30),
        Text(str(p.done), style="green"),
        Text(str(p.running), style="yellow"),
        Text(str(p.failed), style="red" if p.failed else "dim"),
        Text(str(p.pending)),
        Text(str(p.done_last_minute)),
        Text(f"${p.cost:.4f}"),
    )


class LiveScreen(Screen[None]):
    DEFAULT_CSS = """
    LiveScreen #run { height: auto; max-height: 2; padding: 0 1; background: $panel; }
    LiveScreen #targets { height: 1fr; }
    """
    BINDINGS = [
        Binding("right_square_bracket", "switch(1)", "older run", tooltip="the next older run"),
        Binding("left_square_bracket", "switch(-1)", "newer run", tooltip="the next newer run"),
        Binding("escape,q", "app.pop_screen", "back"),
    ]
    WIDGET_KEYS = (("up, down", "move in the targets"),)
    INTERVAL_S = 1.0

    def __init__(self, run_id: str | None = None) -> None:
        super().__init__()
        self.run_id = run_id or None  # None: follow the latest running run
        self.shown_run: str | None = None
        self.run_ids: list[str] = []
        self.cells: dict[str, tuple[str, ...]] = {}
        self.polls = 0

    @property
    def bp_app(self) -> AppContext:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(Text("loading ..."), id="run")
        table: DataTable[Text] = DataTable(id="targets", cursor_type="row")
        for name in COLUMNS:
            table.add_column(name, key=name)
        yield table
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.poll()
        self.set_interval(self.INTERVAL_S, self.poll)

    @work(thread=True, exclusive=True, group="live")
    def poll(self) -> None:
        store = self.bp_app.store
        ids = run_ids(store)
        run_id = self.run_id or latest_running_run(store)
        now = datetime.now(UTC)
        run = find_run(store, run_id) if run_id else None
        progress = run_progress(store, run_id, now) if run_id else []
        persona = persona_flags_line(store, run_id) if run_id else None
        self.app.call_from_thread(self._update, ids, run, progress, now, persona)

    def action_switch(self, step: int) -> None:
        if not self.run_ids:
            return
        current = self.shown_run if self.shown_run in self.run_ids else None
        i = self.run_ids.index(current) if current is not None else -step
        self.run_id = self.run_ids[(i + step) % len(self.run_ids)]  # kept from now on
        self.poll()

    def _update(
        self,
        ids: list[str],
        run: Run | None,
        progress: list[TargetProgress],
        now: datetime,
        persona: str | None = None,
    ) -> None:
        self.polls += 1
        self.run_ids = ids
        table = self.query_one("#targets", DataTable)
        run_id = run.id if run is not None else None
        if run_id != self.shown_run:  # another run: its rows, not beside the last one's
            table.clear()
            self.cells = {}
            self.shown_run = run_id
        position = ""
        if run_id in ids:
            follow = "" if self.run_id else ", following the latest running"
            position = f"{ids.index(run_id) + 1} of {len(ids)}, newest first{follow}; [ ] switch"
        self.query_one("#run", Static).update(run_line(run, now, position, persona))
        for p in progress:
            cells = progress_cells(p)
            plain = tuple(c.plain for c in cells)
            old = self.cells.get(p.target)
            if old is None:
                table.add_row(*cells, key=p.target)
            else:
                for name, before, after, cell in zip(COLUMNS, old, plain, cells):
                    if before != after:
                        table.update_cell(p.target, name, cell)
            self.cells[p.target] = plain
