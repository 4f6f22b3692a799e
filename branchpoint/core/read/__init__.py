"""The one way to read the store: queries built with SQLAlchemy from ``branchpoint.core.records``.

Judges, analysis, the command line and the terminal UI read through these functions; only the
runner, the judges and the label editor write, and they write records directly. Every query runs
on SQLite and PostgreSQL. Bulk reads return DataFrames (SQLite files are read through a read-only
``sqlite3`` connection, so pandas gets raw values at millions of rows); reads of a few records
return the records. ``fast`` holds the SQLite-only path for counting 15 million judgments.

    from branchpoint.core.read import judgment_rows, find_conversation, conversation_turns
    frame = judgment_rows("results.db", ["run-1"], rubric="teen")

Names are imported lazily, like ``core``'s, so that importing the package loads no pandas.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

# One entry per public name: "name": "branchpoint.core.read.<module>". Add yours under your module's line.
from branchpoint.core.lazy import lazy_getattr

_EXPORTS = {
    # source: where a read goes
    "StoreRef": "branchpoint.core.read.source",
    "sqlite_path": "branchpoint.core.read.source",
    "read_frame": "branchpoint.core.read.source",
    # runs
    "run_table": "branchpoint.core.read.runs",
    "find_run": "branchpoint.core.read.runs",
    "run_conversations": "branchpoint.core.read.runs",
    "run_config_hashes": "branchpoint.core.read.runs",
    "analysis_registrations": "branchpoint.core.read.runs",
    "sweep_designs": "branchpoint.core.read.runs",
    # conversations
    "conversation_rows": "branchpoint.core.read.conversations",
    "existing_conversations": "branchpoint.core.read.conversations",
    "select_conversations": "branchpoint.core.read.conversations",
    "find_conversation": "branchpoint.core.read.conversations",
    "conversation_provenance": "branchpoint.core.read.conversations",
    "conversation_tree": "branchpoint.core.read.conversations",
    "conversation_endings": "branchpoint.core.read.conversations",
    "retried_conversations": "branchpoint.core.read.conversations",
    # turns
    "turn_rows": "branchpoint.core.read.turns",
    "conversation_turns": "branchpoint.core.read.turns",
    "turns_by_conversation": "branchpoint.core.read.turns",
    "stored_turn_count": "branchpoint.core.read.turns",
    "original_replies": "branchpoint.core.read.turns",
    "turn_roles": "branchpoint.core.read.turns",
    # realisation: which branch options happened, derived from the persona turns
    "realisation_rows": "branchpoint.core.read.realisation",
    "realised_branches": "branchpoint.core.read.realisation",
    # persona flags: not-enacted and low-realism persona turns, for the TUI and the run summary
    "LOW_REALISM": "branchpoint.core.read.persona_flags",
    "TurnFlags": "branchpoint.core.read.persona_flags",
    "PersonaFlagCounts": "branchpoint.core.read.persona_flags",
    "turn_flags": "branchpoint.core.read.persona_flags",
    "persona_flag_counts": "branchpoint.core.read.persona_flags",
    "not_enacted_conversations": "branchpoint.core.read.persona_flags",
    "low_realism_conversations": "branchpoint.core.read.persona_flags",
    # judgments
    "judgment_rows": "branchpoint.core.read.judgments",
    "iter_judgment_rows": "branchpoint.core.read.judgments",
    "criterion_counts": "branchpoint.core.read.judgments",
    "turn_failures": "branchpoint.core.read.judgments",
    "failing_examples": "branchpoint.core.read.judgments",
    "JudgedUnit": "branchpoint.core.read.judgments",
    "judged_units": "branchpoint.core.read.judgments",
    "unit_judgments": "branchpoint.core.read.judgments",
    "judgment_versions": "branchpoint.core.read.judgments",
    # human labels
    "human_label_rows": "branchpoint.core.read.labels",
    "design_label_rows": "branchpoint.core.read.labels",
    "label_design_rows": "branchpoint.core.read.labels",
    "label_design_item_rows": "branchpoint.core.read.labels",
    "judged_items": "branchpoint.core.read.labels",
    # units: the unit of analysis (a judged turn counted once however many arms carry it)
    "distinct_ratings": "branchpoint.core.read.units",
    "with_tree": "branchpoint.core.read.units",
    "carriers": "branchpoint.core.read.units",
    "carrying_arms": "branchpoint.core.read.units",
    "copied_conversations": "branchpoint.core.read.units",
    # model calls
    "model_call_count": "branchpoint.core.read.calls",
    "cached_call_counts": "branchpoint.core.read.calls",
    "calls_text": "branchpoint.core.read.calls",
    "run_costs": "branchpoint.core.read.costs",
    "run_reserved": "branchpoint.core.read.costs",
    "reserved_by_target": "branchpoint.core.read.costs",
    "run_cache_shares": "branchpoint.core.read.costs",
    "call_spend": "branchpoint.core.read.costs",
    "cache_token_sums": "branchpoint.core.read.costs",
    "cache_share": "branchpoint.core.read.costs",
    # browse: the terminal UI's pages, transcripts, failure jumps, tree arms and live progress
    "ConversationFilter": "branchpoint.core.read.browse",
    "conversations_page": "branchpoint.core.read.browse",
    "list_runs": "branchpoint.core.read.browse",
    "get_transcript": "branchpoint.core.read.browse",
    "find_failure": "branchpoint.core.read.browse",
    "tree_arms": "branchpoint.core.read.browse",
    "shared_prefix": "branchpoint.core.read.browse",
    "run_progress": "branchpoint.core.read.browse",
    # exports: every column an outside analyst needs, a batch of conversations at a time
    "conversation_export_rows": "branchpoint.core.read.exports",
    "turn_export_rows": "branchpoint.core.read.exports",
    "judgment_export_rows": "branchpoint.core.read.exports",
    "system_prompts": "branchpoint.core.read.exports",
    # fast: the SQLite path for counting millions of judgments
    "sqlite_criterion_counts": "branchpoint.core.read.fast",
    "sqlite_judgment_codes": "branchpoint.core.read.fast",
    "JudgmentCodes": "branchpoint.core.read.fast",
    "verdict_masks": "branchpoint.core.read.fast",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)


if TYPE_CHECKING:  # for type checkers and editors
    from branchpoint.core.read.browse import (
        ConversationFilter,
        conversations_page,
        find_failure,
        get_transcript,
        list_runs,
        run_progress,
        shared_prefix,
        tree_arms,
    )
    from branchpoint.core.read.calls import cached_call_counts, calls_text, model_call_count
    from branchpoint.core.read.conversations import (
        conversation_endings,
        conversation_provenance,
        conversation_rows,
        conversation_tree,
        existing_conversations,
        find_conversation,
        retried_conversations,
        select_conversations,
    )
    from branchpoint.core.read.costs import (
        cache_share,
        cache_token_sums,
        call_spend,
        reserved_by_target,
        run_cache_shares,
        run_costs,
        run_reserved,
    )
    from branchpoint.core.read.exports import (
        conversation_export_rows,
        judgment_export_rows,
        system_prompts,
        turn_export_rows,
    )
    from branchpoint.core.read.fast import (
        JudgmentCodes,
        sqlite_criterion_counts,
        sqlite_judgment_codes,
        verdict_masks,
    )
    from branchpoint.core.read.judgments import (
        JudgedUnit,
        criterion_counts,
        failing_examples,
        iter_judgment_rows,
        judged_units,
        judgment_rows,
        judgment_versions,
        turn_failures,
        unit_judgments,
    )
    from branchpoint.core.read.labels import (
        design_label_rows,
        human_label_rows,
        judged_items,
        label_design_item_rows,
        label_design_rows,
    )
    from branchpoint.core.read.persona_flags import (
        LOW_REALISM,
        PersonaFlagCounts,
        TurnFlags,
        low_realism_conversations,
        not_enacted_conversations,
        persona_flag_counts,
        turn_flags,
    )
    from branchpoint.core.read.realisation import realisation_rows, realised_branches
    from branchpoint.core.read.runs import (
        analysis_registrations,
        find_run,
        run_config_hashes,
        run_conversations,
        run_table,
        sweep_designs,
    )
    from branchpoint.core.read.source import StoreRef, read_frame, sqlite_path
    from branchpoint.core.read.turns import (
        conversation_turns,
        original_replies,
        stored_turn_count,
        turn_roles,
        turn_rows,
        turns_by_conversation,
    )
    from branchpoint.core.read.units import (
        carriers,
        carrying_arms,
        copied_conversations,
        distinct_ratings,
        with_tree,
    )
