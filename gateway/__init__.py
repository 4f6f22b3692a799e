"""Model access for every layer above it: the async gateway (routing to providers, per-provider
limits, retries that honour Retry-After, the content-addressed cache, budgets, token and cost
accounting), the provider registry, structured output on any server, and the loopback
OpenAI-compatible servers that tests and benchmarks run (``gateway.testing``).

The engine (``simulator``) and the judges both call models through it; it knows nothing of
scenarios, conversations or rubrics. Names are imported lazily so ``import gateway`` stays fast.
"""

from __future__ import annotations

from core.lazy import lazy_getattr

_EXPORTS = {
    "Gateway": "gateway.gateway",
    "ProviderLimits": "gateway.limits",
    "LimitsFile": "gateway.limits",
    "load_limits": "gateway.limits",
    "CallLayout": "gateway.call_layout",
    "TurnsRef": "gateway.call_layout",
    "Completion": "gateway.completion",
    "Message": "gateway.completion",
    "GenParams": "gateway.completion",
    "ModelError": "gateway.completion",
    # structured output on any OpenAI-compatible server, and reading JSON out of model text
    "extract_json": "gateway.structured",
    "ScriptedModel": "gateway.providers.scripted",
    "parse_spec": "gateway.specs",
    "params_from": "gateway.specs",
    "split_reasoning": "gateway.thinking",
    # providers: one module per spec prefix, each declaring a ProviderKind
    "ProviderKind": "gateway.providers.base",
    "register_provider": "gateway.providers.registry",
    "Price": "gateway.pricing",
    "Tokens": "gateway.pricing",
    "price_of": "gateway.pricing",
    "BATCH_FACTOR": "gateway.pricing",
    "batch_price_of": "gateway.pricing",
    # OpenAI-compatible batch APIs (/files + /batches): many calls in one job, at a lower price
    "BatchAPI": "gateway.batch",
    "BatchJob": "gateway.batch",
    "BatchResult": "gateway.batch",
    "BatchTarget": "gateway.batch",
    "batch_target": "gateway.batch",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
