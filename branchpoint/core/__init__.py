"""branchpoint's base layer: what every other package shares, importing none of them.

errors (``UserError``), the store's records and the store, schema migrations, YAML reading with
positions, sandboxed templates, redaction of secrets, the one policy for showing untrusted text, and the domain words every layer shares (the
events, the profile choice keys, the verdict scales). Names are imported lazily so that
``import core`` (and ``branchpoint --help``) stays fast.

    from branchpoint.core import open_store, Conversation
    with open_store("branchpoint.db").session() as s: ...
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from branchpoint.core.lazy import lazy_getattr

_EXPORTS = {
    "UserError": "branchpoint.core.errors",
    "SCHEMA_VERSION": "branchpoint.core.records",
    "Run": "branchpoint.core.records",
    "Conversation": "branchpoint.core.records",
    "Turn": "branchpoint.core.records",
    "ModelCall": "branchpoint.core.records",
    "CacheEntry": "branchpoint.core.records",
    "call_messages": "branchpoint.core.call_requests",
    "call_params": "branchpoint.core.call_requests",
    "Judgment": "branchpoint.core.records",
    "HumanLabel": "branchpoint.core.records",
    "utcnow": "branchpoint.core.records",
    "Store": "branchpoint.core.store",
    "StoreError": "branchpoint.core.errors",
    "open_store": "branchpoint.core.store",
    "resolve_url": "branchpoint.core.store",
    "redact_url": "branchpoint.core.store",
    "redact": "branchpoint.core.redaction",
    "redact_text": "branchpoint.core.redaction",
    "LoadError": "branchpoint.core.yamlio",
    "read_yaml": "branchpoint.core.yamlio",
    "load_model": "branchpoint.core.yamlio",
    "render": "branchpoint.core.templates",
    "html_template": "branchpoint.core.templates",
    "markdown_template": "branchpoint.core.templates",
    "TemplateRenderError": "branchpoint.core.templates",
    "EVENTS": "branchpoint.core.domain",
    "EventKind": "branchpoint.core.domain",
    "PROFILE_PREFIX": "branchpoint.core.domain",
    "EXPLICIT_CUE": "branchpoint.core.domain",
    "profile_key": "branchpoint.core.domain",
    "is_branch_key": "branchpoint.core.domain",
    "SCALES": "branchpoint.core.scales",
    "ScaleDef": "branchpoint.core.scales",
    "ERROR": "branchpoint.core.scales",
    "visible": "branchpoint.core.untrusted",
    "markdown": "branchpoint.core.untrusted",
    "JudgmentSummaries": "branchpoint.core.judgment_summaries",
    "read_summaries": "branchpoint.core.judgment_summaries",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)


if TYPE_CHECKING:  # for type checkers and editors
    from branchpoint.core.call_requests import call_messages, call_params
    from branchpoint.core.domain import (
        EVENTS,
        EXPLICIT_CUE,
        PROFILE_PREFIX,
        EventKind,
        is_branch_key,
        profile_key,
    )
    from branchpoint.core.errors import StoreError, UserError
    from branchpoint.core.judgment_summaries import JudgmentSummaries, read_summaries
    from branchpoint.core.records import (
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
    from branchpoint.core.redaction import redact, redact_text
    from branchpoint.core.scales import ERROR, SCALES, ScaleDef
    from branchpoint.core.store import Store, open_store, redact_url, resolve_url
    from branchpoint.core.templates import (
        TemplateRenderError,
        html_template,
        markdown_template,
        render,
    )
    from branchpoint.core.untrusted import markdown, visible
    from branchpoint.core.yamlio import LoadError, load_model, read_yaml
