"""Model providers behind the gateway, one module per spec prefix, found through ``registry``.

A provider module declares ``PROVIDER = ProviderKind(...)``; each imports its library lazily.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

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


if TYPE_CHECKING:  # for type checkers and editors: the names the lazy map serves
    from branchpoint.gateway.providers.base import Provider, ProviderKind
    from branchpoint.gateway.providers.registry import prefixes, provider_kind, register_provider
