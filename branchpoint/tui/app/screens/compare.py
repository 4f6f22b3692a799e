"""Arms of one tree side by side, aligned by exchange; or (``across="targets"``, key T) the
conversations of every target on one design cell, the two chatbots' transcripts side by side.

The prefix that every chosen arm shares (the same stored turns, see
``branchpoint.core.read.browse.shared_prefix``) is shown once and collapsed; the fork is marked; after it each
exchange is one row with a column per arm, and a criterion whose verdict differs between the arms
is marked with ``≠``. Each exchange's verdicts follow its messages one criterion per row across
the arms, so the verdicts of the arms line up; ``e`` adds each verdict's rationale and evidence,
``n``/``N`` jump to the next/previous exchange whose verdicts differ.

The aligned pane has the focus when the screen opens: j/k, PageUp/PageDown, Home/End scroll it
(Tab moves to the arm list and back).
"""

from __future__ import annotations

import asyncio

from rich.box import MINIMAL
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Header, SelectionList, Static

from branchpoint.core.read.browse import (
    Transcript,
    cell_twins,
    get_transcript,
    shared_prefix,
    tree_arms,
)
from branchpoint.core.records import Judgment
from branchpoint.tui.app.context import AppContext
from branchpoint.tui.app.safe_text import one_line
from branchpoint.tui.app.widgets.turn_view import (
    highlight_evidence,
    turn_header,
    verdict_badge,
    verdict_lines,
)


def differing_choices(transcripts: list[Transcript]) -> list[str]:
    """The branch points (and profile keys) whose option is not the same in every arm."""
    keys = sorted({k for t in transcripts for k in t.conversation.choices})
    return [k for k in keys if len({str(t.conversation.choices.get(k)) for t in transcripts}) > 1]


def arm_label(t: Transcript, keys: list[str]) -> str:
    c = t.conversation.choices
    shown = keys or sorted(c)
    label = " ".join(f"{k}={c.get(k)}" for k in shown) or t.conversation.variant_id
    if t.conversation.origin == "replay":  # issue 47: a person's branch, beside its original
        who = (t.conversation.replay or {}).get("annotator") or "?"
        label = f"replay at turn {t.conversation.fork_turn} by {who}: {label}"
    return label


def _arm_table(n_arms: int) -> Table:
    """A column per arm, of equal widths: the header and every exchange use the same, so that
    they line up."""
    table = Table(box=MINIMAL, expand=True, show_header=False, padding=(0, 1), show_edge=False)
    for _ in range(n_arms):
        table.add_column(ratio=1, overflow="fold")
    return table


