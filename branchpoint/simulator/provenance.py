"""Provenance of a run's conversations: the texts that shaped them, stored once by hash.

Before a run grows its trees, ``record_provenance`` writes one ``ConversationProvenance`` row per
planned conversation (system prompt, persona template, event rules, detector, resolved config)
and each text once into ``prompt_texts``. Two conversations whose numbers differ can then be told
apart by what produced them, not only by their scenario and model specs. ``code_provenance`` is the
code that produced them (package versions, git revision), which each run stores with its config.
"""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import insert, select

from branchpoint.core.prompt_texts import put_text
from branchpoint.core.records import ConversationProvenance, utcnow

if TYPE_CHECKING:
    from branchpoint.core.store import Store
    from branchpoint.simulator.plan import RunPlan
    from branchpoint.simulator.run_config import RunConfig

# The packages whose versions a run records with its config (``code_provenance``).
PACKAGES = ("branchpoint", "litellm", "pydantic", "langgraph", "transformers", "torch")

# Config fields that change where or how fast a run goes, never what it produces.
NOT_RESOLVED = ("resume", "db", "run_id", "concurrency", "processes")


def resolved_config(config: RunConfig) -> dict[str, Any]:
    """The config as it decides the run's output: defaults filled in, secrets redacted."""
    from branchpoint.core.redaction import redact

    data = config.model_dump()
    for key in NOT_RESOLVED:
        data.pop(key, None)
    if data.get("realism_min") is None:  # off: the hash of every run made before the gate existed
        data.pop("realism_min", None)
    if data.get("persona_mode") is None:  # as each scenario says: the hash of runs before modes
        data.pop("persona_mode", None)
    return redact(data)


def config_hash(config: RunConfig) -> str:
    text = json.dumps(resolved_config(config), sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def persona_template_text() -> str:
    from branchpoint.simulator.persona import PROMPTS

    return (PROMPTS / "persona.j2").read_text(encoding="utf-8")


def event_rules_text(patterns: dict[str, list[str]] | None, detector: str | None = None) -> str:
    """The rules events are detected by: the default patterns with the run's own laid over them,
    and the detector model's instructions when a model detects (the patterns are its fallback)."""
    from branchpoint.simulator.events import DETECTOR_PROMPT, RuleDetector

    rules = {e: [p.pattern for p in ps] for e, ps in RuleDetector(patterns).patterns.items()}
    record: dict[str, Any] = {"patterns": rules}
    if detector:
        record["detector_prompt"] = DETECTOR_PROMPT
    return json.dumps(record, sort_keys=True)


def record_provenance(store: Store, plan: RunPlan, config: RunConfig) -> int:
    """One row per planned conversation that has none yet (a resume keeps the first); returns
    how many were written."""
    from branchpoint.gateway.gateway import stored_params

    chash = config_hash(config)
    table = ConversationProvenance.__table__  # type: ignore[attr-defined]
    with store.session() as s:
        persona_hash = put_text(s, "persona_template", persona_template_text())
        rules_hash = put_text(
            s, "event_rules", event_rules_text(plan.event_patterns, plan.detector)
        )
        prompts: dict[str, str | None] = {}
        ids = [arm.conversation_id for tree in plan.trees for arm in tree.arms]
        # one query for the rows a resume already has, one insert for the rest: a row at a
        # time (an identity-map look-up and an ORM object each) cost seconds on a big sweep
        column = table.c.conversation_id
        have: set[str] = set()
        for i in range(0, len(ids), 500):
            have.update(s.execute(select(column).where(column.in_(ids[i : i + 500]))).scalars())
        detector_params = stored_params(plan.detector_params) if plan.detector else {}
        now = utcnow()
        rows: list[dict[str, Any]] = []
        for tree in plan.trees:
            if tree.condition not in prompts:
                prompts[tree.condition] = (
                    put_text(s, "system_prompt", tree.system_prompt) if tree.system_prompt else None
                )
            for arm in tree.arms:
                if arm.conversation_id in have:
                    continue
                have.add(arm.conversation_id)
                rows.append(
                    dict(
                        conversation_id=arm.conversation_id,
                        run_id=plan.run_id,
                        system_prompt_hash=prompts[tree.condition],
                        persona_template_hash=persona_hash,
                        event_rules_hash=rules_hash,
                        detector=plan.detector or "rules",
                        detector_params=detector_params,
                        config_hash=chash,
                        created_at=now,
                    )
                )
        if rows:
            s.execute(insert(table), rows)
        written = len(rows)
        s.commit()
    return written


def package_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            continue
    return out


def git_revision(where: Path) -> str | None:
    """The checkout's commit (with ``-dirty`` for uncommitted changes), None outside git."""
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, timeout=10
        )
        if rev.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=where,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return rev.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def code_provenance() -> dict[str, Any]:
    """What code made a run: package versions and this checkout's git revision (None outside
    git), stored with the run's config and shown by ``branchpoint show``."""
    return {
        "versions": package_versions(),
        "git_revision": git_revision(Path(__file__).resolve().parent),
    }
