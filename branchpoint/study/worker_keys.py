"""API keys on a Ray worker: read where the operator put them on the worker's own node.

The driver sends a worker only the NAMES of the keys its calls need (``worker_key_needs``: each
``key_env`` with the manifest role that names it); the worker resolves them itself
(``resolve_keys``): from its own environment first, else from the manifest's
``execution.secrets_file`` as that path reads on its node, a ``NAME=value`` file open to its
owner only (refused otherwise, as ssh refuses such a private key). A key never travels through
Ray: not in the runtime environment (Ray's runtime-env agent writes it into its log on every
node), not as an argument of a remote call (serialized into Ray's object store, which spills to
the session folder), not in the plan or the store.

A key that is nowhere fails the worker with one line per key naming the ``key_env``, the role,
the node and where it looked; no line ever shows a value, nor a line of the secrets file.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from branchpoint.core.errors import UserError

if TYPE_CHECKING:
    from branchpoint.study.manifest import Manifest

# (the key_env NAME, the role that names it: "targets[0]")
KeyNeed = tuple[str, str]

# The roles whose calls a worker makes (judges run in the driver, with the driver's keys).
WORKER_ROLES = ("targets", "simulators", "detector")

_LINE = re.compile(r"^(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$")


def worker_key_needs(manifest: Manifest) -> list[KeyNeed]:
    """Every key a worker's calls need, with the role naming it, in manifest order: the roles'
    one listing (``role_key_envs``), kept to ``WORKER_ROLES``."""
    from branchpoint.study.manifest import role_key_envs

    return [(k.env, k.role) for k in role_key_envs(manifest) if k.role.startswith(WORKER_ROLES)]


def resolve_keys(
    needs: list[KeyNeed],
    secrets_file: str | None,
    node: str,
    environ: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Each needed key's value by its name: ``environ`` (the process environment) first, else
    ``secrets_file``, read only when some key is not in the environment. UserError: every key
    found nowhere, one line each, or the secrets file's one problem."""
    env = os.environ if environ is None else environ
    keys = {name: env[name] for name, _ in needs if env.get(name)}
    missing = [(name, role) for name, role in needs if name not in keys]
    if not missing:
        return keys
    looked = "the worker's environment"
    if secrets_file is not None:
        path = Path(secrets_file).expanduser()
        filed = read_secrets_file(path, node)
        keys.update({name: filed[name] for name, _ in missing if filed.get(name)})
        looked += f" and {path}"
    else:
        looked += "; no execution.secrets_file is set"
    problems = list(
        dict.fromkeys(
            f"{role}.key_env: ${name} is not set on Ray node {node} (looked in {looked}; "
            "expected the key there)"
            for name, role in missing
            if name not in keys
        )
    )
    if problems:
        raise UserError("\n".join(problems))
    return keys


def read_secrets_file(path: Path, node: str) -> dict[str, str]:
    """The ``NAME=value`` lines of ``path`` (``#`` comments, blank lines and ``export`` allowed,
    quotes around a value stripped). UserError when it is missing, open to group or others, or
    has a line of another form (its number, never its text: it may hold a key)."""
    where = f"execution.secrets_file: {path} on Ray node {node}"
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise UserError(f"{where}: not a regular file (expected a NAME=value file)")
        if info.st_mode & 0o077:
            raise UserError(
                f"{where}: open to group or others (mode {stat.S_IMODE(info.st_mode):04o}; "
                f"expected chmod 600 {path}, readable by its owner only)"
            )
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(f"{where}: no such file (expected the keys the workers need)") from None
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise UserError(f"{where}: cannot be read ({why})") from None
    values: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _LINE.match(stripped)
        if match is None:
            raise UserError(f"{where}: line {number}: expected NAME=value")
        value = match.group(2).strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        values[match.group(1)] = value
    return values


def this_node() -> str:
    """This worker's node as a person finds it: host name and the address Ray knows it by."""
    import socket

    import ray

    return f"{socket.gethostname()} ({ray.util.get_node_ip_address()})"
