"""Which provider serves which spec prefix: one table, filled from the providers' own declarations.

A provider module declares ``PROVIDER = ProviderKind(...)`` (``providers/base.py``): its prefix,
how its specs are written, its default concurrency, its limit key and how to make it. The built-in
modules are listed here by import path only and imported when a spec of theirs is first parsed,
so naming them costs nothing and torch, transformers or litellm load only when a model is used.

Plugins declare ``PROVIDER`` the same way, and are found two ways, both imported when a prefix is
not among the known ones, or by ``load_plugins``:

* an installed distribution's entry points in the group ``branchpoint.providers`` (the
  ecosystem's convention: ``pip install`` a lab's package and its prefix works), each naming a
  module that declares ``PROVIDER`` (and/or ``register(gateway)``) or a ``ProviderKind`` itself::

      [project.entry-points."branchpoint.providers"]
      lab = "lab_models.branchpoint"              # a module with PROVIDER
      lab2 = "lab_models.other:KIND"              # or the ProviderKind; its name is its prefix

* the modules named in $BRANCHPOINT_PLUGINS (comma-separated), for code that is not installed.

A program can also call ``register_provider`` itself.
"""

from __future__ import annotations

import functools
import importlib
import os
from types import ModuleType
from typing import TYPE_CHECKING

from branchpoint.core.errors import UserError
from branchpoint.gateway.providers.base import ProviderKind

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

PLUGINS_ENV = "BRANCHPOINT_PLUGINS"
ENTRY_POINT_GROUP = "branchpoint.providers"

# prefix -> the module that declares it; the order is the order error messages list them in.
BUILTIN: dict[str, str] = {
    "embedded": "branchpoint.gateway.providers.embedded",
    "hf": "branchpoint.gateway.providers.hf",
    "litellm": "branchpoint.gateway.providers.litellm_provider",
    "oai": "branchpoint.gateway.providers.oai",
    "scripted": "branchpoint.gateway.providers.scripted",
}

_modules: dict[str, str] = dict(BUILTIN)
_kinds: dict[str, ProviderKind] = {}


def register_provider(kind: ProviderKind, module: str | None = None) -> None:
    """Serve specs ``PREFIX:...`` by ``kind``. A prefix that another module declares is refused."""
    if not isinstance(kind, ProviderKind):
        raise UserError(f"{module or 'a plugin'}: PROVIDER must be a ProviderKind")
    if ":" in kind.prefix or not kind.prefix.strip():
        raise UserError(f"{module or kind.usage}: provider prefix {kind.prefix!r} is not a name")
    module = module or kind.create.__module__
    owner = _modules.get(kind.prefix)
    if _kinds.get(kind.prefix) is kind:
        return
    if owner is not None and owner != module:
        raise UserError(f"{module}: provider prefix {kind.prefix!r} is already declared by {owner}")
    _modules[kind.prefix] = module
    _kinds[kind.prefix] = kind


def find(prefix: str) -> ProviderKind | None:
    """The kind registered for ``prefix`` (importing its module on first use), or None."""
    kind = _kinds.get(prefix)
    if kind is not None:
        return kind
    if prefix not in _modules:
        load_plugins()
    module = _modules.get(prefix)
    if module is None:
        return None
    if prefix not in _kinds:
        _declare(importlib.import_module(module), prefix)
    return _kinds[prefix]


def provider_kind(prefix: str) -> ProviderKind:
    """Like ``find``, for a prefix that a parsed spec already holds."""
    kind = find(prefix)
    if kind is None:
        raise UserError(f"model spec prefix {prefix!r}: no provider; expected one of: {usages()}")
    return kind


def prefixes() -> list[str]:
    """Every registered prefix, plugins' included, in the order error messages list them."""
    load_plugins()
    return list(_modules)


def usages() -> str:
    """How each registered kind's specs are written, for an error message: ``embedded, hf:...``."""
    out = []
    for prefix in prefixes():
        kind = find(prefix)
        out.append(kind.usage if kind is not None else f"{prefix}:MODEL")
    return ", ".join(out)


def plugin_names() -> list[str]:
    return [n.strip() for n in os.environ.get(PLUGINS_ENV, "").split(",") if n.strip()]


@functools.cache
def plugin_entry_points() -> tuple[EntryPoint, ...]:
    """The installed distributions' entry points in ``branchpoint.providers``, by name.

    Read once a process: the scan of every installed distribution takes about 50 ms, and what is
    installed does not change while a run goes on."""
    from importlib.metadata import entry_points  # here: importing the registry stays cheap

    return tuple(sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name))


def _load_entry_point(ep: EntryPoint) -> ModuleType | None:
    """Register what ``ep`` names; the module, where it is one (its ``register`` may add models
    to a gateway: ``branchpoint.gateway.plugins``)."""
    where = f"entry point {ep.name} = {ep.value!r} (group {ENTRY_POINT_GROUP})"
    try:
        loaded = ep.load()
    except Exception as exc:  # an installed plugin that is broken: one line, naming it
        raise UserError(f"{where}: cannot load it: {type(exc).__name__}: {exc}") from None
    if isinstance(loaded, ProviderKind):
        if loaded.prefix != ep.name:
            raise UserError(
                f"{where}: its ProviderKind declares prefix {loaded.prefix!r}; expected the entry "
                f"point's name, {ep.name!r}"
            )
        register_provider(loaded, module=ep.module)
        return None
    if isinstance(loaded, ModuleType):
        declared = getattr(loaded, "PROVIDER", None)
        if declared is not None:
            register_provider(declared, module=loaded.__name__)
        return loaded
    raise UserError(
        f"{where}: names a {type(loaded).__name__}; expected a module or a ProviderKind"
    )


def load_plugins() -> list[ModuleType]:
    """Load the ``branchpoint.providers`` entry points and import the modules named in
    $BRANCHPOINT_PLUGINS; register the PROVIDER each declares. Returns the plugin modules.

    Importing is cached by Python, so calling this again is cheap (and picks up a changed list).
    """
    modules = [m for m in map(_load_entry_point, plugin_entry_points()) if m is not None]
    for name in plugin_names():
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            raise UserError(f"${PLUGINS_ENV}: cannot import {name!r}: {exc}") from None
        declared = getattr(module, "PROVIDER", None)
        if declared is not None:
            register_provider(declared, module=name)
        modules.append(module)
    return modules


def _declare(module: ModuleType, prefix: str) -> None:
    kind = getattr(module, "PROVIDER", None)
    if not isinstance(kind, ProviderKind) or kind.prefix != prefix:
        raise UserError(
            f"{module.__name__}: expected PROVIDER = ProviderKind(prefix={prefix!r}, ...)"
        )
    _kinds[prefix] = kind
