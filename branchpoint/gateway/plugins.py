"""A lab's own models, for every command that calls a model: the modules that installed packages
name in the ``branchpoint.providers`` entry-point group, and those named in $BRANCHPOINT_PLUGINS,
add providers (``PROVIDER``) or register model objects on a gateway (``register(gateway)``). Here, below the engine and the judges, so that ``run``, ``sweep`` and
``judge`` load them the same way."""

from __future__ import annotations

from typing import TYPE_CHECKING

from branchpoint.core.errors import UserError
from branchpoint.gateway.providers.base import ProviderKind
from branchpoint.gateway.providers.registry import ENTRY_POINT_GROUP, PLUGINS_ENV
from branchpoint.gateway.providers.registry import load_plugins as import_plugins

if TYPE_CHECKING:
    from branchpoint.gateway.gateway import Gateway


def load_plugins(gateway: Gateway) -> list[str]:
    """Plugin modules (entry points in ``branchpoint.providers``, and those named in
    $BRANCHPOINT_PLUGINS, comma-separated) add models to this gateway.

    A module declares ``PROVIDER = ProviderKind(...)`` (a prefix of its own, registered like the
    built-in providers), or has ``register(gateway)`` that registers model objects by spec, or
    both. This is how a subprocess run (tests, a lab's own in-house models) gets providers that
    are not built in.
    """
    names = []
    for module in import_plugins():
        register = getattr(module, "register", None)
        if callable(register):
            register(gateway)
        elif not isinstance(getattr(module, "PROVIDER", None), ProviderKind):
            raise UserError(
                f"${PLUGINS_ENV} or entry point group {ENTRY_POINT_GROUP}: module "
                f"{module.__name__!r} has no register(gateway) function and declares no PROVIDER"
            )
        names.append(module.__name__)
    return names
