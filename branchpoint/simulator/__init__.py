"""branchpoint's engine: the persona simulator, event detection, the conversation graph and tree,
and the runner (plan -> execute -> finalise). Model access is the ``gateway`` package below it.

Names are imported lazily so that ``import simulator`` (and ``branchpoint --help``) stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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


if TYPE_CHECKING:  # for type checkers and editors: the names the lazy map serves
    from branchpoint.core.errors import UserError
    from branchpoint.core.redaction import redact
    from branchpoint.core.store import open_store
    from branchpoint.simulator.events import Detection, LLMDetector, RuleDetector
    from branchpoint.simulator.execute import execute
    from branchpoint.simulator.graph import conversation_graph
    from branchpoint.simulator.lifecycle import ConversationSummary, RunResult, mark_interrupted
    from branchpoint.simulator.persona import PersonaSimulator
    from branchpoint.simulator.plan import RunPlan, TreeSpec, plan_run
    from branchpoint.simulator.provenance import config_hash, record_provenance
    from branchpoint.simulator.run_config import RunConfig
    from branchpoint.simulator.runner import run, run_scenario, run_scenarios
    from branchpoint.simulator.transcript import load_conversation, render_conversation
