"""What a sweep is: its resolved manifest, hash, versions and revision, and which changes keep it.

The identity record is stored as the sweep's Run config. A re-run of a manifest is checked
against it (``check_compatible``): adding targets, conditions or replicates only adds cells, as
do changes that decide nothing about a conversation (judges, budget, execution, limits, prices,
the store); anything else would make stored cells disagree with the manifest and is refused,
naming the field.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from branchpoint.core.errors import UserError
from branchpoint.simulator.provenance import code_provenance
from branchpoint.study.manifest import Manifest

# Top-level fields whose change would alter the conversations of existing cells.
CELL_FIELDS = (
    "scenarios",
    "simulator_params",
    "seed",
    "max_exchanges",
    "fork",
    "realism_min",
    "persona",
)
TARGET_CELL_FIELDS = ("params", "key_env")
# Model roles whose entries decide cells by ``ROLE_CELL_FIELDS`` (their price and limits do not).
ROLE_FIELDS = ("simulators", "detector")
ROLE_CELL_FIELDS = ("spec", *TARGET_CELL_FIELDS)


def resolved_manifest(manifest: Manifest) -> dict[str, Any]:
    """The manifest with every default filled in, secrets redacted (key_env is only a name)."""
    from branchpoint.core.redaction import redact

    data: dict[str, Any] = redact(manifest.model_dump(mode="json"))
    if data.get("realism_min") is None:  # off: the hash of every manifest before the gate existed
        data.pop("realism_min", None)
    if data.get("persona") is None:  # each scenario's mode: the hash of manifests before modes
        data.pop("persona", None)
    if data["execution"].get("secrets_file") is None:  # likewise before the secrets file
        data["execution"].pop("secrets_file", None)
    if data.get("analysis") is None:  # likewise before the analysis block (issue 46)
        data.pop("analysis", None)
    return data


def manifest_hash(manifest: Manifest) -> str:
    text = json.dumps(resolved_manifest(manifest), sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def identity_record(
    manifest: Manifest, path: str | Path, scenario_hashes: dict[str, str]
) -> dict[str, Any]:
    """What the sweep's Run row stores as its config."""
    return {
        "manifest": resolved_manifest(manifest),
        "scenario_hashes": scenario_hashes,
        "manifest_hash": manifest_hash(manifest),
        "manifest_path": str(path),
        **code_provenance(),
    }


def check_compatible(
    stored: dict[str, Any],
    manifest: Manifest,
    sweep_id: str,
    path: str,
    scenario_hashes: dict[str, str],
    *,
    add_cells: bool = False,
) -> None:
    """Refuse (UserError, one line naming the field) a manifest that would alter stored cells.

    ``scenario_hashes`` (scenario id -> content hash, as planned now) catches a scenario file
    edited since the sweep began (its variants would be new cells, its old ones orphaned), one
    removed from the folders or globs the manifest names (its conversations would stay in the
    store while the plan forgot them) and one added there (its cells would join the sweep without
    a word): an added one is taken only with ``add_cells`` (``--add-cells``)."""
    old = stored.get("manifest")
    if not isinstance(old, dict):
        raise UserError(
            f"{path}: run {sweep_id} exists and is not a sweep (expected a new name, or --new-sweep)"
        )
    new = resolved_manifest(manifest)
    for name in CELL_FIELDS:
        if old.get(name) != new.get(name):
            _refuse(path, sweep_id, name, old.get(name), new.get(name))
    for name in ROLE_FIELDS:
        was, now = _cells_of(old.get(name)), _cells_of(new.get(name))
        if was != now:
            _refuse(path, sweep_id, name, was, now)
    old_targets = {t["spec"]: (i, t) for i, t in enumerate(old.get("targets") or [])}
    new_targets = {t["spec"]: (i, t) for i, t in enumerate(new.get("targets") or [])}
    for spec, (i, target) in old_targets.items():
        if spec not in new_targets:
            _refuse(path, sweep_id, f"targets[{i}]", spec, "(removed)")
        j, now = new_targets[spec]
        for name in TARGET_CELL_FIELDS:
            if target.get(name) != now.get(name):
                _refuse(path, sweep_id, f"targets[{j}].{name}", target.get(name), now.get(name))
    gone = [c for c in old.get("conditions") or [] if c not in new.get("conditions", [])]
    if gone:
        _refuse(path, sweep_id, "conditions", old.get("conditions"), new.get("conditions"))
    if int(new.get("replicates", 1)) < int(old.get("replicates", 1)):
        _refuse(path, sweep_id, "replicates", old.get("replicates"), new.get("replicates"))
    before: dict[str, str] = stored.get("scenario_hashes") or {}
    for scenario_id, was in before.items():
        now = scenario_hashes.get(scenario_id)
        if now is None:
            raise UserError(
                f"{path}: scenarios: scenario {scenario_id!r} of sweep {sweep_id} is no longer "
                "in the files the manifest names; its conversations would stay in the store "
                "while the plan forgot them (expected its file back; --new-sweep starts a new "
                "sweep)"
            )
        if now != was:
            raise UserError(
                f"{path}: scenarios: scenario {scenario_id!r} changed since sweep {sweep_id} "
                "began; that would alter its existing cells (expected the scenario as it was; "
                "--new-sweep starts a new sweep)"
            )
    added = sorted(set(scenario_hashes) - set(before))
    if added and before and not add_cells:
        shown = ", ".join(repr(a) for a in added[:3]) + (" ..." if len(added) > 3 else "")
        raise UserError(
            f"{path}: scenarios: {len(added)} scenario(s) added to the files the manifest names "
            f"since sweep {sweep_id} began ({shown}); they would add cells (expected --add-cells "
            "to add them, or --new-sweep to start a new sweep)"
        )


