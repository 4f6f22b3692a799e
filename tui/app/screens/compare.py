"""Arms of one tree side by side, aligned by exchange.

The prefix that every chosen arm shares (the same stored turns, see
``core.read.browse.shared_prefix``) is shown once and collapsed; the fork is marked; after it each
exchange is one row with a column per arm, and a criterion whose verdict differs between the arms
is marked with ``≠``.
"""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Header, SelectionList, Static

from core.read.browse import Transcript, get_transcript, shared_prefix, tree_arms
from core.records import Judgment, Turn
from tui.app.context import AppContext
from tui.app.safe_text import one_line
from tui.app.widgets.turn_view import highlight_evidence, turn_header, verdict_badge


def differing_choices(transcripts: list[Transcript]) -> list[str]:
    """The branch points (and profile keys) whose option is not the same in every arm."""
    keys = sorted({k for t in transcripts for k in t.conversation.choices})
    return [k for k in keys if len({str(t.conversation.choices.get(k)) for t in transcripts}) > 1]


def arm_label(t: Transcript, keys: list[str]) -> str:
    c = t.conversation.choices
    shown = keys or sorted(c)
    return " ".join(f"{k}={c.get(k)}" for k in shown) or t.conversation.variant_id


class CompareScreen(Screen[None]):
    DEFAULT_CSS = """
    CompareScreen #arms { height: 6; }
    CompareScreen #aligned { height: 1fr; }
    CompareScreen .row { height: auto; }
    CompareScreen .cell { width: 1fr; height: auto; padding: 0 1; border-left: solid $panel; }
    CompareScreen .marker { padding: 0 1; }
    CompareScreen .fork { color: magenta; text-style: bold; }
    """
    BINDINGS = [
        Binding("p", "toggle_prefix", "shared prefix"),
        Binding("J", "switch_judge", "judge"),
        Binding("escape,q", "app.pop_screen", "back"),
    ]

    def __init__(self, conversation_id: str, *, judge: str | None = None) -> None:
        super().__init__()
        self.conversation_id = conversation_id
        self.judge = judge
        self.transcripts: dict[str, Transcript] = {}
        self.order: list[str] = []
        self.chosen: list[str] = []
        self.prefix_open = False
        self.fork_at: int | None = None  # turn index of the first turn not shared by all

    @property
    def bp_app(self) -> AppContext:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield Header()
        yield SelectionList[str](id="arms")
        yield VerticalScroll(id="aligned")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#aligned").can_focus = False
        self.load()

    @work(thread=True, exclusive=True, group="arms")
    def load(self) -> None:
        arms = tree_arms(self.bp_app.store, self.conversation_id)
        transcripts = [get_transcript(self.bp_app.store, a.id) for a in arms]
        loaded = [t for t in transcripts if t is not None]
        self.app.call_from_thread(self._loaded, loaded)  # type: ignore[arg-type]

    async def _loaded(self, transcripts: list[Transcript]) -> None:
        self.transcripts = {t.conversation.id: t for t in transcripts}
        self.order = [t.conversation.id for t in transcripts]
        judges = sorted({j for t in transcripts for j in t.judges})
        if self.judge not in judges:
            self.judge = judges[0] if judges else None
        baseline = next((cid for cid in self.order if cid != self.conversation_id), None)
        self.chosen = [cid for cid in self.order if cid in (self.conversation_id, baseline)]
        keys = differing_choices(transcripts)
        arms = self.query_one("#arms", SelectionList)
        arms.clear_options()
        for cid in self.order:
            label = one_line(arm_label(self.transcripts[cid], keys), 70)
            arms.add_option((label, cid, cid in self.chosen))
        arms.highlighted = 0
        arms.focus()
        await self.render_aligned()

    @on(SelectionList.SelectedChanged, "#arms")
    async def arms_changed(self) -> None:
        selected = set(self.query_one("#arms", SelectionList).selected)
        self.chosen = [cid for cid in self.order if cid in selected]
        await self.render_aligned()

    async def action_toggle_prefix(self) -> None:
        self.prefix_open = not self.prefix_open
        await self.render_aligned()

    async def action_switch_judge(self) -> None:
        judges = sorted({j for t in self.transcripts.values() for j in t.judges})
        if len(judges) > 1:
            i = judges.index(self.judge) if self.judge in judges else -1
            self.judge = judges[(i + 1) % len(judges)]
            await self.render_aligned()

    # ------------------------------------------------------------------ the aligned view

    def _verdicts(self, t: Transcript, turn_index: int) -> dict[str, Judgment]:
        return {
            j.criterion_id: j
            for j in t.judgments
            if j.judge == self.judge and j.turn_index == turn_index
        }

    async def render_aligned(self) -> None:
        box = self.query_one("#aligned", VerticalScroll)
        await box.remove_children()
        arms = [self.transcripts[cid] for cid in self.chosen]
        if len(arms) < 2:
            await box.mount(
                Static(Text("pick two or more arms above (space toggles)"), classes="marker")
            )
            return
        keys = differing_choices(arms)
        turns = [t.turns for t in arms]
        k = shared_prefix(turns)
        self.fork_at = turns[0][k].index if k < len(turns[0]) else None
        widgets: list[Static | Horizontal] = []
        header = [Static(one_line(arm_label(t, keys), style="bold"), classes="cell") for t in arms]
        widgets.append(Horizontal(*header, classes="row"))
        if k:
            last = turns[0][k - 1].exchange
            summary = Text(
                f"\u25b8 shared prefix: {k} turns (exchanges 1-{last}), the same in every arm"
                + ("" if self.prefix_open else "; p shows it"),
                style="dim",
            )
            widgets.append(Static(summary, classes="marker"))
            if self.prefix_open:
                for turn in turns[0][:k]:
                    body = self._cell_body(arms[0], turn, set())
                    widgets.append(Static(Group(*body), classes="marker"))
        if self.fork_at is None:
            widgets.append(Static(Text("these arms never diverged"), classes="marker fork"))
        else:
            fork = f"\u2442 fork at turn {self.fork_at} (exchange {turns[0][k].exchange})"
            widgets.append(Static(Text(fork), classes="marker fork", id="fork"))
            exchanges = sorted({turn.exchange for arm in turns for turn in arm[k:]})
            for exchange in exchanges:
                widgets.append(self._exchange_row(arms, exchange, k))
        await box.mount_all(widgets)

    def _exchange_row(self, arms: list[Transcript], exchange: int, k: int) -> Horizontal:
        own = [[t for t in arm.turns[k:] if t.exchange == exchange] for arm in arms]
        verdicts = [
            {
                crit: j.verdict
                for turn in turns
                for crit, j in self._verdicts(arm, turn.index).items()
            }
            for arm, turns in zip(arms, own)
        ]
        criteria = {c for v in verdicts for c in v}
        differ = {c for c in criteria if len({v.get(c) for v in verdicts}) > 1}
        cells = []
        for arm, turns in zip(arms, own):
            body: list[RenderableType] = []
            for turn in turns:
                body += self._cell_body(arm, turn, differ)
            if not turns:
                body.append(Text("(ended before this exchange)", style="dim"))
            cells.append(Static(Group(*body), classes="cell"))
        return Horizontal(*cells, classes="row")

    def _cell_body(self, arm: Transcript, turn: Turn, differ: set[str]) -> list[RenderableType]:
        verdicts = self._verdicts(arm, turn.index)
        body: list[RenderableType] = [
            turn_header(turn),
            highlight_evidence(turn.content or "", list(verdicts.values())),
        ]
        for crit, j in sorted(verdicts.items()):
            line = Text("\u2260 " if crit in differ else "  ", style="bold red")
            line.append_text(verdict_badge(j.verdict))
            line.append(" ")
            line.append_text(one_line(crit, style="bold" if crit in differ else ""))
            body.append(line)
        return body
