"""Model providers behind the gateway, one module per spec prefix, found through ``registry``.

A provider module declares ``PROVIDER = ProviderKind(...)``; each imports its library lazily.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "Provider": "simulator.providers.base",
    "ProviderKind": "simulator.providers.base",
    "register_provider": "simulator.providers.registry",
    "provider_kind": "simulator.providers.registry",
    "prefixes": "simulator.providers.registry",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'simulator.providers' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
