"""The first screen: runs with their counts, and a paged, filterable list of conversations.

Each page is one SQL query (``branchpoint.core.read.browse.conversations_page``) run in a worker thread, so a
store of tens of thousands of conversations opens as fast as a small one and the UI never waits;
a query that takes over 200 ms shows a loading indicator.

The screen stays fresh: ``r`` reloads it, and a timer every ``REFRESH_S`` seconds reads a marker of
the runs table (a one-row query); when that changes (a run started, beat, ended), or while a run
is running, the run counts and the current page are read again.

Columns are sized to the terminal and to their cells (``branchpoint.tui.app.columns``): choices show only the
options that set a row apart from most rows of the page, targets lose the prefix they all share.
"""

from __future__ import annotations

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Input, Static

from branchpoint.core.read.browse import (
    ConversationFilter,
    Page,
    RunSummary,
    conversations_page,
    list_runs,
    runs_marker,
)
from branchpoint.tui.app.columns import (
    common_prefix,
    distinguishing_choices,
    fit_widths,
    usual_choices,
)
from branchpoint.tui.app.context import AppContext
from branchpoint.tui.app.filter_query import HELP, FilterError, parse_filter
from branchpoint.tui.app.safe_text import one_line

SORT_LABEL = {"id": "scenario, arm, target", "failures": "failures"}
LOADING_AFTER_S = 0.2
# (heading, rank) of the conversations table, failures first: at 80 columns they matter most.
# The rank says which columns give way first when the terminal is narrow (branchpoint.tui.app.columns): the
# id first, the choices and the target (what tells rows apart) last; -1 never shrinks.
COLUMNS = (
    ("fails", -1),
    ("scenario", 1),
    ("choices", 3),
    ("target", 2),
    ("cond", 1),
    ("status", -1),
    ("id", 0),
)


