"""branchpoint's engine: the persona simulator, event detection, the conversation graph and tree,
and the runner (plan -> execute -> finalise). Model access is the ``gateway`` package below it.

Names are imported lazily so that ``import simulator`` (and ``branchpoint --help``) stays fast.
"""

from __future__ import annotations

from core.lazy import lazy_getattr

_EXPORTS = {
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
