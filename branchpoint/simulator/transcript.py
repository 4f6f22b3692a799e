"""Rendering a stored conversation for ``branchpoint show``: literal model text, marks in colour.

Model text is shown as ``rich.text.Text`` (never parsed as markup) under the one untrusted-text
policy (``branchpoint.core.untrusted.visible``: control characters written as escapes), so a reply cannot
restyle or take over the terminal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group
from rich.panel import Panel
from rich.rule import Rule
from rich.text import Text

from branchpoint.core.untrusted import visible

if TYPE_CHECKING:
    from rich.console import RenderableType

    from branchpoint.core.records import Conversation, ConversationProvenance, Run, Turn
    from branchpoint.core.store import Store


def safe_text(text: str | None) -> str:
    """``text`` as ``branchpoint.core.untrusted.visible`` shows it (newlines kept, controls as escapes)."""
    return visible(text)


def load_conversation(store: Store, conv_id: str) -> tuple[Conversation, list[Turn]]:
    """A conversation by its id or a unique prefix of it, with its transcript."""
    from branchpoint.core.read import conversation_turns, find_conversation

    conv = find_conversation(store, conv_id)
    return conv, conversation_turns(store, conv.id)


def render_conversation(conv: Conversation, turns: list[Turn]) -> RenderableType:
    head = Text()
    head.append(f"conversation {conv.id}", style="bold")
    head.append(f"   run {safe_text(conv.run_id)}\n")
    head.append(f"scenario {safe_text(conv.scenario_id)}   variant {safe_text(conv.variant_id)}\n")
    if conv.choices:
        head.append(
            "choices: "
            + ", ".join(f"{safe_text(str(k))}={safe_text(str(v))}" for k, v in conv.choices.items())
            + "\n"
        )
    head.append(
        f"target {safe_text(conv.target)}   condition {safe_text(conv.condition)}   "
        f"simulator {safe_text(conv.simulator)}   replicate {conv.replicate} (seed {conv.seed})\n"
    )
    head.append(f"status {conv.status}", style="green" if conv.status == "completed" else "yellow")
    head.append(f"   stop reason {conv.stop_reason or '-'}   turns {conv.n_turns}")
    if conv.parent_id:
        fork = f" from turn {conv.fork_turn}" if conv.fork_turn is not None else " (never diverged)"
        head.append(f"\nshares its prefix with {conv.parent_id}; own turns{fork}")
    if conv.error:
        head.append("\nerror: ", style="red")
        head.append(safe_text(conv.error))
    parts: list[RenderableType] = [Panel(head, expand=False)]
    stage = None
    for turn in turns:
        if conv.fork_turn is not None and turn.index == conv.fork_turn:
            parts.append(
                Rule(
                    Text(f"fork: own turns of this arm start here (turn {turn.index})"),
                    style="magenta",
                )
            )
        if turn.stage != stage and turn.stage is not None:
            stage = turn.stage
            parts.append(Rule(Text(f"stage {safe_text(stage)}"), style="cyan", align="left"))
        label = Text()
        who = "persona" if turn.role == "user" else "chatbot"
        label.append(
            f"[{turn.index}] exchange {turn.exchange} {who}",
            style="bold blue" if turn.role == "user" else "bold green",
        )
        if turn.origin_turn_id:
            label.append("  (shared)", style="dim")
        if turn.fired:
            label.append("  fired: ", style="magenta")
            label.append(
                ", ".join(
                    f"{safe_text(b)}={safe_text(str((turn.branch_state or {}).get(b)))}"
                    for b in turn.fired
                ),
                style="magenta",
            )
        if turn.events:
            label.append("  events: ", style="yellow")
            label.append(", ".join(safe_text(e) for e in turn.events), style="yellow")
        if turn.retries:
            label.append(
                f"  retries: {turn.retries} ({safe_text('; '.join(turn.retry_reasons or []))})",
                style="red",
            )
        if turn.finish_reason == "end_marker":
            label.append("  (persona ended)", style="dim")
        plan = turn.persona_plan or {}
        if plan.get("tactic"):  # an adaptive persona's choice (issue 47)
            why = f" ({plan['why']})" if plan.get("why") else ""
            label.append(f"  tactic: {safe_text(str(plan['tactic']) + why)}", style="cyan")
        parts.append(label)
        if turn.reasoning:
            parts.append(Text("  reasoning: " + safe_text(turn.reasoning), style="dim italic"))
        parts.append(Text(safe_text(turn.content)))
        parts.append(Text(""))
    return Group(*parts)


def render_provenance(prov: ConversationProvenance | None, run: Run | None) -> RenderableType:
    """What produced the conversation besides its scenario and models: the run's config hash,
    the texts it was made with (by hash: ``PromptText``), the event detector, and the code and
    package versions a sweep recorded. Labels fit 12 columns, so that a full hash (64) stays on
    its line at 80."""
    rows: list[tuple[str, str]] = []
    if prov is None:
        rows.append(("", "none recorded (stored before provenance was kept)"))
    else:
        detector = prov.detector + (f" {prov.detector_params}" if prov.detector_params else "")
        rows += [
            ("config", prov.config_hash),
            ("system", prov.system_prompt_hash or "none: the condition adds no system prompt"),
            ("persona", prov.persona_template_hash),
            ("event rules", prov.event_rules_hash),
            ("detector", detector),
        ]
    config = (run.config or {}) if run is not None else {}
    if run is not None:
        rows.append(("run", f"{run.id} ({run.kind}, {run.status})"))
    if config.get("git_revision"):
        rows.append(("git", str(config["git_revision"])))
    versions = config.get("versions") or {}
    if versions:
        rows.append(("versions", ", ".join(f"{k} {v}" for k, v in sorted(versions.items()))))
    text = Text()
    text.append("provenance (texts by hash: prompt_texts)", style="bold")
    for name, value in rows:
        text.append(f"\n{name:12}{safe_text(value)}")
    return Panel(text, expand=False)
