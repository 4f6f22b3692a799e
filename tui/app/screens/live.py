"""Watch a run while it writes: per target done / running / failed / pending, the rate, the cost so
far, and the age of the run's last heartbeat.

It polls the store once a second in a worker and updates only the cells that changed, so the
table does not flicker and the cursor stays where it is.
"""

from __future__ import annotations

from datetime import UTC, datetime

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from core.read.browse import TargetProgress, latest_running_run, run_progress
from core.read.runs import find_run
from core.records import Run
from tui.app.context import AppContext
from tui.app.safe_text import one_line

COLUMNS = ("target", "done", "running", "failed", "pending", "per min", "cost")


def _aware(t: datetime | None) -> datetime | None:
    # SQLite hands timestamps back naive; they were written in UTC.
    return t.replace(tzinfo=UTC) if t is not None and t.tzinfo is None else t


def run_line(run: Run | None, now: datetime) -> Text:
    if run is None:
        return Text("no run in this store yet; waiting ...")
    out = Text("run ", style="bold")
    out.append_text(one_line(run.id, 30))
    out.append(f"  {run.status}", style="green" if run.status == "completed" else "yellow")
    beat = _aware(run.heartbeat_at)
    if beat is not None:
        age = max((now - beat).total_seconds(), 0.0)
        out.append(f"  heartbeat {age:.0f} s ago", style="red" if age > 60 else "")
    else:
        out.append("  no heartbeat", style="dim")
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
    LiveScreen #run { height: 1; padding: 0 1; background: $panel; }
    LiveScreen #targets { height: 1fr; }
    """
    BINDINGS = [Binding("escape,q", "app.pop_screen", "back")]
    INTERVAL_S = 1.0

    def __init__(self, run_id: str | None = None) -> None:
        super().__init__()
        self.run_id = run_id
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
        run_id = self.run_id or latest_running_run(store)
        now = datetime.now(UTC)
        run = find_run(store, run_id) if run_id else None
        progress = run_progress(store, run_id, now) if run_id else []
        self.app.call_from_thread(self._update, run, progress, now)

    def _update(self, run: Run | None, progress: list[TargetProgress], now: datetime) -> None:
        self.polls += 1
        self.query_one("#run", Static).update(run_line(run, now))
        table = self.query_one("#targets", DataTable)
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
