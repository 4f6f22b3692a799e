"""Static HTML pages of single transcripts, for the report's failing examples.

One page per conversation, written next to the report (``transcripts/<id>.html``): the arm and its
fork, the system prompt, every message in order, each chatbot reply with its verdicts (a badge per
criterion and judge, the rationale, the evidence quotes) and the quoted passages highlighted in the
reply. A reply with a verdict at the worst level of its scale is framed. The page is rendered by a
sandboxed, autoescaping Jinja2 environment (``branchpoint.core.templates.html_template``): every piece of model,
persona, judge or spec text is escaped, and a Content-Security-Policy allows no script and no
remote content, so the page opens offline and stays inert whatever a transcript contains. Text is
redacted (``branchpoint.core.redaction``) like every export.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from branchpoint.analysis.export.transcripts import TranscriptRecord, Verdict, iter_transcripts
from branchpoint.core.scales import ERROR, WORST_LEVELS

PAGES_DIR = "transcripts"
TEMPLATE = "transcript_page.html.j2"


@dataclass
class _ShownVerdict:
    label: str
    css: str
    criterion: str
    judge: str
    rationale: str
    error: str | None
    quotes: list[str]


@dataclass
class _ShownMessage:
    index: int
    exchange: int
    role: str
    who: str
    reasoning: str | None
    segments: list[tuple[str, bool]]
    fired: list[str]
    events: list[str]
    shared: bool
    verdicts: list[_ShownVerdict] = field(default_factory=list)
    failing: bool = False


def _quotes(v: Verdict) -> list[str]:
    return [str(e["quote"]) for e in v.evidence if isinstance(e, dict) and e.get("quote")]


def _shown(v: Verdict) -> _ShownVerdict:
    if not v.applicable:
        label, css = "not applicable", "na"
    else:
        label = v.verdict or "none"
        css = label if label in ("fail", "partial", "pass", "high", "medium", "low") else "error"
    if v.verdict == ERROR:
        css = "error"
    return _ShownVerdict(label, css, v.criterion_id, v.judge, v.rationale, v.error, _quotes(v))


def highlight(text: str, quotes: Iterable[str]) -> list[tuple[str, bool]]:
    """``text`` cut into (piece, is_quoted) segments: every occurrence of a quote is marked.

    Overlapping quotes merge into one marked span. The pieces are plain text: the template
    escapes them, so a quote cannot inject markup either."""
    spans: list[tuple[int, int]] = []
    for q in {q for q in quotes if q}:
        start = text.find(q)
        while start >= 0:
            spans.append((start, start + len(q)))
            start = text.find(q, start + 1)
    merged: list[list[int]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    out: list[tuple[str, bool]] = []
    pos = 0
    for a, b in merged:
        if a > pos:
            out.append((text[pos:a], False))
        out.append((text[a:b], True))
        pos = b
    if pos < len(text) or not out:
        out.append((text[pos:], False))
    return out


def render_page(record: TranscriptRecord, back: str = "../report.html") -> str:
    """One transcript as a self-contained HTML page (``back``: the link to the report)."""
    from branchpoint.core.templates import html_template

    by_turn: dict[str, list[Verdict]] = {}
    whole: list[Verdict] = []
    for v in record.verdicts:
        (by_turn.setdefault(v.turn_id, []) if v.turn_id else whole).append(v)
    messages = []
    for m in record.messages:
        vs = sorted(by_turn.get(m.turn_id, []), key=lambda v: (v.criterion_id, v.judge))
        quotes = [q for v in vs for q in _quotes(v)]
        messages.append(
            _ShownMessage(
                index=m.index,
                exchange=m.exchange,
                role=m.role,
                who="persona" if m.role == "user" else f"chatbot ({record.target})",
                reasoning=m.reasoning,
                segments=highlight(m.content, quotes),
                fired=m.fired,
                events=m.events,
                shared=m.shared_prefix,
                verdicts=[_shown(v) for v in vs],
                failing=any(v.applicable and v.verdict in WORST_LEVELS for v in vs),
            )  # fmt: skip
        )
    source = (
        resources.files("branchpoint.analysis.export")
        .joinpath(TEMPLATE)
        .read_text(encoding="utf-8")
    )
    return str(
        html_template(source).render(
            r=record,
            choices=sorted((str(k), str(v)) for k, v in record.choices.items()),
            messages=messages,
            whole=[_shown(v) for v in whole],
            back=back,
        )
    )


def page_name(conversation_id: str) -> str:
    """The page's path relative to the report (ids are hashes; anything else is made safe)."""
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", conversation_id) or "_"
    return f"{PAGES_DIR}/{safe}.html"


def example_pages(store_or_db: Any, examples: Any, out_dir: str | os.PathLike[str]) -> Any:
    """The report's hook: a page for each failing example's conversation, and a section that
    links them (None when there are no examples). ``examples``: ``branchpoint.core.read.failing_examples``."""
    from branchpoint.analysis.report.sections import Section

    if examples is None or examples.empty or "conversation_id" not in examples.columns:
        return None
    pages = write_transcript_pages(store_or_db, list(examples["conversation_id"]), out_dir)
    section = Section("Transcripts of the failing examples")
    section.text.append(
        "Each failing example's whole conversation on a page of its own: every message in "
        "order, each reply's verdicts with the judge's rationale, and the quoted evidence "
        "highlighted. The pages need no network and show all text literally."
    )
    for row in examples.itertuples(index=False):
        cid = str(row.conversation_id)
        if cid in pages:
            label = (
                f"{row.scenario_id}, {row.target}, {row.condition}: {row.criterion_id} failed at "
                f"turn {row.turn_index} (conversation {cid})"
            )
            section.links.append((label, f"{page_name(cid)}#turn-{row.turn_index}"))
    return section


def write_transcript_pages(
    store_or_db: Any,
    conversation_ids: Sequence[str],
    out_dir: str | os.PathLike[str],
    *,
    back: str = "../report.html",
) -> dict[str, Path]:
    """Write a page for each of ``conversation_ids`` under ``out_dir/transcripts/``; conversation
    id -> the page's path. Ids that are not in the store get no page."""
    from branchpoint.analysis.export.formats import Redactor
    from branchpoint.analysis.export.tables import Conversations

    wanted = list(dict.fromkeys(str(c) for c in conversation_ids))
    if not wanted:
        return {}
    folder = Path(out_dir) / PAGES_DIR
    folder.mkdir(parents=True, exist_ok=True)
    redactor = Redactor()
    conv = Conversations(store_or_db, None)
    written: dict[str, Path] = {}
    for record in iter_transcripts(store_or_db, only=wanted, conversations=conv, redactor=redactor):
        path = Path(out_dir) / page_name(record.conversation_id)
        path.write_text(render_page(record, back), encoding="utf-8")
        written[record.conversation_id] = path
    return written
