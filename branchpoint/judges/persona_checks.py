"""Rating the persona's own turns: manipulation checks and realism (issue 36).

``rate_personas`` reads stored transcripts (never regenerates them) and writes ``judgments`` rows
on persona turns, like any verdict: rubric id, rubric hash, judge, prompt version, verdict,
rationale, evidence quotes checked against the transcript, call id for a model rater.

- **enactment** (rubric ``enactment``, criterion = the branch point's id): for every branch point
  that fired on a persona turn, was the arm's option enacted there? ``enacted`` / ``partly`` /
  ``not_enacted``; the criterion of ``branchpoint/scenarios/persona_rubrics/enactment.yaml`` that decided is
  named in the rationale. A heuristic that cannot tell writes no row (unknown, never a guess).
- **realism** (rubric ``realism``, criterion ``persona_realism``, the key the TUI's human realism
  ratings use, so the two pair up for agreement): every persona turn the simulator wrote (not the
  scenario's opening) that is not a copy of a sibling arm's (a shared turn is one observation),
  on the scale very / mostly / mixed / not.

Raters: ``heuristic`` (the rubric files' offline rules) or any model spec (one call a rating, a
JSON answer validated by pydantic; an answer that does not validate after retries, or a failed
call, is stored as ``error``, never a pass). Idempotent: a turn already rated by the same rater,
rubric and version is skipped, unless its rating is ``error``: that one is rated again and the new
rating replaces it (a rater that was down must not leave a run unchecked for good).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError, WithJsonSchema

from branchpoint.core.answer_schema import answer_schema
from branchpoint.core.domain import ENACTMENT_LEVELS, ENACTMENT_RUBRIC
from branchpoint.core.human_labels import REALISM_RUBRIC, REALISM_TURN
from branchpoint.judges.evidence import verify_quotes
from branchpoint.judges.runner import ScenarioContext, _run_scenario_paths, judgment_id
from branchpoint.judges.verdicts import TranscriptTurn
from branchpoint.scenarios.persona_rubric import (
    HEURISTIC_VERSION,
    PersonaVerdict,
    enactment_rubric,
    rate_enactment,
    rate_realism,
    realism_rubric,
)

What = Literal["enactment", "realism"]
WHAT: tuple[What, ...] = ("enactment", "realism")
ERROR = "error"
TEMPLATE_PATH = Path(__file__).resolve().parent / "prompts" / "persona.j2"
_TEMPLATE_TEXT = TEMPLATE_PATH.read_text(encoding="utf-8")
PERSONA_PROMPT_VERSION = (
    "persona-1." + hashlib.sha256(_TEMPLATE_TEXT.encode("utf-8")).hexdigest()[:8]
)
_SCORES: dict[str, dict[str, float]] = {
    ENACTMENT_RUBRIC: {"enacted": 1.0, "partly": 0.5, "not_enacted": 0.0},
    REALISM_RUBRIC: {"very": 1.0, "mostly": 2 / 3, "mixed": 1 / 3, "not": 0.0},
}


@lru_cache(maxsize=1)
def _template() -> Any:
    from branchpoint.core.templates import prompt_template

    # The project's one sandbox, like the judge prompt: the transcript is model text and the
    # rubric a user file.
    return prompt_template(_TEMPLATE_TEXT)


@dataclass
class PersonaItem:
    """One persona turn to rate, with what the rater needs to know."""

    what: What
    conversation_id: str
    run_id: str
    turn_id: str
    turn_index: int
    text: str
    transcript: list[TranscriptTurn]  # up to and including the rated turn
    persona: dict[str, Any]  # name, age, background, voice (empty when the scenario is unknown)
    criterion_id: str  # the branch point (enactment) or persona_realism
    kind: str = ""  # enactment: the branch point's kind
    option: str = ""
    instruction: str = ""
    language: str = "en"  # the scenario's (BCP-47)
    # What the persona must not copy: the chatbot's replies so far, its own description and the
    # instructions in force (a copy of either is no person writing).
    sources: list[str] = field(default_factory=list)


@dataclass
class PersonaSummary:
    conversations: int = 0
    rated: int = 0  # rows written now
    skipped: int = 0  # already rated
    unknown: int = 0  # the rater could not tell: no row
    errors: int = 0
    by_verdict: dict[str, int] = field(default_factory=dict)
    scenarios_not_found: list[str] = field(default_factory=list)


class PersonaRater(Protocol):
    name: str
    version: str

    async def rate(self, item: PersonaItem) -> tuple[PersonaVerdict, str | None]:
        """The verdict (None: cannot tell) and the model call's id, if any."""
        ...


