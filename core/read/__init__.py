"""The one way to read the store: queries built with SQLAlchemy from ``core.records``.

Judges, analysis, the command line and the terminal UI read through these functions; only the
runner, the judges and the label editor write, and they write records directly. Every query runs
on SQLite and PostgreSQL. Bulk reads return DataFrames (SQLite files are read through a read-only
``sqlite3`` connection, so pandas gets raw values at millions of rows); reads of a few records
return the records. ``fast`` holds the SQLite-only path for counting 15 million judgments.

    from core.read import judgment_rows, find_conversation, conversation_turns
    frame = judgment_rows("results.db", ["run-1"], rubric="teen")

Names are imported lazily, like ``core``'s, so that importing the package loads no pandas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

# One entry per public name: "name": "core.read.<module>". Add yours under your module's line.
from core.lazy import lazy_getattr

_EXPORTS = {
    # source: where a read goes
    "StoreRef": "core.read.source",
    "sqlite_path": "core.read.source",
    "read_frame": "core.read.source",
    # runs
    "run_table": "core.read.runs",
    "find_run": "core.read.runs",
    "run_conversations": "core.read.runs",
    "run_config_hashes": "core.read.runs",
    # conversations
    "conversation_rows": "core.read.conversations",
    "existing_conversations": "core.read.conversations",
    "select_conversations": "core.read.conversations",
    "find_conversation": "core.read.conversations",
    "conversation_provenance": "core.read.conversations",
    "conversation_tree": "core.read.conversations",
    "retried_conversations": "core.read.conversations",
    # turns
    "turn_rows": "core.read.turns",
    "conversation_turns": "core.read.turns",
    "turns_by_conversation": "core.read.turns",
    "stored_turn_count": "core.read.turns",
    "original_replies": "core.read.turns",
    "turn_roles": "core.read.turns",
    # realisation: which branch options happened, derived from the persona turns
    "realisation_rows": "core.read.realisation",
    "realised_branches": "core.read.realisation",
    # persona flags: not-enacted and low-realism persona turns, for the TUI and the run summary
    "LOW_REALISM": "core.read.persona_flags",
    "TurnFlags": "core.read.persona_flags",
    "PersonaFlagCounts": "core.read.persona_flags",
    "turn_flags": "core.read.persona_flags",
    "persona_flag_counts": "core.read.persona_flags",
    "not_enacted_conversations": "core.read.persona_flags",
    "low_realism_conversations": "core.read.persona_flags",
    # judgments
    "judgment_rows": "core.read.judgments",
    "iter_judgment_rows": "core.read.judgments",
    "criterion_counts": "core.read.judgments",
    "turn_failures": "core.read.judgments",
    "failing_examples": "core.read.judgments",
    "JudgedUnit": "core.read.judgments",
    "judged_units": "core.read.judgments",
    "unit_judgments": "core.read.judgments",
    "judgment_versions": "core.read.judgments",
    # human labels
    "human_label_rows": "core.read.labels",
    "design_label_rows": "core.read.labels",
    "label_design_rows": "core.read.labels",
    "label_design_item_rows": "core.read.labels",
    "judged_items": "core.read.labels",
    # model calls
    "model_call_count": "core.read.calls",
    "cached_call_counts": "core.read.calls",
    "calls_text": "core.read.calls",
    "run_costs": "core.read.costs",
    "run_reserved": "core.read.costs",
    "reserved_by_target": "core.read.costs",
    # browse: the terminal UI's pages, transcripts, failure jumps, tree arms and live progress
    "ConversationFilter": "core.read.browse",
    "conversations_page": "core.read.browse",
    "list_runs": "core.read.browse",
    "get_transcript": "core.read.browse",
    "find_failure": "core.read.browse",
    "tree_arms": "core.read.browse",
    "shared_prefix": "core.read.browse",
    "run_progress": "core.read.browse",
    # exports: every column an outside analyst needs, a batch of conversations at a time
    "conversation_export_rows": "core.read.exports",
    "turn_export_rows": "core.read.exports",
    "judgment_export_rows": "core.read.exports",
    "system_prompts": "core.read.exports",
    # fast: the SQLite path for counting millions of judgments
    "sqlite_criterion_counts": "core.read.fast",
    "sqlite_judgment_codes": "core.read.fast",
    "JudgmentCodes": "core.read.fast",
    "verdict_masks": "core.read.fast",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)


if TYPE_CHECKING:  # for type checkers and editors
    from core.read.browse import (
        ConversationFilter,
        conversations_page,
        find_failure,
        get_transcript,
        list_runs,
        run_progress,
        shared_prefix,
        tree_arms,
    )
    from core.read.calls import cached_call_counts, calls_text, model_call_count
    from core.read.conversations import (
        conversation_rows,
        find_conversation,
        retried_conversations,
        select_conversations,
    )
    from core.read.costs import reserved_by_target, run_costs, run_reserved
    from core.read.exports import (
        conversation_export_rows,
        judgment_export_rows,
        system_prompts,
        turn_export_rows,
    )
    from core.read.fast import (
        JudgmentCodes,
        sqlite_criterion_counts,
        sqlite_judgment_codes,
        verdict_masks,
    )
    from core.read.judgments import (
        JudgedUnit,
        criterion_counts,
        failing_examples,
        iter_judgment_rows,
        judged_units,
        judgment_rows,
        turn_failures,
        unit_judgments,
    )
    from core.read.labels import (
        design_label_rows,
        human_label_rows,
        judged_items,
        label_design_item_rows,
        label_design_rows,
    )
    from core.read.persona_flags import (
        LOW_REALISM,
        PersonaFlagCounts,
        TurnFlags,
        low_realism_conversations,
        not_enacted_conversations,
        persona_flag_counts,
        turn_flags,
    )
    from core.read.realisation import realisation_rows, realised_branches
    from core.read.runs import find_run, run_config_hashes, run_conversations, run_table
    from core.read.source import StoreRef, read_frame, sqlite_path
    from core.read.turns import (
        conversation_turns,
        original_replies,
        stored_turn_count,
        turn_roles,
        turn_rows,
        turns_by_conversation,
    )
