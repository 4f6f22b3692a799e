"""Blind labelling: one queue item at a time, a single key per level, stored at once.

Blind means blind: nothing that names the arm or the model is drawn (no fired branch points,
branch state, events or persona retries in the turn headers; no target, condition, simulator,
variant choices or judge verdicts) until ``v`` reveals them, and a label given after revealing the
item (even once, then moving away and back) is stored as not blind. The queue of one conversation
opened from its transcript (``l``) is never blind: that screen showed all of it.

The labelled turn is marked and scrolled into view whenever an item is shown; the context turns
before it scroll with j/k, PageUp/PageDown and Home/End (the context pane takes the focus). Each label records its annotator, the seconds spent on the
item, the blind flag and an optional confidence. Queues are deterministic (``branchpoint.core.human_labels``),
so reopening one resumes at the first item this annotator has not labelled.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Header, Input, Static

from branchpoint.core.human_labels import (
    CONFIDENCE_LEVELS,
    LabelItem,
    LabelRow,
    conversation_queue,
    realism_queue,
    sample_queue,
    save_label,
)
from branchpoint.core.read.browse import EarlierLabel, Transcript, earlier_labels, get_transcript
from branchpoint.tui.app.choices import choices_summary
from branchpoint.tui.app.context import AppContext
from branchpoint.tui.app.label_scales import criterion_definition, levels_for
from branchpoint.tui.app.safe_text import one_line, untrusted
from branchpoint.tui.app.widgets.turn_view import turn_header, verdict_badge

if TYPE_CHECKING:
    from branchpoint.core.store import Store

QueueBuilder = Callable[[AppContext], list[LabelItem]]
CONTEXT_TURNS = 4  # turns shown before the one being labelled
CURRENT_MARK = "\u25b6 the turn you label"


class LabelScreen(Screen[None]):
    DEFAULT_CSS = """
    LabelScreen #progress { height: 1; background: $panel; padding: 0 1; }
    LabelScreen #criterion { height: auto; max-height: 4; padding: 0 1; }
    LabelScreen #context { height: 1fr; padding: 0 1; }
    LabelScreen #context:focus { background-tint: $foreground 3%; }
    LabelScreen #context .current { border-left: thick yellow; }
    LabelScreen #context .context { color: $text-muted; }
    LabelScreen #reveal { height: auto; padding: 0 1; color: $text-muted; }
    LabelScreen #keys { height: auto; padding: 0 1; background: $panel; }
    LabelScreen #note { margin: 0; }
    """
    BINDINGS = [
        Binding("1", "label(1)", "level 1", show=False),
        Binding("2", "label(2)", "level 2", show=False),
        Binding("3", "label(3)", "level 3", show=False),
        Binding("4", "label(4)", "level 4", show=False),
        Binding("0", "label(0)", "not applicable", show=False),
        Binding("v", "reveal", "reveal", tooltip="reveal verdict, target and arm (not blind)"),
        Binding("c", "confidence", "confidence"),
        Binding("m", "note", "note"),
        Binding("right,s", "move(1)", "skip"),
        Binding("left,p", "move(-1)", "prev", tooltip="previous item"),
        Binding("t", "show_current", "the labelled turn", show=False),
        Binding("j", "scroll_context(1)", "scroll context down", show=False),
        Binding("k", "scroll_context(-1)", "scroll context up", show=False),
        Binding("escape,q", "app.pop_screen", "back"),
    ]
    # keys that the focused pane handles (listed by ?)
    WIDGET_KEYS = (
        ("pagedown, pageup", "scroll the context a page"),
        ("home, end", "top of the context, the labelled turn"),
        ("tab", "focus the context pane (or the note while writing one)"),
        ("enter, escape", "keep the note and leave it (while writing one)"),
    )

    def __init__(self, build: QueueBuilder, title: str, *, blind: bool = True) -> None:
        super().__init__()
        self.build = build
        self.queue_title = title
        self.blind_queue = blind
        self.items: list[LabelItem] = []
        self.earlier: dict[LabelItem, EarlierLabel] = {}
        self.revealed_items: set[LabelItem] = set()
        self.position = 0
        self.confidence: str | None = None
        self.shown_at = time.monotonic()
        self.transcripts: dict[str, Transcript | None] = {}

    # Queues, named by what they hold -------------------------------------------------------

    @classmethod
    def sample(cls, *, run_id: str | None, judge: str | None) -> LabelScreen:
        def build(app: AppContext) -> list[LabelItem]:
            return sample_queue(
                app.store, n=app.sample_size, seed=app.seed, run_id=run_id, judge=judge
            )

        return cls(build, "sample of chatbot turns x criteria")

    @classmethod
    def conversations(cls, ids: list[str]) -> LabelScreen:
        # opened from a transcript that showed the verdicts and the arm: never blind
        return cls(
            lambda app: conversation_queue(app.store, ids),
            "every turn of the conversation (not blind: opened from its transcript)",
            blind=False,
        )

    @classmethod
    def realism(cls, *, run_id: str | None) -> LabelScreen:
        def build(app: AppContext) -> list[LabelItem]:
            return realism_queue(app.store, n=app.sample_size, seed=app.seed, run_id=run_id)

        return cls(build, "persona realism (simulator hidden)")

    @property
    def bp_app(self) -> AppContext:
        return self.app  # type: ignore[return-value]

    @property
    def store(self) -> Store:
        return self.bp_app.store

    @property
    def item(self) -> LabelItem | None:
        return self.items[self.position] if 0 <= self.position < len(self.items) else None

    @property
    def done(self) -> set[LabelItem]:
        return set(self.earlier)

    @property
    def revealed(self) -> bool:
        """Whether what identifies the arm is shown for the current item."""
        return not self.blind_queue or self.item in self.revealed_items

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(Text("building the queue ..."), id="progress")
        yield Static(id="criterion")
        yield VerticalScroll(id="context")
        yield Static(id="reveal")
        note = Input(placeholder="note (m to write, enter to keep)", id="note")
        note.can_focus = False  # digits are level keys until m opens the note
        yield note
        yield Static(id="keys")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self.query_one("#context", VerticalScroll).focus()
        self.load_queue()

    @work(thread=True, exclusive=True, group="queue")
    def load_queue(self) -> None:
        items = self.build(self.bp_app)
        earlier = earlier_labels(self.store, self.bp_app.annotator, items)
        first = next((i for i, it in enumerate(items) if it not in earlier), len(items))
        transcript = (
            get_transcript(self.store, items[first].conversation_id) if first < len(items) else None
        )
        self.app.call_from_thread(self._start, items, earlier, first, transcript)

    def _start(
        self,
        items: list[LabelItem],
        earlier: dict[LabelItem, EarlierLabel],
        first: int,
        t: Transcript | None,
    ) -> None:
        self.items, self.earlier, self.position = items, earlier, first
        if t is not None:
            self.transcripts[t.conversation.id] = t
        self.shown_at = time.monotonic()
        self._show()

    # Display ------------------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="transcript")
    def fetch_transcript(self, conversation_id: str) -> None:
        t = get_transcript(self.store, conversation_id)
        self.app.call_from_thread(self._fetched, conversation_id, t)

    def _fetched(self, conversation_id: str, t: Transcript | None) -> None:
        self.transcripts[conversation_id] = t
        item = self.item
        if item is not None and item.conversation_id == conversation_id:
            self._show()

    def _levels(self, item: LabelItem) -> list[tuple[str, str | None]]:
        keys: list[tuple[str, str | None]] = [
            (str(i + 1), level) for i, level in enumerate(levels_for(item.rubric_id))
        ]
        if item.kind == "criterion":
            keys.append(("0", None))
        return keys

    def _show(self) -> None:
        progress = Text()
        progress.append(f"{len(self.earlier)}/{len(self.items)} labelled", style="bold")
        progress.append(f"  item {min(self.position + 1, len(self.items))}  annotator ")
        progress.append_text(one_line(self.bp_app.annotator, 20))
        progress.append("  REVEALED" if self.revealed else "  BLIND", style="bold")
        progress.append_text(one_line(f"  {self.queue_title}", 40, style="dim"))
        self.query_one("#progress", Static).update(progress)
        item = self.item
        context = self.query_one("#context", VerticalScroll)
        context.remove_children()
        if item is None:
            done = "queue finished" if self.items else "nothing to label in this selection"
            self.query_one("#criterion", Static).update(Text(done, style="bold"))
            self.query_one("#reveal", Static).update("")
            self.query_one("#keys", Static).update(Text("escape: back"))
            return
        crit = Text("criterion ", style="bold")
        crit.append_text(one_line(item.criterion_id, 40, style="bold"))
        before = self.earlier.get(item)
        if before is not None:
            crit.append("  your earlier label: ", style="dim")
            crit.append_text(verdict_badge(before.verdict))
            crit.append(" (a new label replaces it)", style="dim")
        definition = criterion_definition(item.rubric_id, item.criterion_id)
        self.query_one("#criterion", Static).update(
            Group(crit, untrusted(definition, style="italic")) if definition else crit
        )
        if item.conversation_id not in self.transcripts:
            self.fetch_transcript(item.conversation_id)  # shows the context when it arrives
        t = self.transcripts.get(item.conversation_id)
        if t is not None:
            context.mount_all(self._context_widgets(t, item))
            self.call_after_refresh(self.action_show_current)
        self.query_one("#reveal", Static).update(self._reveal_text(t, item))
        keys = Text()
        for key, level in self._levels(item):
            keys.append(f" {key} ", style="bold reverse")
            keys.append(f" {level or 'not applicable'}  ")
        keys.append(f"  confidence: {self.confidence or '-'} (c)", style="dim")
        self.query_one("#keys", Static).update(keys)

    def _context_widgets(self, t: Transcript, item: LabelItem) -> list[Static]:
        target = item.turn_index if item.turn_index is not None else len(t.turns) - 1
        start = max(0, target - CONTEXT_TURNS)
        blind = not self.revealed
        widgets: list[Static] = []
        for turn in t.turns[start : target + 1]:
            current = turn.index == item.turn_index
            body: list[RenderableType] = []
            if current:
                body.append(Text(CURRENT_MARK, style="bold black on yellow"))
            body += [turn_header(turn, blind=blind), untrusted(turn.content or "")]
            widgets.append(
                Static(Group(*body), classes="current" if current else "context", id=None)
            )
        return widgets

    def _reveal_text(self, t: Transcript | None, item: LabelItem) -> Text:
        if not self.revealed:
            hidden = "simulator" if item.kind == "realism" else "judge verdict, target and arm"
            return Text(f"{hidden} hidden (v reveals; the label is then not blind)")
        if t is None:
            return Text("")
        c = t.conversation
        out = Text("target ")
        out.append_text(one_line(c.target, 30))
        out.append("  condition ")
        out.append_text(one_line(c.condition, 16))
        out.append("  arm ")
        out.append_text(one_line(choices_summary(c.choices) or "-", 40))
        out.append("  simulator ")
        out.append_text(one_line(c.simulator or "-", 24))
        for j in t.judgments:
            if j.turn_index == item.turn_index and j.criterion_id == item.criterion_id:
                out.append("\n")
                out.append_text(one_line(j.judge, 30))
                out.append(": ")
                out.append_text(verdict_badge(j.verdict))
        return out

    # Actions -------------------------------------------------------------------------------

    def action_show_current(self) -> None:
        """Scroll the context so that the labelled turn starts at its top."""
        for widget in self.query("#context .current"):
            widget.scroll_visible(top=True, animate=False, immediate=True)

    def action_scroll_context(self, step: int) -> None:
        context = self.query_one("#context", VerticalScroll)
        if step > 0:
            context.scroll_down(animate=False)
        else:
            context.scroll_up(animate=False)

    def action_label(self, key: int) -> None:
        item = self.item
        if item is None:
            return
        levels = dict(self._levels(item))
        if str(key) not in levels:
            self.notify(f"{key}: not a level of this scale", markup=False, severity="warning")
            return
        note = self.query_one("#note", Input)
        blind = not self.revealed
        save_label(
            self.store,
            LabelRow(
                conversation_id=item.conversation_id,
                turn_index=item.turn_index,
                rubric_id=item.rubric_id,
                criterion_id=item.criterion_id,
                annotator=self.bp_app.annotator,
                verdict=levels[str(key)],
                note=note.value,
                confidence=self.confidence,
                time_spent_s=round(time.monotonic() - self.shown_at, 3),
                blind=blind,
                design_id=item.design_id,
            ),
        )
        self.earlier[item] = EarlierLabel(verdict=levels[str(key)], blind=blind)
        note.value = ""
        self.confidence = None
        self.action_move(1)

    def action_move(self, step: int) -> None:
        if not self.items:
            return
        self.position = max(0, min(len(self.items), self.position + step))
        self.shown_at = time.monotonic()  # time spent counts from when the item is shown
        self._show()

    def action_reveal(self) -> None:
        item = self.item
        if item is not None:
            self.revealed_items.add(item)  # for good: a later label on it is not blind
        self._show()

    def action_confidence(self) -> None:
        cycle = [None, *CONFIDENCE_LEVELS]
        self.confidence = cycle[(cycle.index(self.confidence) + 1) % len(cycle)]
        self._show()

    def action_note(self) -> None:
        note = self.query_one("#note", Input)
        note.can_focus = True
        note.focus()

    @on(Input.Submitted, "#note")
    def keep_note(self) -> None:
        note = self.query_one("#note", Input)
        note.can_focus = False
        self.query_one("#context", VerticalScroll).focus()

    def on_key(self, event: events.Key) -> None:
        note = self.query_one("#note", Input)
        if event.key == "escape" and note.has_focus:
            event.stop()
            self.keep_note()
