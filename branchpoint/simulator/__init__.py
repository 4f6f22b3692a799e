"""branchpoint's engine: the persona simulator, event detection, the conversation graph and tree,
and the runner (plan -> execute -> finalise). Model access is the ``gateway`` package below it.

Names are imported lazily so that ``import simulator`` (and ``branchpoint --help``) stays fast.
"""

from __future__ import annotations

from branchpoint.core.lazy import lazy_getattr

_EXPORTS = {
    "redact": "branchpoint.core.redaction",
    "UserError": "branchpoint.core.errors",
    # the engine: running scenarios into the store, and its parts
    "run_scenarios": "branchpoint.simulator.runner",
    "run": "branchpoint.simulator.runner",
    "run_scenario": "branchpoint.simulator.runner",
    "RunConfig": "branchpoint.simulator.run_config",
    "RunResult": "branchpoint.simulator.lifecycle",
    "ConversationSummary": "branchpoint.simulator.lifecycle",
    # its stages: plan (plain, picklable data), execute (grow trees into a store), finalise
    "plan_run": "branchpoint.simulator.plan",
    "RunPlan": "branchpoint.simulator.plan",
    "TreeSpec": "branchpoint.simulator.plan",
    "execute": "branchpoint.simulator.execute",
    "mark_interrupted": "branchpoint.simulator.lifecycle",
    "record_provenance": "branchpoint.simulator.provenance",
    "config_hash": "branchpoint.simulator.provenance",
    "PersonaSimulator": "branchpoint.simulator.persona",
    "RuleDetector": "branchpoint.simulator.events",
    "LLMDetector": "branchpoint.simulator.events",
    "Detection": "branchpoint.simulator.events",
    "conversation_graph": "branchpoint.simulator.graph",
    "render_conversation": "branchpoint.simulator.transcript",
    "load_conversation": "branchpoint.simulator.transcript",
    "open_store": "branchpoint.core.store",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
