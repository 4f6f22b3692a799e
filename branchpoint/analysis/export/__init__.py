"""Exports an outside analyst (or another tool) can use without branchpoint.

* flat tables (``export_level``), as CSV, Parquet or JSON lines: ``unit`` (one row per unit of
  analysis, a judged turn x criterion x judge counted once however many arms carry it: what every
  count and rate uses), ``judgment`` and ``turn`` (the stored rows of each transcript, copies of a
  shared prefix included and flagged: every verdict with rationale, evidence, error and raw
  output; every message), ``arm`` (realisation flags per conversation x branch point);
* transcripts (``write_transcripts`` / ``load_transcripts``): one conversation a record, with its
  messages, arm, fork and verdicts, as JSON lines or Parquet; ``TranscriptRecord`` is the schema;
* Inspect AI eval logs (``write_inspect_logs``), browsable with ``inspect view``;
* static HTML pages of single transcripts (``write_transcript_pages``) for the report's examples.

Names are imported lazily: ``import branchpoint.analysis.export`` loads neither pandas nor inspect_ai.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from branchpoint.core.lazy import lazy_getattr

_EXPORTS = {
    "FLAT_FORMATS": "branchpoint.analysis.export.formats",
    "read_export": "branchpoint.analysis.export.formats",
    "LEVELS": "branchpoint.analysis.export.tables",
    "export_level": "branchpoint.analysis.export.tables",
    "TranscriptRecord": "branchpoint.analysis.export.transcripts",
    "transcript_schema": "branchpoint.analysis.export.transcripts",
    "iter_transcripts": "branchpoint.analysis.export.transcripts",
    "write_transcripts": "branchpoint.analysis.export.transcripts",
    "load_transcripts": "branchpoint.analysis.export.transcripts",
    "write_inspect_logs": "branchpoint.analysis.export.inspect_logs",
    "render_page": "branchpoint.analysis.export.pages",
    "write_transcript_pages": "branchpoint.analysis.export.pages",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)


if TYPE_CHECKING:  # for type checkers and editors: the names the lazy map serves
    from branchpoint.analysis.export.formats import FLAT_FORMATS, read_export
    from branchpoint.analysis.export.inspect_logs import write_inspect_logs
    from branchpoint.analysis.export.pages import render_page, write_transcript_pages
    from branchpoint.analysis.export.tables import LEVELS, export_level
    from branchpoint.analysis.export.transcripts import (
        TranscriptRecord,
        iter_transcripts,
        load_transcripts,
        transcript_schema,
        write_transcripts,
    )
