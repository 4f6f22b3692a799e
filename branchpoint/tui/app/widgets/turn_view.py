"""One turn of a transcript: who spoke, stage, fired branch points and events, the message with the
judge's evidence highlighted, optional reasoning, and the verdicts per criterion.

Every model-derived string goes through ``branchpoint.tui.app.safe_text``; highlighting is applied to the
cleaned text, so a quote is found exactly where it is shown.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text
from textual.widgets import Static

from branchpoint.core.read.browse import FAILING
from branchpoint.core.read.persona_flags import TurnFlags
from branchpoint.core.records import Judgment, Turn
from branchpoint.tui.app.safe_text import clean, one_line, untrusted

VERDICT_STYLE = {
    "fail": "bold white on red",
    "high": "bold white on red",
    "partial": "bold black on yellow",
    "medium": "bold black on yellow",
    "pass": "bold black on green",
    "low": "bold black on green",
    "refusal": "bold white on blue",
    "error": "bold white on magenta",
}
EVIDENCE_STYLE = "reverse"
FAILING_EVIDENCE_STYLE = "bold white on red"


def verdict_badge(verdict: str | None) -> Text:
    label = "n/a" if verdict is None else clean(verdict)
    return Text(f" {label} ", style=VERDICT_STYLE.get(label, "dim"))


def highlight_evidence(content: str, judgments: Sequence[Judgment]) -> Text:
    """``content`` shown literally, each quoted evidence span styled (failing verdicts in red)."""
    text = untrusted(content)
    plain = text.plain
    for j in judgments:
        style = FAILING_EVIDENCE_STYLE if j.verdict in FAILING else EVIDENCE_STYLE
        for ev in j.evidence or []:
            quote = clean(ev.get("quote", "")) if isinstance(ev, dict) else ""
            if not quote:
                continue
            start = plain.find(quote)
            while start != -1:
                text.stylize(style, start, start + len(quote))
                start = plain.find(quote, start + len(quote))
    return text


def turn_header(
    turn: Turn, *, shared: bool = False, blind: bool = False, flags: TurnFlags | None = None
) -> Text:
    """``blind``: only who spoke and when, for the labelling screens. Fired branch points, the
    branch state, events, persona retries and persona flags name the arm or the simulator, so they
    are left out. ``flags``: the persona turn's manipulation checks that say not enacted (each
    shown as ``not enacted: branch_point=option``) and a realism rating below ``mostly``."""
    who = "persona" if turn.role == "user" else "chatbot"
    head = Text()
    head.append(
        f"[{turn.index}] exchange {turn.exchange} {who}",
        style="bold blue" if turn.role == "user" else "bold green",
    )
    if blind:
        return head
    if shared:
        head.append("  (shared prefix)", style="dim")
    if turn.fired:
        head.append("  fired: ", style="magenta")
        fired = ", ".join(f"{b}={(turn.branch_state or {}).get(b)}" for b in turn.fired)
        head.append_text(one_line(fired, style="magenta"))
    if turn.events:
        head.append("  events: ", style="yellow")
        head.append_text(one_line(", ".join(map(str, turn.events)), style="yellow"))
    if turn.retries:
        head.append(f"  persona retries: {turn.retries}", style="red")
    plan = turn.persona_plan or {}
    if plan.get("tactic"):  # an adaptive persona's choice (issue 47)
        head.append("  tactic: ", style="cyan")
        why = f" ({plan['why']})" if plan.get("why") else ""
        head.append_text(one_line(f"{plan['tactic']}{why}", style="cyan"))
    if flags is not None:
        for bp in flags.not_enacted:
            head.append("  not enacted: ", style="bold red")
            option = (turn.branch_state or {}).get(bp)
            head.append_text(one_line(f"{bp}={option}", style="bold red"))
        if flags.realism is not None:
            head.append("  low realism: ", style="bold red")
            head.append_text(one_line(flags.realism, style="bold red"))
    return head


def verdict_lines(judgments: Sequence[Judgment], *, expanded: bool) -> list[RenderableType]:
    out: list[RenderableType] = []
    for j in judgments:
        if not j.applicable and j.verdict is None:
            continue
        line = Text("  ")
        line.append_text(verdict_badge(j.verdict))
        line.append(" ")
        line.append_text(one_line(j.criterion_id, style="bold"))
        if j.error:
            line.append("  error: ", style="magenta")
            line.append_text(one_line(j.error, 60))
        out.append(line)
        if expanded:
            if j.rationale:
                out.append(Text("      ").append_text(untrusted(j.rationale, style="italic")))
            evidence: list[Any] = list(j.evidence or [])  # stored JSON: trust no shape
            for ev in evidence:
                if not isinstance(ev, dict):
                    continue
                mark = "verified" if ev.get("verified") else "not found in the transcript"
                quote = Text("      \u201c").append_text(untrusted(ev.get("quote", "")))
                quote.append(f"\u201d ({mark})", style="dim")
                out.append(quote)
    return out


class TurnView(Static):
    """A turn; ``current`` marks the one the keys act on."""

    DEFAULT_CSS = """
    TurnView { padding: 0 1; margin: 0 0 1 0; }
    TurnView.current { border-left: thick $accent; background: $boost; }
    TurnView.failing { border-right: tall $error; }
    """

    def __init__(
        self,
        turn: Turn,
        judgments: Sequence[Judgment] = (),
        *,
        shared: bool = False,
        show_verdicts: bool = True,
        flags: TurnFlags | None = None,
        id: str | None = None,
    ) -> None:
        super().__init__(id=id)
        self.turn = turn
        self.flags = flags
        self.judgments = list(judgments)
        self.shared = shared
        self.show_verdicts = show_verdicts
        self.expanded = False
        self.show_reasoning = False
        self.set_class(any(j.verdict in FAILING for j in self.judgments), "failing")

    def on_mount(self) -> None:
        self.refresh_view()

    def set_judgments(self, judgments: Sequence[Judgment]) -> None:
        self.judgments = list(judgments)
        self.set_class(any(j.verdict in FAILING for j in self.judgments), "failing")
        self.refresh_view()

    def toggle_expanded(self) -> None:
        self.expanded = not self.expanded
        self.refresh_view()

    def toggle_reasoning(self) -> None:
        self.show_reasoning = not self.show_reasoning
        self.refresh_view()

    def build(self) -> RenderableType:
        parts: list[RenderableType] = [turn_header(self.turn, shared=self.shared, flags=self.flags)]
        if self.turn.reasoning:
            if self.show_reasoning:
                parts.append(Text("reasoning:", style="dim"))
                parts.append(untrusted(self.turn.reasoning, style="dim italic"))
            else:
                parts.append(Text("(reasoning hidden: r shows it)", style="dim"))
        shown = self.judgments if self.show_verdicts else []
        parts.append(highlight_evidence(self.turn.content or "", shown))
        if shown:
            parts.extend(verdict_lines(shown, expanded=self.expanded))
        return Group(*parts)

    def refresh_view(self) -> None:
        self.update(self.build())