class HeuristicPersonaRater:
    """The rubric files' offline rules."""

    name = "heuristic"
    version = HEURISTIC_VERSION

    async def rate(self, item: PersonaItem) -> tuple[PersonaVerdict, str | None]:
        if item.what == "enactment":
            return rate_enactment(
                item.text, item.kind, item.option, item.instruction, language=item.language
            ), None
        return rate_realism(
            item.text,
            name=item.persona.get("name"),
            age=item.persona.get("age"),
            language=item.language,
            sources=item.sources,
        ), None


class _Answer(BaseModel):
    # Parsed leniently (extra keys ignored, rationale and evidence may be missing); the schema sent
    # (answer_schema, the serialization one) asks for all three and no other key.
    model_config = ConfigDict(
        json_schema_serialization_defaults_required=True,
        json_schema_extra={"additionalProperties": False},
    )
    verdict: str
    rationale: str = ""
    evidence: list[str] = Field(default_factory=list)


@lru_cache(maxsize=8)
def _answer_model(levels: tuple[str, ...]) -> type[_Answer]:
    """The answer for one scale: its verdict one of ``levels`` in the schema sent."""
    verdict = Annotated[str, WithJsonSchema({"type": "string", "enum": list(levels)})]
    return type(
        "Answer",
        (_Answer,),
        {"__module__": __name__, "__annotations__": {"verdict": verdict}},
    )


class LLMPersonaRater:
    """A model that rates persona turns against the same rubric files, one call a rating."""

    def __init__(
        self, spec: str, gateway: Any, params: Any | None = None, *, max_retries: int = 2
    ) -> None:
        from branchpoint.judges.llm_judge import judge_version

        self.spec = self.name = spec.strip()
        self.gateway = gateway
        self.params = params
        self.max_retries = max(0, max_retries)
        self.version = judge_version(PERSONA_PROMPT_VERSION, params)

    def messages(self, item: PersonaItem) -> list[Any]:
        from branchpoint.gateway.completion import Message

        levels = ENACTMENT_LEVELS if item.what == "enactment" else tuple(realism_rubric().levels)
        if item.what == "enactment":
            crit = enactment_rubric().criterion_for(item.kind, item.option)
            anchors, definition = crit.anchors, crit.definition
        else:
            anchors, definition = realism_rubric().anchors, realism_rubric().title
        text = _template().render(
            what=item.what,
            levels=levels,
            anchors=anchors,
            definition=definition,
            persona=item.persona,
            option=item.option,
            instruction=item.instruction,
            transcript=item.transcript,
            rated_index=item.turn_index,
        )
        system, _, user = text.partition("=====USER=====")
        return [
            Message(role="system", content=system.strip()),
            Message(role="user", content=user.strip()),
        ]

    async def rate(self, item: PersonaItem) -> tuple[PersonaVerdict, str | None]:
        from branchpoint.gateway.completion import GenParams, Message, ModelError
        from branchpoint.gateway.structured import extract_json

        levels = ENACTMENT_LEVELS if item.what == "enactment" else tuple(realism_rubric().levels)
        answer_model = _answer_model(tuple(levels))
        schema = answer_schema(answer_model)
        params = GenParams(temperature=0.0, seed=0, max_tokens=400).merged(self.params)
        params = params.model_copy(update={"json_schema": schema})
        messages = self.messages(item)
        problems: list[str] = []
        call_id: str | None = None
        for _ in range(self.max_retries + 1):
            try:
                completion, call_id = await self.gateway.complete(
                    self.spec, messages, params, purpose="judge",
                    run_id=item.run_id, conversation_id=item.conversation_id,
                )  # fmt: skip
            except ModelError as exc:
                return PersonaVerdict(
                    verdict=ERROR, rationale=f"rater call failed: {exc.reason}"
                ), call_id
            try:
                answer = answer_model.model_validate(extract_json(completion.text))
                if answer.verdict not in levels:
                    raise ValueError(
                        f"verdict {answer.verdict!r} is not one of {', '.join(levels)}"
                    )
            except (ValidationError, ValueError) as exc:
                problems.append(str(exc).splitlines()[0][:300])
                messages = [
                    *messages,
                    Message(role="assistant", content=completion.text[:4000]),
                    Message(role="user", content=f"Your reply could not be used: {problems[-1]}. Reply with only the JSON object."),
                ]  # fmt: skip
                continue
            return PersonaVerdict(
                verdict=answer.verdict, rationale=answer.rationale, quotes=answer.evidence
            ), call_id
        return PersonaVerdict(
            verdict=ERROR, rationale="invalid rater output: " + " | ".join(problems)
        ), call_id


