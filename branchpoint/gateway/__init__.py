"""Model access for every layer above it: the async gateway (routing to providers, per-provider
limits, retries that honour Retry-After, the content-addressed cache, budgets, token and cost
accounting), the provider registry, structured output on any server, and the loopback
OpenAI-compatible servers that tests and benchmarks run (``branchpoint.gateway.testing``).

The engine (``simulator``) and the judges both call models through it; it knows nothing of
scenarios, conversations or rubrics. Names are imported lazily so ``import gateway`` stays fast.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

# No network at run time, from any entry point (the command line, the Python API, a notebook):
# every module that imports litellm, transformers or torch is in this package, so this runs
# before they load. litellm otherwise downloads its price map from GitHub at import (three tries,
# seconds of waits) and reports telemetry; the hub would be asked about model files that are local.
# setdefault: a lab that wants the live price map or the hub sets these itself.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("LITELLM_TELEMETRY", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from branchpoint.core.lazy import lazy_getattr

_EXPORTS = {
    "Gateway": "branchpoint.gateway.gateway",
    "ProviderLimits": "branchpoint.gateway.limits",
    "LimitsFile": "branchpoint.gateway.limits",
    "load_limits": "branchpoint.gateway.limits",
    "CallLayout": "branchpoint.gateway.call_layout",
    "TurnsRef": "branchpoint.gateway.call_layout",
    "Completion": "branchpoint.gateway.completion",
    "Message": "branchpoint.gateway.completion",
    "GenParams": "branchpoint.gateway.completion",
    "ModelError": "branchpoint.gateway.completion",
    # structured output on any OpenAI-compatible server, and reading JSON out of model text
    "extract_json": "branchpoint.gateway.structured",
    "ScriptedModel": "branchpoint.gateway.providers.scripted",
    "parse_spec": "branchpoint.gateway.specs",
    "params_from": "branchpoint.gateway.specs",
    "split_reasoning": "branchpoint.gateway.thinking",
    # providers: one module per spec prefix, each declaring a ProviderKind
    "ProviderKind": "branchpoint.gateway.providers.base",
    "register_provider": "branchpoint.gateway.providers.registry",
    "Price": "branchpoint.gateway.pricing",
    "Tokens": "branchpoint.gateway.pricing",
    "price_of": "branchpoint.gateway.pricing",
    "BATCH_FACTOR": "branchpoint.gateway.pricing",
    "batch_price_of": "branchpoint.gateway.pricing",
    # OpenAI-compatible batch APIs (/files + /batches): many calls in one job, at a lower price
    "BatchAPI": "branchpoint.gateway.batch",
    "BatchJob": "branchpoint.gateway.batch",
    "BatchResult": "branchpoint.gateway.batch",
    "BatchTarget": "branchpoint.gateway.batch",
    "batch_target": "branchpoint.gateway.batch",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)


if TYPE_CHECKING:  # for type checkers and editors: the names the lazy map serves
    from branchpoint.gateway.batch import BatchAPI, BatchJob, BatchResult, BatchTarget, batch_target
    from branchpoint.gateway.call_layout import CallLayout, TurnsRef
    from branchpoint.gateway.completion import Completion, GenParams, Message, ModelError
    from branchpoint.gateway.gateway import Gateway
    from branchpoint.gateway.limits import LimitsFile, ProviderLimits, load_limits
    from branchpoint.gateway.pricing import BATCH_FACTOR, Price, Tokens, batch_price_of, price_of
    from branchpoint.gateway.providers.base import ProviderKind
    from branchpoint.gateway.providers.registry import register_provider
    from branchpoint.gateway.providers.scripted import ScriptedModel
    from branchpoint.gateway.specs import params_from, parse_spec
    from branchpoint.gateway.structured import extract_json
    from branchpoint.gateway.thinking import split_reasoning
