"""branchpoint's base layer: what every other package shares, importing none of them.

errors (``UserError``), the store's records and the store, schema migrations, YAML reading with
positions, sandboxed templates, redaction of secrets, the one policy for showing untrusted text, and the domain words every layer shares (the
events, the profile choice keys, the verdict scales). Names are imported lazily so that
``import core`` (and ``branchpoint --help``) stays fast.

    from core import open_store, Conversation
    with open_store("branchpoint.db").session() as s: ...
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.lazy import lazy_getattr

_EXPORTS = {
    "UserError": "core.errors",
    "SCHEMA_VERSION": "core.records",
    "Run": "core.records",
    "Conversation": "core.records",
    "Turn": "core.records",
    "ModelCall": "core.records",
    "CacheEntry": "core.records",
    "call_messages": "core.call_requests",
    "Judgment": "core.records",
    "HumanLabel": "core.records",
    "utcnow": "core.records",
    "Store": "core.store",
    "StoreError": "core.errors",
    "open_store": "core.store",
    "resolve_url": "core.store",
    "redact_url": "core.store",
    "redact": "core.redaction",
    "redact_text": "core.redaction",
    "LoadError": "core.yamlio",
    "read_yaml": "core.yamlio",
    "load_model": "core.yamlio",
    "render": "core.templates",
    "html_template": "core.templates",
    "markdown_template": "core.templates",
    "TemplateRenderError": "core.templates",
    "EVENTS": "core.domain",
    "EventKind": "core.domain",
    "PROFILE_PREFIX": "core.domain",
    "EXPLICIT_CUE": "core.domain",
    "profile_key": "core.domain",
    "is_branch_key": "core.domain",
    "SCALES": "core.scales",
    "ScaleDef": "core.scales",
    "ERROR": "core.scales",
    "visible": "core.untrusted",
    "markdown": "core.untrusted",
    "JudgmentSummaries": "core.judgment_summaries",
    "read_summaries": "core.judgment_summaries",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)


if TYPE_CHECKING:  # for type checkers and editors
    from core.domain import (
        EVENTS,
        EXPLICIT_CUE,
        PROFILE_PREFIX,
        EventKind,
        is_branch_key,
        profile_key,
    )
    from core.errors import StoreError, UserError
    from core.judgment_summaries import JudgmentSummaries, read_summaries
    from core.records import (
        SCHEMA_VERSION,
        CacheEntry,
        Conversation,
        HumanLabel,
        Judgment,
        ModelCall,
        Run,
        Turn,
        utcnow,
    )
    from core.redaction import redact, redact_text
    from core.scales import ERROR, SCALES, ScaleDef
    from core.store import Store, open_store, redact_url, resolve_url
    from core.templates import TemplateRenderError, html_template, markdown_template, render
    from core.untrusted import markdown, visible
    from core.yamlio import LoadError, load_model, read_yaml