def make_persona_rater(spec: str, gateway: Any = None, params: Any | None = None) -> PersonaRater:
    """``heuristic`` -> the offline rules; any model spec -> a model rater through ``gateway``."""
    if spec.strip() == "heuristic":
        return HeuristicPersonaRater()
    from branchpoint.gateway.specs import parse_spec

    parse_spec(spec)  # an unknown spec is a one-line UserError before anything runs
    return LLMPersonaRater(spec, gateway, params)


# ------------------------------------------------------------------------------ what to rate


def _persona(scenario: Any) -> dict[str, Any]:
    p = getattr(scenario, "persona", None)
    if p is None:
        return {}
    return {"name": p.name, "age": p.age, "background": p.background, "voice": p.voice}


def _language(scenario: Any) -> str:
    """The conversation's language: the persona's own, else the scenario's (English unknown)."""
    of = getattr(scenario, "conversation_language", None)
    return str(of() if callable(of) else "en")


def _prompt_sources(
    persona: dict[str, Any], bps: dict[str, Any], state: dict[str, Any]
) -> list[str]:
    """The persona's own description and the instructions of the options in force."""
    out = [str(persona.get(k) or "") for k in ("background", "voice", "context")]
    for bp_id, option in state.items():
        bp = bps.get(bp_id)
        opt = bp.options.get(option) if bp is not None and option is not None else None
        if opt is not None:
            out.append(opt.instruction)
    return [s for s in out if s.strip()]


def _branch_points(scenario: Any) -> dict[str, Any]:
    return {bp.id: bp for bp in (getattr(scenario, "branch_points", None) or [])}


def persona_items(
    conversations: Sequence[Any],
    transcripts: dict[str, list[Any]],
    scenarios: dict[str, Any],
    what: Sequence[What] = WHAT,
) -> list[PersonaItem]:
    """Every persona turn to rate: each fired branch point (enactment), each original persona
    turn (realism). ``scenarios``: conversation id -> its scenario (or None)."""
    items: list[PersonaItem] = []
    for conv in conversations:
        scenario = scenarios.get(conv.id)
        persona = _persona(scenario)
        bps = _branch_points(scenario)
        turns = transcripts.get(conv.id, [])
        language = _language(scenario)
        seen: list[TranscriptTurn] = []
        for t in turns:
            seen.append(
                TranscriptTurn(index=t.index, role=t.role, content=t.content or "", turn_id=t.id)
            )
            if t.role != "user" or not (t.content or "").strip():
                continue
            base = dict(
                conversation_id=conv.id, run_id=conv.run_id, turn_id=t.id, turn_index=t.index,
                text=t.content, transcript=list(seen), persona=persona,
            )  # fmt: skip
            if "enactment" in what:
                for bp_id in t.fired or []:
                    option = (t.branch_state or {}).get(bp_id) or (conv.choices or {}).get(bp_id)
                    if option is None:
                        continue
                    bp = bps.get(bp_id)
                    opt = bp.options.get(option) if bp is not None else None
                    items.append(
                        PersonaItem(
                            what="enactment",
                            criterion_id=bp_id,
                            kind=bp.kind if bp is not None else "custom",
                            option=str(option),
                            instruction=opt.instruction if opt is not None else "",
                            language=language,
                            **base,
                        )  # fmt: skip
                    )
            # The opening is the scenario's own text, not the simulator's: not its realism.
            if "realism" in what and not t.origin_turn_id and t.exchange > 1:
                sources = [s.content for s in seen if s.role == "assistant" and s.content]
                sources += _prompt_sources(persona, bps, dict(t.branch_state or {}))
                items.append(
                    PersonaItem(
                        what="realism",
                        criterion_id=REALISM_TURN,
                        language=language,
                        sources=sources,
                        **base,
                    )  # fmt: skip
                )
    return items


