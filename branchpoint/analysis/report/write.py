"""Run every analysis on a store and write ``report.md`` and a self-contained ``report.html``.

The headline findings come first (what fits on the first screen): overall failure rates with
intervals, the largest matched contrasts with their p-values and number of pairs, the prompt
condition contrast, error-verdict counts, and the ED safety scores when an ED rubric was judged.
Every plot is written as a PNG next to the reports and embedded (base64) in the HTML; a plot with
no data is replaced by a sentence saying why.

The sections' figures and sentences are computed here and in ``report_sections``; the documents'
layout is in two templates, ``branchpoint/analysis/templates/report.html.j2`` and ``report.md.j2``, rendered in
the project's sandbox (``branchpoint.core.templates``). Every piece of text that came from a model, a user, a
scenario or a spec string is shown under the one untrusted-text policy (``branchpoint.core.untrusted``: control
characters, terminal escape sequences and bidi overrides written as visible escapes) and escaped
on top: HTML-escaped by the HTML template's autoescaping, Markdown-escaped by the Markdown
template's ``md`` filters. Nothing from outside is marked safe.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pandas.io.formats.format import format_array  # DataFrame.to_html's own cell formatter

from branchpoint.analysis.export.pages import example_pages
from branchpoint.analysis.pipeline import Analysis, refuse_pooled_configs, run_analysis
from branchpoint.analysis.report.sections import Section, build_sections, headline_tables
from branchpoint.core.templates import html_template, markdown_template
from branchpoint.core.untrusted import visible

__all__ = [
    "Analysis",
    "ReportFiles",
    "build_sections",
    "headline_tables",
    "refuse_pooled_configs",
    "render_html",
    "render_markdown",
    "run_analysis",
    "write_report",
]


MAX_ROWS = 200  # rows of a table shown in report.md; the full table is written beside it
HTML_MAX_ROWS = 500
TEMPLATES = (
    "templates"  # branchpoint/analysis/templates: report.md.j2 and report.html.j2 (package data)
)


@dataclass(frozen=True)
class _Plot:
    name: str  # the PNG's file name beside the report
    png: str | None  # the PNG in base64 (the HTML embeds it) when drawn, else None
    why: str  # why there is no plot


@dataclass(frozen=True)
class _Table:
    caption: str
    columns: list[str]
    rows: list[list[str]]  # each cell's text, unescaped (the template escapes it)
    note: str | None  # how many rows were cut, and where the whole table is


@dataclass(frozen=True)
class _Shown:
    """A section as a template lays it out: its text as the analysis wrote it, nothing escaped."""

    title: str
    text: list[str]
    plot: _Plot | None
    tables: list[_Table]
    links: list[tuple[str, str]]


def _template(name: str) -> str:
    return (
        resources.files("branchpoint.analysis")
        .joinpath(TEMPLATES, name)
        .read_text(encoding="utf-8")
    )


def _shown(
    sections: list[Section],
    full_tables: Mapping[str, str],
    max_rows: int,
    table: Callable[[pd.DataFrame], tuple[list[str], list[list[str]]]],
) -> list[_Shown]:
    """The sections as the templates lay them out; ``table``: a frame's header and cells as the
    document shows them (text, before escaping)."""
    out = []
    for s in sections:
        plot = None
        if s.plot is not None:
            name, image, why = s.plot
            plot = _Plot(name, base64.b64encode(image).decode("ascii") if image else None, why)
        tables = []
        for cap, df in s.tables:
            columns, rows = table(df.head(max_rows))
            cut = _cut_note(len(df), max_rows, full_tables.get(cap)) if len(df) > max_rows else None
            tables.append(_Table(cap, columns, rows, cut))
        out.append(_Shown(s.title, list(s.text), plot, tables, list(s.links)))
    return out


def _markdown_cells(df: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Each value as ``str()`` shows it, a missing one as blank (``md_cell`` escapes them)."""

    def text(v: Any) -> str:
        return "" if v is None or (isinstance(v, float) and np.isnan(v)) else str(v)

    return [text(c) for c in df.columns], [
        [text(v) for v in row] for row in df.itertuples(index=False)
    ]


