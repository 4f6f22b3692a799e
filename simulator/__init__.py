"""branchpoint's engine: the model gateway, providers, the conversation graph and the store.

Names are imported lazily so that ``import simulator`` (and ``branchpoint --help``) stays fast.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "Gateway": "simulator.gateway",
    "ProviderLimits": "simulator.limits",
    "Completion": "simulator.completion",
    "Message": "simulator.completion",
    "GenParams": "simulator.completion",
    "ModelError": "simulator.completion",
    "ScriptedModel": "simulator.providers.scripted",
    "parse_spec": "simulator.specs",
    "params_from": "simulator.specs",
    "redact": "core.redaction",
    "UserError": "core.errors",
    # the engine: running scenarios into the store, and its parts
    "run_scenarios": "simulator.runner",
    "run": "simulator.runner",
    "run_scenario": "simulator.runner",
    "RunConfig": "simulator.runner",
    "RunResult": "simulator.runner",
    "ConversationSummary": "simulator.runner",
    "PersonaSimulator": "simulator.persona",
    "RuleDetector": "simulator.events",
    "LLMDetector": "simulator.events",
    "Detection": "simulator.events",
    "conversation_graph": "simulator.graph",
    "render_conversation": "simulator.transcript",
    "load_conversation": "simulator.transcript",
    "open_store": "core.store",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'simulator' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