def _row(
    item: PersonaItem, rater: PersonaRater, v: PersonaVerdict, call_id: str | None, now: Any
) -> dict[str, Any]:
    rubric_id = ENACTMENT_RUBRIC if item.what == "enactment" else REALISM_RUBRIC
    rubric_hash = (
        enactment_rubric() if item.what == "enactment" else realism_rubric()
    ).rubric_hash()
    rationale = v.rationale
    if item.what == "enactment":
        rationale = f"option {item.option!r} ({item.kind}): {rationale}"
    return {
        "id": judgment_id(item.conversation_id, item.turn_id, rubric_hash, item.criterion_id, rater.name, rater.version),
        "run_id": item.run_id,
        "conversation_id": item.conversation_id,
        "turn_id": item.turn_id,
        "turn_index": item.turn_index,
        "rubric_id": rubric_id,
        "rubric_hash": rubric_hash,
        "criterion_id": item.criterion_id,
        "risk_area": None,
        "judge": rater.name,
        "prompt_version": rater.version,
        "applicable": True,
        "verdict": v.verdict,
        "score": _SCORES[rubric_id].get(v.verdict or ""),
        "rationale": rationale,
        "evidence": [
            e.model_dump(exclude_none=True)
            for e in verify_quotes(v.quotes, [t for t in item.transcript if t.index == item.turn_index])
        ],
        "members": [],
        "raw_output": None,
        "error": v.rationale if v.verdict == ERROR else None,
        "call_id": call_id,
        "created_at": now,
    }  # fmt: skip


# Conversations rated and stored together: memory stays bounded on a sweep of any size, every id
# list stays under the databases' limits on bound parameters, and a rating stopped halfway keeps
# what it stored (rating again skips it).
CONVERSATIONS_PER_CHUNK = 200


async def arate_personas(
    store: Any,
    rater: PersonaRater,
    *,
    run_id: str | None = None,
    conversation_ids: Sequence[str] | None = None,
    what: Sequence[What] = WHAT,
    concurrency: int = 8,
    chunk: int | None = None,
) -> PersonaSummary:
    """Rate the persona turns of ``run_id`` (or of ``conversation_ids``, or of every run),
    ``chunk`` conversations at a time (``CONVERSATIONS_PER_CHUNK``), each chunk stored before
    the next is rated."""
    from branchpoint.core.read import select_conversations

    summary = PersonaSummary()
    conversations = select_conversations(store, run_id, conversation_ids)
    summary.conversations = len(conversations)
    context = ScenarioContext()
    paths: dict[str, list[str]] = {}
    sem = asyncio.Semaphore(max(1, concurrency))
    step = max(1, chunk or CONVERSATIONS_PER_CHUNK)
    for i in range(0, len(conversations), step):
        part = conversations[i : i + step]
        scenarios = _scenarios_of(store, part, context, paths, summary)
        await _rate_chunk(store, rater, part, scenarios, what, sem, summary)
    return summary


def _scenarios_of(
    store: Any,
    conversations: Sequence[Any],
    context: ScenarioContext,
    paths: dict[str, list[str]],
    summary: PersonaSummary,
) -> dict[str, Any]:
    """conversation id -> its scenario (None when not found, named once in ``summary``)."""
    from branchpoint.core.read import find_run

    out: dict[str, Any] = {}
    for conv in conversations:
        if conv.run_id not in paths:
            run = find_run(store, conv.run_id)
            paths[conv.run_id] = _run_scenario_paths(run.config if run else {})
        out[conv.id] = context.find(
            conv.scenario_id, [conv.scenario_path or "", *paths[conv.run_id]]
        )
        if out[conv.id] is None and conv.scenario_id not in summary.scenarios_not_found:
            summary.scenarios_not_found.append(conv.scenario_id)
    return out