class CompareScreen(Screen[None]):
    DEFAULT_CSS = """
    CompareScreen #arms { height: auto; max-height: 5; }
    CompareScreen #aligned { height: 1fr; }
    CompareScreen #aligned:focus { background-tint: $foreground 3%; }
    CompareScreen .exchange { height: auto; margin: 0 0 1 0; }
    CompareScreen .marker { padding: 0 1; }
    CompareScreen .fork { color: magenta; text-style: bold; }
    """
    BINDINGS = [
        Binding(
            "n", "differing(1)", "next differing", tooltip="next exchange whose verdicts differ"
        ),
        Binding("N", "differing(-1)", "prev differing", show=False),
        Binding("e", "evidence", "evidence", tooltip="rationale and evidence of every verdict"),
        Binding("p", "toggle_prefix", "prefix", tooltip="show or hide the shared prefix"),
        Binding("J", "switch_judge", "judge", tooltip="the next judge's verdicts"),
        Binding("j", "scroll(1)", "scroll down", show=False),
        Binding("k", "scroll(-1)", "scroll up", show=False),
        Binding("escape,q", "app.pop_screen", "back"),
    ]
    # keys that the focused pane handles (listed by ?)
    WIDGET_KEYS = (
        ("tab, shift+tab", "move between the aligned arms and the arm list"),
        ("pagedown, pageup, home, end", "scroll the aligned arms (or move in the arm list)"),
        ("up, down", "scroll the aligned arms a line (or move in the arm list)"),
        ("space, enter", "in the arm list: show or hide the highlighted arm"),
    )

    def __init__(
        self, conversation_id: str, *, judge: str | None = None, across: str = "arms"
    ) -> None:
        super().__init__()
        self.conversation_id = conversation_id
        self.across = across  # "arms" of one tree, or "targets" of one cell
        self.judge = judge
        self.transcripts: dict[str, Transcript] = {}
        self.order: list[str] = []
        self.chosen: list[str] = []
        self.prefix_open = False
        self.expanded = False
        self.fork_at: int | None = None  # turn index of the first turn not shared by all
        self.exchanges: list[Static] = []  # one per exchange after the fork, in order
        self.differing: list[int] = []  # positions in ``exchanges`` whose verdicts differ
        self._rendering = asyncio.Lock()

    @property
    def bp_app(self) -> AppContext:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield Header()
        yield SelectionList[str](id="arms")
        # shown until the arms are read (a tree of a big store may take a moment)
        yield VerticalScroll(Static(Text("loading the arms ..."), classes="marker"), id="aligned")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.query_one("#aligned").focus()
        self.load()

    @work(thread=True, exclusive=True, group="arms")
    def load(self) -> None:
        store = self.bp_app.store
        if self.across == "targets":
            arms = cell_twins(store, self.conversation_id)
        else:
            arms = tree_arms(store, self.conversation_id)
        transcripts = [get_transcript(self.bp_app.store, a.id) for a in arms]
        loaded = [t for t in transcripts if t is not None]
        self.app.call_from_thread(self._loaded, loaded)  # type: ignore[arg-type]

    async def _loaded(self, transcripts: list[Transcript]) -> None:
        self.transcripts = {t.conversation.id: t for t in transcripts}
        self.order = [t.conversation.id for t in transcripts]
        judges = sorted({j for t in transcripts for j in t.judges})
        if self.judge not in judges:
            self.judge = judges[0] if judges else None
        opened = self.transcripts.get(self.conversation_id)
        parent = opened.conversation.parent_id if opened is not None else None
        if opened is not None and opened.conversation.origin == "replay" and parent in self.order:
            baseline: str | None = parent  # a replay is compared with the arm it replays
        else:
            baseline = next((cid for cid in self.order if cid != self.conversation_id), None)
        self.chosen = [cid for cid in self.order if cid in (self.conversation_id, baseline)]
        keys = differing_choices(transcripts)
        arms = self.query_one("#arms", SelectionList)
        arms.clear_options()
        for cid in self.order:
            label = one_line(self._label(self.transcripts[cid], keys), 70)
            arms.add_option((label, cid, cid in self.chosen))
        arms.highlighted = 0
        await self.render_aligned()

    @on(SelectionList.SelectedChanged, "#arms")
    async def arms_changed(self) -> None:
        selected = set(self.query_one("#arms", SelectionList).selected)
        self.chosen = [cid for cid in self.order if cid in selected]
        await self.render_aligned()

    async def action_toggle_prefix(self) -> None:
        self.prefix_open = not self.prefix_open
        await self.render_aligned()

    async def action_evidence(self) -> None:
        self.expanded = not self.expanded
        await self.render_aligned()

    async def action_switch_judge(self) -> None:
        judges = sorted({j for t in self.transcripts.values() for j in t.judges})
        if len(judges) > 1:
            i = judges.index(self.judge) if self.judge in judges else -1
            self.judge = judges[(i + 1) % len(judges)]
            await self.render_aligned()

    def action_scroll(self, step: int) -> None:
        box = self.query_one("#aligned", VerticalScroll)
        if step > 0:
            box.scroll_down(animate=False)
        else:
            box.scroll_up(animate=False)

    def action_differing(self, step: int) -> None:
        """Scroll to the next (or previous) exchange below (above) the top of the pane whose
        verdicts differ between the arms."""
        box = self.query_one("#aligned", VerticalScroll)
        top = box.scroll_offset.y
        tops = [(i, self.exchanges[i].virtual_region.y) for i in self.differing]
        if step > 0:
            found = next((i for i, y in tops if y > top), None)
        else:
            found = next((i for i, y in reversed(tops) if y < top), None)
        if found is None:
            where = "below" if step > 0 else "above"
            self.notify(f"no exchange {where} with differing verdicts", markup=False)
            return
        box.scroll_to_widget(self.exchanges[found], top=True, animate=False, immediate=True)

    def _label(self, t: Transcript, keys: list[str]) -> str:
        if self.across == "targets":
            return t.conversation.target
        return arm_label(t, keys)

    # ------------------------------------------------------------------ the aligned view

    def _verdicts(self, t: Transcript, turn_index: int) -> dict[str, Judgment]:
        return {
            j.criterion_id: j
            for j in t.judgments
            if j.judge == self.judge and j.turn_index == turn_index
        }

    async def render_aligned(self) -> None:
        # the arm list's SelectedChanged and the load both render: one at a time, or the second
        # would mount beside the first's widgets
        async with self._rendering:
            await self._render_aligned()

    async def _render_aligned(self) -> None:
        box = self.query_one("#aligned", VerticalScroll)
        await box.remove_children()
        self.exchanges, self.differing = [], []
        arms = [self.transcripts[cid] for cid in self.chosen]
        if len(arms) < 2:
            await box.mount(
                Static(
                    Text("pick two or more arms above (tab, then space toggles)"), classes="marker"
                )
            )
            return
        keys = differing_choices(arms)
        turns = [t.turns for t in arms]
        k = shared_prefix(turns)
        self.fork_at = turns[0][k].index if k < len(turns[0]) else None
        widgets: list[Static] = []
        header = _arm_table(len(arms))
        header.add_row(*(one_line(self._label(t, keys), style="bold") for t in arms))
        widgets.append(Static(header, classes="marker"))
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
                    body = [turn_header(turn), highlight_evidence(turn.content or "", [])]
                    widgets.append(Static(Group(*body), classes="marker"))
        if self.across == "targets" and k == 0:
            note = "each target's own conversation of this design cell (nothing shared)"
            widgets.append(Static(Text(note), classes="marker fork", id="fork"))
            for exchange in sorted({turn.exchange for arm in turns for turn in arm}):
                row, differ = self._exchange(arms, exchange, 0)
                if differ:
                    self.differing.append(len(self.exchanges))
                self.exchanges.append(row)
                widgets.append(row)
        elif self.fork_at is None:
            widgets.append(Static(Text("these arms never diverged"), classes="marker fork"))
        else:
            fork = f"\u2442 fork at turn {self.fork_at} (exchange {turns[0][k].exchange})"
            widgets.append(Static(Text(fork), classes="marker fork", id="fork"))
            for exchange in sorted({turn.exchange for arm in turns for turn in arm[k:]}):
                row, differ = self._exchange(arms, exchange, k)
                if differ:
                    self.differing.append(len(self.exchanges))
                self.exchanges.append(row)
                widgets.append(row)
        await box.mount_all(widgets)

    def _exchange(self, arms: list[Transcript], exchange: int, k: int) -> tuple[Static, bool]:
        """One exchange as one table: the arms' messages side by side, then one row per criterion
        rated in any arm, so that the verdicts line up by construction; ``≠`` where they differ.
        (One widget per exchange: a 35k-store tree draws in a blink.)"""
        own = [[t for t in arm.turns[k:] if t.exchange == exchange] for arm in arms]
        verdicts = [
            {crit: j for turn in turns for crit, j in self._verdicts(arm, turn.index).items()}
            for arm, turns in zip(arms, own)
        ]
        criteria = sorted({c for v in verdicts for c in v})
        differ = {
            c for c in criteria if len({(v[c].verdict if c in v else None) for v in verdicts}) > 1
        }
        table = _arm_table(len(arms))
        cells: list[RenderableType] = []
        for arm_verdicts, turns in zip(verdicts, own):
            body: list[RenderableType] = []
            for turn in turns:
                body += [
                    turn_header(turn),
                    highlight_evidence(turn.content or "", list(arm_verdicts.values())),
                ]
            if not turns:
                body.append(Text("(ended before this exchange)", style="dim"))
            cells.append(Group(*body))
        table.add_row(*cells)
        for crit in criteria:
            row: list[RenderableType] = []
            for arm_verdicts in verdicts:
                j = arm_verdicts.get(crit)
                line = Text("\u2260 " if crit in differ else "  ", style="bold red")
                line.append_text(verdict_badge(j.verdict if j else None))
                line.append(" ")
                line.append_text(one_line(crit, style="bold" if crit in differ else ""))
                parts: list[RenderableType] = [line]
                if self.expanded and j is not None:
                    parts += verdict_lines([j], expanded=True)[1:]  # its rationale and evidence
                row.append(Group(*parts))
            table.add_row(*row, style="on grey15" if crit in differ else "")
        return Static(table, classes="exchange"), bool(differ)
