"""The first screen: runs with their counts, and a paged, filterable list of conversations.

Each page is one SQL query (``core.read.browse.conversations_page``) run in a worker thread, so a
store of tens of thousands of conversations opens as fast as a small one and the UI never waits.
"""

from __future__ import annotations

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Input, Static

from core.read.browse import (
    ConversationFilter,
    Page,
    RunSummary,
    conversations_page,
    list_runs,
)
from tui.app.choices import choices_summary
from tui.app.context import AppContext
from tui.app.filter_query import HELP, FilterError, parse_filter
from tui.app.safe_text import one_line


class BrowseScreen(Screen[None]):
    DEFAULT_CSS = """
    BrowseScreen #runs { height: 5; }
    BrowseScreen #conversations { height: 1fr; }
    BrowseScreen #pager { height: 1; background: $panel; }
    BrowseScreen #filter { margin: 0; }
    """
    BINDINGS = [
        Binding("enter", "open_current", "open transcript", show=False),
        Binding("slash", "focus_filter", "filter"),
        Binding("s", "toggle_sort", "sort"),
        Binding("right_square_bracket", "page(1)", "next page"),
        Binding("left_square_bracket", "page(-1)", "prev page"),
        Binding("c", "compare", "compare arms"),
        Binding("L", "label_sample", "label sample"),
        Binding("R", "rate_realism", "rate realism"),
        Binding("A", "agreement", "agreement"),
        Binding("w", "live", "live"),
        Binding("q", "app.quit", "quit"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.filter = ConversationFilter()
        self.page_offset = 0
        self.page: Page | None = None
        self.runs: list[RunSummary] = []

    @property
    def bp_app(self) -> AppContext:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield Header()
        runs: DataTable[Text] = DataTable(id="runs", cursor_type="row", zebra_stripes=True)
        runs.add_columns("run", "kind", "status", "convs", "done", "failed", "name")
        yield runs
        yield Input(placeholder="filter: " + HELP, id="filter")
        table: DataTable[Text] = DataTable(
            id="conversations", cursor_type="row", zebra_stripes=True
        )
        # failures first: at 80 columns the last ones are off screen
        table.add_column("fails", width=5)
        table.add_column("scenario", width=14)
        table.add_column("choices", width=24)
        table.add_column("target", width=14)
        table.add_column("cond", width=8)
        table.add_column("status", width=9)
        table.add_column("id", width=16)
        yield table
        yield Static(id="pager")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#conversations", DataTable).focus()
        self.load_runs()
        self.load_page()

    # ------------------------------------------------------------------ data

    @work(thread=True, exclusive=True, group="runs")
    def load_runs(self) -> None:
        runs = list_runs(self.bp_app.store)
        self.app.call_from_thread(self._show_runs, runs)

    def _show_runs(self, runs: list[RunSummary]) -> None:
        self.runs = runs
        table = self.query_one("#runs", DataTable)
        table.clear()
        for r in runs:
            table.add_row(
                one_line(r.id, 24),
                Text(r.kind),
                Text(r.status),
                Text(str(r.n_conversations)),
                Text(str(r.n_completed)),
                Text(str(r.n_failed)),
                one_line(r.name or "", 40),
                key=r.id,
            )

    @work(thread=True, exclusive=True, group="page")
    def load_page(self) -> None:
        page = conversations_page(
            self.bp_app.store, self.filter, self.page_offset, self.bp_app.page_size
        )
        self.app.call_from_thread(self._show_page, page)

    def _show_page(self, page: Page) -> None:
        self.page = page
        table = self.query_one("#conversations", DataTable)
        table.clear()
        for row in page.rows:
            table.add_row(
                Text(str(row.n_fail), style="bold red" if row.n_fail else "dim"),
                one_line(row.scenario_id, 14),
                one_line(choices_summary(row.choices), 24),
                one_line(row.target, 14),
                one_line(row.condition, 8),
                one_line(row.status, 9),
                Text(row.id, style="dim"),
                key=row.id,
            )
        self._show_pager()

    def _show_pager(self, problem: str | None = None) -> None:
        page = self.page
        text = Text()
        if page is not None:
            first = page.offset + 1 if page.rows else 0
            text.append(f"{first}-{page.offset + len(page.rows)} of {page.total}", style="bold")
            text.append(f"  sort: {self.filter.sort}")
        if self.filter.run_id:
            text.append("  run: ")
            text.append_text(one_line(self.filter.run_id, 24))
        if problem:
            text.append("  ")
            text.append_text(one_line(problem, style="bold red"))
        self.query_one("#pager", Static).update(text)

    def current_conversation(self) -> str | None:
        table = self.query_one("#conversations", DataTable)
        if not self.page or not self.page.rows or table.cursor_row >= len(self.page.rows):
            return None
        return self.page.rows[table.cursor_row].id

    # ------------------------------------------------------------------ events and actions

    @on(Input.Submitted, "#filter")
    def apply_filter(self, event: Input.Submitted) -> None:
        try:
            self.filter = parse_filter(event.value, self.filter)
        except FilterError as exc:
            self._show_pager(str(exc))
            return
        self.page_offset = 0
        self.query_one("#conversations", DataTable).focus()
        self.load_page()

    @on(DataTable.RowSelected, "#runs")
    def select_run(self, event: DataTable.RowSelected) -> None:
        run_id = str(event.row_key.value)
        same = self.filter.run_id == run_id
        self.filter = self.filter.model_copy(update={"run_id": None if same else run_id})
        self.page_offset = 0
        self.load_page()

    @on(DataTable.RowSelected, "#conversations")
    def open_conversation(self, event: DataTable.RowSelected) -> None:
        self.bp_app.open_transcript(str(event.row_key.value), self.filter.judge)

    def action_open_current(self) -> None:
        # the conversations table opens on enter itself; this serves when no table has the focus
        cid = self.current_conversation()
        if cid is not None:
            self.bp_app.open_transcript(cid, self.filter.judge)

    def action_focus_filter(self) -> None:
        self.query_one("#filter", Input).focus()

    def action_toggle_sort(self) -> None:
        sort = "failures" if self.filter.sort == "id" else "id"
        self.filter = self.filter.model_copy(update={"sort": sort})
        self.page_offset = 0
        self.load_page()

    def action_page(self, step: int) -> None:
        if self.page is None:
            return
        offset = self.page_offset + step * self.bp_app.page_size
        if offset < 0 or offset >= max(self.page.total, 1):
            return
        self.page_offset = offset
        self.load_page()

    def action_compare(self) -> None:
        cid = self.current_conversation()
        if cid is not None:
            self.bp_app.open_compare(cid, self.filter.judge)

    def action_label_sample(self) -> None:
        self.bp_app.open_label_sample(self.filter.run_id, self.filter.judge)

    def action_rate_realism(self) -> None:
        self.bp_app.open_realism(self.filter.run_id)

    def action_agreement(self) -> None:
        self.bp_app.open_agreement(self.filter.run_id)

    def action_live(self) -> None:
        self.bp_app.open_live(self.filter.run_id)