async def _rate_chunk(
    store: Any,
    rater: PersonaRater,
    conversations: Sequence[Any],
    scenarios: dict[str, Any],
    what: Sequence[What],
    sem: asyncio.Semaphore,
    summary: PersonaSummary,
) -> None:
    from sqlalchemy import delete, insert, select

    from branchpoint.core.read import turns_by_conversation
    from branchpoint.core.records import Judgment, utcnow

    transcripts = turns_by_conversation(store, [c.id for c in conversations])
    items = persona_items(conversations, transcripts, scenarios, what)
    j = Judgment.__table__.c  # type: ignore[attr-defined]
    with store.session() as s:
        stored = s.execute(
            select(j.id, j.verdict).where(
                j.judge == rater.name,
                j.prompt_version == rater.version,
                j.rubric_id.in_([ENACTMENT_RUBRIC, REALISM_RUBRIC]),
                j.conversation_id.in_([c.id for c in conversations]),
            )
        ).all()
    done = {row_id for row_id, verdict in stored if verdict != ERROR}
    failed = {row_id for row_id, verdict in stored if verdict == ERROR}

    async def one(item: PersonaItem) -> dict[str, Any] | None:
        probe = _row(item, rater, PersonaVerdict(verdict=None, rationale=""), None, None)
        if probe["id"] in done:
            summary.skipped += 1
            return None
        async with sem:
            verdict, call_id = await rater.rate(item)
        if verdict.verdict is None:
            summary.unknown += 1
            return None
        return _row(item, rater, verdict, call_id, utcnow())

    rows = [r for r in await asyncio.gather(*(one(i) for i in items)) if r is not None]
    if rows:
        with store.session() as s:
            again = [r["id"] for r in rows if r["id"] in failed]
            if again:  # the new rating replaces the error it was asked again for
                s.execute(delete(Judgment).where(j.id.in_(again)))
            s.execute(insert(Judgment), rows)
            s.commit()
    for r in rows:
        summary.rated += 1
        summary.errors += r["verdict"] == ERROR
        key = f"{r['rubric_id']}:{r['verdict']}"
        summary.by_verdict[key] = summary.by_verdict.get(key, 0) + 1


def rate_personas(store: Any, rater: PersonaRater, **kwargs: Any) -> PersonaSummary:
    """Synchronous :func:`arate_personas`."""
    return asyncio.run(arate_personas(store, rater, **kwargs))


def _has_errors(store: Any, rater: str, run_id: str | None) -> bool:
    """Whether ``rater`` has stored an error rating of a persona turn (of ``run_id``, or any)."""
    from sqlalchemy import select

    from branchpoint.core.records import Conversation, Judgment

    j, c = Judgment.__table__.c, Conversation.__table__.c  # type: ignore[attr-defined]
    q = select(j.id).where(
        j.judge == rater,
        j.verdict == ERROR,
        j.rubric_id.in_([ENACTMENT_RUBRIC, REALISM_RUBRIC]),
    )
    if run_id is not None:
        q = q.join(Conversation, c.id == j.conversation_id).where(c.run_id == run_id)
    with store.session() as s:
        return s.execute(q.limit(1)).first() is not None


async def apersona_judge_run(
    run_id: str | None = None,
    *,
    spec: str = "heuristic",
    db: str | None = None,
    store: Any | None = None,
    params: Any | None = None,
    all_runs: bool = False,
    what: Sequence[What] = WHAT,
    concurrency: int = 8,
) -> PersonaSummary:
    """``branchpoint judge --persona-judge SPEC``: open the store (and a gateway for a model
    rater), rate the persona turns of ``run_id`` or, with ``all_runs``, of every run."""
    from branchpoint.core.errors import UserError

    if run_id is None and not all_runs:
        raise UserError("give a RUN_ID to rate, or --all for every run in the store")
    own_store = store is None
    if store is None:
        from branchpoint.core.store import open_store

        store = open_store(db, create=False)
    gateway = None
    try:
        if spec.strip() != "heuristic":
            from branchpoint.gateway.gateway import Gateway

            # Cached (a turn shared by sibling arms is asked once), except when earlier ratings
            # by this rater are errors: asked again, they must really be asked again (a cached
            # copy of the bad answer would only repeat it), as ``judge --retry-errors`` does.
            retrying = _has_errors(store, spec.strip(), None if all_runs else run_id)
            gateway = Gateway(store=store, cache=not retrying)
        rater = make_persona_rater(spec, gateway, params)
        return await arate_personas(store, rater, run_id=run_id, what=what, concurrency=concurrency)
    finally:
        if gateway is not None:
            await gateway.aclose()
        if own_store:
            store.close()


def persona_judge_run(run_id: str | None = None, **kwargs: Any) -> PersonaSummary:
    """Synchronous :func:`apersona_judge_run`."""
    return asyncio.run(apersona_judge_run(run_id, **kwargs))