def _html_cells(df: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """Each value as the HTML report has always shown it: the text ``DataFrame.to_html`` writes
    (pandas' number formats, one column's floats to the same digits, a line break as ``\\n``),
    from the text after the untrusted-text policy (a tab as spaces). Escaping is the template's."""
    columns = [(visible(c) if isinstance(c, str) else str(c)).strip() for c in df.columns]
    frame = df.map(lambda v: visible(v) if isinstance(v, str) else v)
    cells = []
    with pd.option_context("display.max_colwidth", None):
        for i in range(frame.shape[1]):
            col = frame.iloc[:, i]
            values = col.to_numpy() if isinstance(col.dtype, np.dtype) else col.array
            shown = format_array(values, None, na_rep="", leading_space=False)
            cells.append([v.strip() for v in shown])
    return columns, [list(row) for row in zip(*cells)] if cells else [[] for _ in range(len(df))]


def _cut_note(n: int, shown: int, full: str | None) -> str:
    """How many rows a cut table left out, and where the whole table is, only if written."""
    where = f"; the full table ({n} rows) is in {full}" if full else ""
    return f"({n - shown} of {n} rows not shown here{where})"


def render_markdown(
    sections: list[Section], title: str, full_tables: Mapping[str, str] | None = None
) -> str:
    """``full_tables``: caption -> file holding a cut table in full (see ``write_full_tables``)."""
    shown = _shown(sections, full_tables or {}, MAX_ROWS, _markdown_cells)
    text = str(markdown_template(_template("report.md.j2")).render(title=title, sections=shown))
    return text.rstrip("\n") + "\n"  # one line break at the end, whatever the last block is


def render_html(
    sections: list[Section], title: str, full_tables: Mapping[str, str] | None = None
) -> str:
    shown = _shown(sections, full_tables or {}, HTML_MAX_ROWS, _html_cells)
    return str(html_template(_template("report.html.j2")).render(title=title, sections=shown))


def write_full_tables(
    sections: list[Section], out: Path, max_rows: int = MAX_ROWS
) -> dict[str, str]:
    """Every table too long to show whole, written as CSV under ``out/tables``; caption -> the
    path relative to the report (what the cut table's note names)."""
    written: dict[str, str] = {}
    for s in sections:
        for cap, df in s.tables:
            if len(df) <= max_rows or cap in written:
                continue
            folder = out / "tables"
            folder.mkdir(exist_ok=True)
            name = f"{_slug(s.title)}-{len(written) + 1}.csv"
            df.to_csv(folder / name, index=False)
            written[cap] = f"tables/{name}"
    return written


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40] or "table"


@dataclass
class ReportFiles:
    markdown: Path
    html: Path
    plots: list[Path]
    missing_plots: list[str]


def write_report(
    store_or_db: Any,
    out_dir: str | Path,
    run: str | Sequence[str] | None = None,
    *,
    n_boot: int = 2000,
    seed: int = 0,
    baselines: Mapping[str, str] | None = None,
    analysis: Analysis | None = None,
    title: str | None = None,
    judge: str | None = None,
) -> ReportFiles:
    """Analyse (unless ``analysis`` is given) and write report.md, report.html and the PNG plots.

    ``judge``: the judge the plots show (default: the one with the most non-error ratings)."""
    a = analysis or run_analysis(
        store_or_db, run, n_boot=n_boot, seed=seed, baselines=baselines, judge=judge
    )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    from branchpoint.analysis.judge_correction.section import judge_correction_section
    from branchpoint.analysis.report.languages import language_sections  # issue 47
    from branchpoint.analysis.report.persona import (
        persona_sections,  # issue 36: one self-contained section
    )
    from branchpoint.analysis.report.replays import replay_sections  # issue 47
    from branchpoint.analysis.report.spend import spend_section

    sections = build_sections(a) + persona_sections(store_or_db, a.runs)
    sections += language_sections(store_or_db, a.runs) + replay_sections(store_or_db, a.runs)
    sections += spend_section(store_or_db, a.runs)
    sections.append(
        judge_correction_section(store_or_db, a.runs, baselines=baselines, exclude=a.excluded)
    )
    from branchpoint.analysis.survival.section import time_to_failure_section  # issue 46

    sections.append(time_to_failure_section(a.time_to_failure, a.primary_judge))
    from branchpoint.analysis.chatbots.section import chatbots_section  # issue 46

    ranked = chatbots_section(a.chatbots)
    if ranked is not None:
        sections.append(ranked)
    pages = example_pages(store_or_db, a.examples, out)  # each failing example's own page
    if pages is not None:
        sections.append(pages)
    from branchpoint.analysis.preregistered.section import (  # issue 46
        confirmatory_sections,
        label_exploratory,
    )

    confirmatory = confirmatory_sections(store_or_db, a.runs)
    if confirmatory:  # a registered plan: it opens the report, the rest is exploratory
        label_exploratory(sections)
        sections[:0] = confirmatory
    written, missing = [], []
    for s in sections:
        if s.plot is not None:
            name, png, _why = s.plot
            if png:
                (out / name).write_bytes(png)
                written.append(out / name)
            else:
                missing.append(name)
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    title = title or f"branchpoint report: {', '.join(a.runs) if a.runs else 'all runs'} ({stamp})"
    full = write_full_tables(sections, out)
    md = out / "report.md"
    md.write_text(render_markdown(sections, title, full), encoding="utf-8")
    page = out / "report.html"
    page.write_text(render_html(sections, title, full), encoding="utf-8")
    return ReportFiles(md, page, written, missing)
