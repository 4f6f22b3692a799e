"""branchpoint's engine: the model gateway, providers, the conversation graph and the store.

Names are imported lazily so that ``import simulator`` (and ``branchpoint --help``) stays fast.
"""

from __future__ import annotations

from core.lazy import lazy_getattr

_EXPORTS = {
    "Gateway": "simulator.gateway",
    "ProviderLimits": "simulator.limits",
    "LimitsFile": "simulator.limits",
    "load_limits": "simulator.limits",
    "CallLayout": "simulator.call_layout",
    "TurnsRef": "simulator.call_layout",
    "Completion": "simulator.completion",
    "Message": "simulator.completion",
    "GenParams": "simulator.completion",
    "ModelError": "simulator.completion",
    # structured output on any OpenAI-compatible server, and reading JSON out of model text
    "extract_json": "simulator.structured",
    "ScriptedModel": "simulator.providers.scripted",
    "parse_spec": "simulator.specs",
    "params_from": "simulator.specs",
    "redact": "core.redaction",
    "UserError": "core.errors",
    # the engine: running scenarios into the store, and its parts
    "run_scenarios": "simulator.runner",
    "run": "simulator.runner",
    "run_scenario": "simulator.runner",
    "RunConfig": "simulator.run_config",
    "RunResult": "simulator.lifecycle",
    "ConversationSummary": "simulator.lifecycle",
    # its stages: plan (plain, picklable data), execute (grow trees into a store), finalise
    "plan_run": "simulator.plan",
    "RunPlan": "simulator.plan",
    "TreeSpec": "simulator.plan",
    "execute": "simulator.execute",
    "mark_interrupted": "simulator.lifecycle",
    "record_provenance": "simulator.provenance",
    "config_hash": "simulator.provenance",
    "split_reasoning": "simulator.thinking",
    # providers: one module per spec prefix, each declaring a ProviderKind
    "ProviderKind": "simulator.providers.base",
    "register_provider": "simulator.providers.registry",
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

__getattr__ = lazy_getattr(__name__, _EXPORTS)