class BrowseScreen(Screen[None]):
    DEFAULT_CSS = """
    BrowseScreen #runs { height: auto; max-height: 5; }
    BrowseScreen #conversations { height: 1fr; }
    BrowseScreen #pager { height: 1; background: $panel; }
    BrowseScreen #filter { margin: 0; }
    """
    BINDINGS = [
        Binding("enter", "open_current", "open transcript", show=False),
        Binding(
            "slash",
            "focus_filter",
            "filter",
            tooltip="filter (field:value, fails:ID, enacted:no, realism:low)",
        ),
        Binding("escape", "leave_filter", "leave the filter", show=False),
        Binding("s", "toggle_sort", "sort", tooltip="sort by failures / by scenario, arm, target"),
        Binding("right_square_bracket", "page(1)", "next page", show=False),
        Binding("left_square_bracket", "page(-1)", "previous page", show=False),
        Binding("r", "refresh", "refresh", tooltip="read the runs and the page again"),
        Binding("c", "compare", "compare", tooltip="compare the arms of this conversation's tree"),
        Binding("L", "label_sample", "label", tooltip="label a blind sample of chatbot turns"),
        Binding("R", "rate_realism", "realism", tooltip="rate persona realism (blind)"),
        Binding("A", "agreement", "agreement of people and judges", show=False),
        Binding("w", "live", "live", tooltip="watch a run (the live view)"),
        Binding("q", "app.quit", "quit"),
    ]
    WIDGET_KEYS = (
        ("tab, shift+tab", "move between the runs, the filter and the conversations"),
        ("up, down, pageup, pagedown, home, end", "move in the focused table"),
        ("enter", "on a run: show only its conversations (again: all); on a conversation: open it"),
    )
    REFRESH_S = 2.0

    def __init__(self) -> None:
        super().__init__()
        self.filter = ConversationFilter()
        self.page_offset = 0
        self.page: Page | None = None
        self.runs: list[RunSummary] = []
        self.marker: object = None
        self.refreshes = 0

    @property
    def bp_app(self) -> AppContext:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield Header()
        runs: DataTable[Text] = DataTable(id="runs", cursor_type="row", zebra_stripes=True)
        runs.add_columns("run", "kind", "status", "convs", "done", "failed", "name")
        yield runs
        yield Input(placeholder="filter: " + HELP, id="filter")
        yield DataTable(id="conversations", cursor_type="row", zebra_stripes=True)
        yield Static(id="pager")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.query_one("#conversations", DataTable).focus()
        self.load_runs()
        self.load_page()
        self.set_interval(self.REFRESH_S, self.check_fresh)

    def on_resize(self) -> None:
        if self.page is not None:
            self._show_page(self.page)

    # ------------------------------------------------------------------ data

    @work(thread=True, exclusive=True, group="runs")
    def load_runs(self) -> None:
        store = self.bp_app.store
        marker = runs_marker(store)
        runs = list_runs(store)
        self.app.call_from_thread(self._show_runs, runs, marker)

    def _show_runs(self, runs: list[RunSummary], marker: object) -> None:
        self.runs, self.marker = runs, marker
        table = self.query_one("#runs", DataTable)
        row = table.cursor_row
        table.clear()
        for r in runs:
            table.add_row(
                one_line(r.id),  # never cut: it is what --run and the CLI take
                Text(r.kind),
                Text(r.status, style="yellow" if r.status == "running" else ""),
                Text(str(r.n_conversations)),
                Text(str(r.n_completed)),
                Text(str(r.n_failed)),
                one_line(r.name or "", 40),
                key=r.id,
            )
        if runs:
            table.move_cursor(row=min(row, len(runs) - 1))

    @work(thread=True, exclusive=True, group="fresh")
    def check_fresh(self) -> None:
        """Reload when the runs changed, and keep reloading while one is running (cheap: the
        marker is one row of the small runs table)."""
        marker = runs_marker(self.bp_app.store)
        running = any(r.status == "running" for r in self.runs)
        if marker != self.marker or running:
            self.app.call_from_thread(self._refresh_if_idle)

    def _refresh_if_idle(self) -> None:
        # a reload still in flight is not cancelled by the next tick (on a slow store they would
        # cancel each other for ever); it is simply not repeated
        busy = any(
            w.node is self and w.group in ("runs", "page") and not w.is_finished
            for w in self.workers
        )
        if not busy:
            self.action_refresh()

    def action_refresh(self) -> None:
        self.refreshes += 1
        self.load_runs()
        self.load_page(keep_cursor=True)

    @work(thread=True, exclusive=True, group="page")
    def load_page(self, keep_cursor: bool = False) -> None:
        timer = self.app.call_from_thread(
            self.set_timer, LOADING_AFTER_S, lambda: self._loading(True)
        )
        try:
            page = conversations_page(
                self.bp_app.store, self.filter, self.page_offset, self.bp_app.page_size
            )
        finally:
            self.app.call_from_thread(timer.stop)
        self.app.call_from_thread(self._show_page, page, keep_cursor)

    def _loading(self, on: bool) -> None:
        self.query_one("#conversations", DataTable).loading = on

    def _show_page(self, page: Page, keep_cursor: bool = True) -> None:
        self.page = page
        table = self.query_one("#conversations", DataTable)
        self._loading(False)
        row = table.cursor_row if keep_cursor else 0
        usual = usual_choices([r.choices for r in page.rows])
        dropped = common_prefix([r.target for r in page.rows])
        cells = [
            (
                Text(str(r.n_fail), style="bold red" if r.n_fail else "dim"),
                one_line(r.scenario_id),
                one_line(distinguishing_choices(r.choices, usual)),
                one_line(r.target[len(dropped) :]),
                one_line(r.condition),
                one_line(r.status),
                Text(r.id, style="dim"),
            )
            for r in page.rows
        ]
        headings = [name for name, _ in COLUMNS]
        if dropped:
            headings[3] = f"target {dropped}\u2026"
        if usual:
            headings[2] = "choices \u2260 most"
        # a heading's own name counts, not the prefix it names (that may be cut)
        natural = [
            max([len(name), *(c[i].cell_len for c in cells)]) for i, (name, _) in enumerate(COLUMNS)
        ]
        width = table.size.width or self.app.size.width
        widths = fit_widths(
            natural, width, keep=[rank for _, rank in COLUMNS], wants=[len(h) for h in headings]
        )
        table.clear(columns=True)
        for heading, w in zip(headings, widths):
            table.add_column(one_line(heading, w), width=w)
        for r, row_cells in zip(page.rows, cells):
            table.add_row(
                *(
                    c if c.cell_len <= w else one_line(c.plain, w, style=str(c.style))
                    for c, w in zip(row_cells, widths)
                ),
                key=r.id,
            )
        if page.rows:
            table.move_cursor(row=min(row, len(page.rows) - 1))
        self._show_pager()

    def _show_pager(self, problem: str | None = None) -> None:
        page = self.page
        text = Text()
        if page is not None:
            first = page.offset + 1 if page.rows else 0
            text.append(f"{first}-{page.offset + len(page.rows)} of {page.total}", style="bold")
            text.append(f"  sort: {SORT_LABEL[self.filter.sort]}")
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

    def action_leave_filter(self) -> None:
        """Escape leaves the filter box (its text stays; enter applies it)."""
        if self.query_one("#filter", Input).has_focus:
            self.query_one("#conversations", DataTable).focus()

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
