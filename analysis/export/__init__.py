"""Exports an outside analyst (or another tool) can use without branchpoint.

* flat tables (``export_level``): ``turn`` (every message with its flags), ``judgment`` (every
  verdict with rationale, evidence, error and raw output), ``arm`` (realisation flags per
  conversation x branch point), as CSV, Parquet or JSON lines;
* transcripts (``write_transcripts`` / ``load_transcripts``): one conversation a record, with its
  messages, arm, fork and verdicts, as JSON lines or Parquet; ``TranscriptRecord`` is the schema;
* Inspect AI eval logs (``write_inspect_logs``), browsable with ``inspect view``;
* static HTML pages of single transcripts (``write_transcript_pages``) for the report's examples.

Names are imported lazily: ``import analysis.export`` loads neither pandas nor inspect_ai.
"""

from __future__ import annotations

from core.lazy import lazy_getattr

_EXPORTS = {
    "FLAT_FORMATS": "analysis.export.formats",
    "read_export": "analysis.export.formats",
    "LEVELS": "analysis.export.tables",
    "export_level": "analysis.export.tables",
    "TranscriptRecord": "analysis.export.transcripts",
    "transcript_schema": "analysis.export.transcripts",
    "iter_transcripts": "analysis.export.transcripts",
    "write_transcripts": "analysis.export.transcripts",
    "load_transcripts": "analysis.export.transcripts",
    "write_inspect_logs": "analysis.export.inspect_logs",
    "render_page": "analysis.export.pages",
    "write_transcript_pages": "analysis.export.pages",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