def _cells_of(stored: Any) -> Any:
    """What a stored role entry (or list of them) decides of a cell, in whichever form it was
    stored: a bare spec (simulators before they took prices), ``{spec, params}`` (the detector
    before), or the whole entry."""
    if isinstance(stored, list):
        return [_cells_of(e) for e in stored]
    if stored is None:
        return None
    entry = {"spec": stored} if isinstance(stored, str) else dict(stored)
    entry["params"] = entry.get("params") or {}
    return {k: entry.get(k) for k in ROLE_CELL_FIELDS}


def _refuse(path: str, sweep_id: str, field: str, was: Any, now: Any) -> None:
    def short(v: Any) -> str:
        text = json.dumps(v, sort_keys=True, default=str)
        return text if len(text) <= 60 else text[:57] + "..."

    raise UserError(
        f"{path}: {field}: changed since sweep {sweep_id} began (was {short(was)}, now "
        f"{short(now)}); that would alter its existing cells (expected only added targets, "
        "conditions or replicates; --new-sweep starts a new sweep)"
    )


def analysis_registration(
    stored: dict[str, Any] | None, manifest: Manifest, sweep_id: str, path: str,
    amend: str | None, cells_done: int = 0,
) -> dict[str, Any] | None:  # fmt: skip
    """The pre-registered analysis to store with the sweep (``branchpoint.core.analysis_plan``):
    None for a sweep not begun (its first cell registers the block as it is then); the stored
    registration when the block is unchanged; with ``amend``, the new block and a dated
    deviation (a block added to a sweep that had none: registered now, after ``cells_done``
    cells had run). An edit without ``amend`` is refused, naming the registration."""
    from branchpoint.core.analysis_plan import amended, block_hash, registration

    block = resolved_manifest(manifest).get("analysis")
    if stored is None:
        if amend is not None:
            raise UserError(
                f"{path}: --amend: sweep {sweep_id} has not begun; its analysis block is "
                "registered as it is when the first cell runs (expected no --amend)"
            )
        return None
    # A sweep begun before the block existed registered none (at its start).
    old = stored.get("analysis_plan") or {**registration(None), "registered_at": "sweep start"}
    if old.get("hash") == block_hash(block):
        if amend is not None:
            raise UserError(
                f"{path}: --amend: the analysis block is as registered for sweep {sweep_id}; "
                "nothing to amend (expected an edited block)"
            )
        return old
    if amend is None or not amend.strip():
        was = "no analysis block" if old.get("block") is None else "an analysis block"
        raise UserError(
            f"{path}: analysis: changed since sweep {sweep_id} registered {was} "
            f"({old.get('registered_at')}); a pre-registered analysis is changed only with "
            '--amend "reason", which records a dated deviation the report lists'
        )
    return amended(old, block, amend.strip(), cells_done)
