"""Matched variants: one scenario grown into arms that differ in one behaviour (or one profile).

A variant's id is a hash of the *validated* scenario content and its choices, so reordering keys,
reformatting YAML or writing a default explicitly keeps every id, and changing any text (an
instruction, the opening, a bio sentence) changes them all. Ids are what stored conversations and
resumed sweeps key on.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from branchpoint.core.domain import EXPLICIT_CUE, profile_key
from branchpoint.core.templates import render
from branchpoint.scenarios import checks
from branchpoint.scenarios.models import BranchPoint, Persona, Scenario

# Format version of the hashed content: bump it only if the canonical form itself changes.
HASH_VERSION = 1
ID_LENGTH = 16
# ``first_difference`` answer when two variants differ already in their opening (profile or cue).
OPENING = "<opening>"


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _digest(obj: Any) -> str:
    return hashlib.sha256(_canonical(obj).encode("utf-8")).hexdigest()[:ID_LENGTH]


def scenario_content(scenario: Scenario) -> dict[str, Any]:
    # Defaults are left out so that adding a new optional field to the format does not change the
    # id of every existing scenario; an explicitly written default hashes like an omitted one.
    content = scenario.model_dump(mode="json", exclude_defaults=True)
    if scenario.profile is not None:
        # Key order is ignored by the canonical JSON, but the order of profile attributes is
        # content: it is the order of the sentences in every bio.
        content["~profile_attribute_order"] = list(scenario.profile.attributes)
    return content


def scenario_hash(scenario: Scenario) -> str:
    """Short hash (16 hex) of the scenario's validated content."""
    return _digest({"v": HASH_VERSION, "scenario": scenario_content(scenario)})


