"""Model providers behind the gateway, one module per spec prefix, found through ``registry``.

A provider module declares ``PROVIDER = ProviderKind(...)``; each imports its library lazily.
"""

from __future__ import annotations

from branchpoint.core.lazy import lazy_getattr

_EXPORTS = {
    "Provider": "branchpoint.gateway.providers.base",
    "ProviderKind": "branchpoint.gateway.providers.base",
    "register_provider": "branchpoint.gateway.providers.registry",
    "provider_kind": "branchpoint.gateway.providers.registry",
    "prefixes": "branchpoint.gateway.providers.registry",
}

__all__ = sorted(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
