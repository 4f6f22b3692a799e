"""Model providers behind the gateway, one module per spec prefix, found through ``registry``.

A provider module declares ``PROVIDER = ProviderKind(...)``; each imports its library lazily.
"""

from __future__ import annotations

from core.lazy import lazy_getattr

_EXPORTS = {
    "Provider": "gateway.providers.base",
    "ProviderKind": "gateway.providers.base",
    "register_provider": "gateway.providers.registry",
    "provider_kind": "gateway.providers.registry",
    "prefixes": "gateway.providers.registry",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