class Variant(BaseModel):
    """A scenario plus one option per branch point, and the disclosed profile if any."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    scenario_id: str
    scenario_hash: str
    choices: dict[str, str] = Field(description="branch point id -> option, for every branch point")
    profile: dict[str, str] = Field(
        default_factory=dict, description="attribute -> level; empty means no profile (no bio)"
    )
    explicit_cue: bool | None = Field(
        None,
        description="Whether the bio carries the explicit vulnerability cue; None: no bio/cue.",
    )
    deviations: list[str] = Field(
        default_factory=list, description="Branch points whose option differs from the baseline."
    )

    @property
    def is_baseline(self) -> bool:
        return not self.deviations and not self.profile

    def as_choices_record(self) -> dict[str, Any]:
        """Flat record stored in ``Conversation.choices``."""
        record: dict[str, Any] = dict(self.choices)
        for attr, level in self.profile.items():
            record[profile_key(attr)] = level
        if self.explicit_cue is not None:
            record[EXPLICIT_CUE] = self.explicit_cue
        return record

    def differs_at(self, other: Variant) -> list[str]:
        """Keys of the choices record where the two variants differ."""
        mine, theirs = self.as_choices_record(), other.as_choices_record()
        keys = list(dict.fromkeys([*mine, *theirs]))
        return [k for k in keys if mine.get(k) != theirs.get(k)]

    def first_difference(self, other: Variant, scenario: Scenario) -> str | None:
        """The branch point at which the two first part ways, in trigger order.

        :data:`OPENING` if they differ already in the opening message (profile or cue); None if
        they are the same arm.
        """
        if self.profile != other.profile or self.explicit_cue != other.explicit_cue:
            return OPENING
        for bp in trigger_order(scenario):
            if self.choices.get(bp.id) != other.choices.get(bp.id):
                return bp.id
        return None

    def label(self) -> str:
        """Short human description, e.g. ``help=decline`` or ``race=asian gender=male +cue``."""
        parts = [f"{bp}={self.choices[bp]}" for bp in self.deviations]
        parts += [f"{a}={lvl}" for a, lvl in self.profile.items()]
        if self.profile and self.explicit_cue:
            parts.append("+cue")
        if not parts:
            return "baseline" if not self.profile else "profile"
        return " ".join(parts)


def trigger_order(scenario: Scenario) -> list[BranchPoint]:
    """Branch points in the order they can fire: fixed turns by turn, then event triggers."""
    fixed = [bp for bp in scenario.branch_points if bp.trigger.at_turn is not None]
    fixed.sort(key=lambda bp: bp.trigger.at_turn or 0)  # stable: ties keep declared order
    on_event = [bp for bp in scenario.branch_points if bp.trigger.at_turn is None]
    return fixed + on_event


def _branch_choices(scenario: Scenario) -> list[dict[str, str]]:
    baseline = {bp.id: bp.baseline for bp in scenario.branch_points}
    if scenario.design == "factorial":
        axes = [
            [bp.baseline, *[o for o in bp.options if o != bp.baseline]]
            for bp in scenario.branch_points
        ]
        return [
            dict(zip((bp.id for bp in scenario.branch_points), combo, strict=True))
            for combo in itertools.product(*axes)
        ]
    out = [baseline]
    for bp in scenario.branch_points:
        for option in bp.options:
            if option != bp.baseline:
                out.append({**baseline, bp.id: option})
    return out


def _profiles(scenario: Scenario) -> list[dict[str, str]]:
    """Disclosed attribute sets of the profile design (without the no-profile baseline)."""
    p = scenario.profile
    if p is None:
        return []
    attrs = list(p.attributes)
    groups = list(itertools.combinations(attrs, 2)) if p.design == "pairs" else [tuple(attrs)]
    out: list[dict[str, str]] = []
    for group in groups:
        for levels in itertools.product(*(list(p.attributes[a].levels) for a in group)):
            out.append(dict(zip(group, levels, strict=True)))
    return out


def _cue_settings(scenario: Scenario) -> list[bool | None]:
    p = scenario.profile
    if p is None or p.explicit_cue is None:
        return [None]
    return list(dict.fromkeys(p.cue_settings))


def _make(
    scenario: Scenario,
    s_hash: str,
    choices: dict[str, str],
    profile: dict[str, str],
    cue: bool | None,
) -> Variant:
    order = [bp.id for bp in trigger_order(scenario)]
    baseline = {bp.id: bp.baseline for bp in scenario.branch_points}
    deviations = [bp for bp in order if choices[bp] != baseline[bp]]
    cue = cue if profile else None  # no bio, no cue: the no-profile arm is shared by all settings
    vid = _digest(
        {
            "v": HASH_VERSION,
            "scenario": s_hash,
            "choices": choices,
            "profile": profile,
            "explicit_cue": cue,
        }
    )
    return Variant(
        id=vid,
        scenario_id=scenario.id,
        scenario_hash=s_hash,
        choices=choices,
        profile=profile,
        explicit_cue=cue,
        deviations=deviations,
    )


def expand_by_cue(scenario: Scenario) -> dict[bool | None, list[Variant]]:
    """Variants for each explicit-cue setting (key None when the scenario has no cue).

    The no-profile baseline appears under every setting, with the same id, so that each setting
    holds the full matched set (e.g. 16 bios + 1 no-bio = 17 per setting for the ED study).
    """
    s_hash = scenario_hash(scenario)
    branch = _branch_choices(scenario)
    out: dict[bool | None, list[Variant]] = {}
    p = scenario.profile
    for cue in _cue_settings(scenario):
        conditions: list[dict[str, str]] = []
        if p is None or p.include_baseline:
            conditions.append({})
        conditions += _profiles(scenario)
        out[cue] = [_make(scenario, s_hash, c, prof, cue) for prof in conditions for c in branch]
    return out


def expand(scenario: Scenario) -> list[Variant]:
    """Every distinct variant of the scenario, baseline first."""
    seen: dict[str, Variant] = {}
    for variants in expand_by_cue(scenario).values():
        for v in variants:
            seen.setdefault(v.id, v)
    return list(seen.values())


def baseline_variant(scenario: Scenario) -> Variant:
    return expand(scenario)[0]


# --------------------------------------------------------------------------------------------
# rendering the text a variant puts in front of the persona and the target


def template_context(scenario: Scenario, **extra: Any) -> dict[str, Any]:
    """What scenario templates see: the scenario's ``vars`` and ``persona`` (name, age, gender)."""
    ctx = checks.template_context(scenario)
    ctx.update(extra)
    return ctx


def render_text(scenario: Scenario, text: str, **extra: Any) -> str:
    """Render one scenario template (an instruction, a persona field) in the sandbox."""
    return render(text, **template_context(scenario, **extra))


def render_persona(scenario: Scenario) -> Persona:
    """The persona with its template fields filled in."""
    updates = {
        f: render_text(scenario, v)
        for f in ("name", "gender", "background", "voice", "context")
        if isinstance(v := getattr(scenario.persona, f), str)
    }
    return scenario.persona.model_copy(update=updates)


def render_bio(scenario: Scenario, variant: Variant) -> str | None:
    """The first-person bio of the variant's profile, or None for the no-profile arm."""
    p = scenario.profile
    if p is None or not variant.profile:
        return None
    ctx = template_context(scenario, **p.vars)
    sentences = [
        render(p.attributes[attr].levels[variant.profile[attr]], **ctx)
        for attr in p.attributes
        if attr in variant.profile
    ]
    if variant.explicit_cue and p.explicit_cue:
        sentences.append(render(p.explicit_cue, **ctx))
    return render(p.template, **{**ctx, "sentences": [s.strip() for s in sentences]}).strip()


def render_opening(scenario: Scenario, variant: Variant) -> str:
    """The persona's first message: the bio (if any), a blank line, then the opening."""
    opening = render_text(scenario, scenario.opening).strip()
    bio = render_bio(scenario, variant)
    return f"{bio}\n\n{opening}" if bio else opening
