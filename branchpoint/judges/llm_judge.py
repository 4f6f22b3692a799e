"""The LLM judge: one model call per judging unit rates every listed criterion, with evidence.

The call sees the scenario context (title, persona summary), the transcript up to and including
the rated chatbot turn (each message between markers, so that model text cannot pose as
instructions), and the criteria with their anchors. It must answer with a JSON object, one entry
per criterion: ``{"applicable": bool, "verdict": level|null, "rationale": str, "evidence": [str]}``.
The schema goes to the provider as ``GenParams.json_schema``: OpenAI-compatible servers get it
down the structured-output ladder of ``branchpoint/gateway/structured.py`` (json_schema, json_object, or
the schema in the prompt; ``--judge-param structured=MODE`` pins one), local models decode guided
by it. Whatever the mode, the answer is dug out of fenced or chatty text, then validated by a
pydantic model built for the rubric.

Failure is explicit: output that does not validate is retried ``max_retries`` times, each time
with a note saying what was wrong; after that every criterion of the call is stored as ``error``
with the raw output and the reason. A criterion missing from otherwise valid output is an
``error`` for that criterion. A model call that fails for good is ``error`` too. Nothing ever
defaults to a pass.
"""

from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    create_model,
    field_validator,
    model_validator,
)

from branchpoint.core.answer_schema import answer_schema
from branchpoint.core.languages import language_name, primary_language
from branchpoint.gateway.structured import extract_json, pinned_mode
from branchpoint.judges.evidence import verify_quotes
from branchpoint.judges.rubric import ERROR, Criterion, Rubric
from branchpoint.judges.verdicts import CriterionVerdict, JudgingUnit, error_verdicts

__all__ = ["LLMJudge", "PROMPT_VERSION", "extract_json", "json_schema", "parse_output"]

TEMPLATE_PATH = Path(__file__).resolve().parent / "prompts" / "judge.j2"
# The judge does not know whether `judge` or a sweep started it: name both places max_tokens is set.
CUT_OFF_HINT = (
    " (cut off at max_tokens: raise it with --judge-param max_tokens=N, or in a sweep manifest "
    "with the judge's params: {max_tokens: N})"
)
_TEMPLATE_TEXT = TEMPLATE_PATH.read_text(encoding="utf-8")
# Bump the number for deliberate changes; the hash catches any edit of the template.
PROMPT_VERSION = "judge-1." + hashlib.sha256(_TEMPLATE_TEXT.encode("utf-8")).hexdigest()[:8]

DEFAULT_MAX_RETRIES = 2
_RAW_KEEP = 20_000  # characters of raw output stored with an error verdict


# ------------------------------------------------------------------------------------ prompt


@lru_cache(maxsize=1)
def _template() -> Any:
    from branchpoint.core.templates import prompt_template

    return prompt_template(_TEMPLATE_TEXT)


_SYSTEM_PROMPTS: dict[str, str] = {}  # rubric hash -> its system prompt


def _system_prompt(rubric: Rubric) -> str:
    """The system prompt: the same for every unit of ``rubric`` (its scale and how to answer;
    the criteria come in the user message), so that a provider's prompt cache serves it to
    every call."""
    key = rubric.rubric_hash()
    if key in _SYSTEM_PROMPTS:
        return _SYSTEM_PROMPTS[key]
    values = {
        "rubric": rubric,
        "levels": list(rubric.levels),
        "criteria": list(rubric.criteria),
        "unit_kind": "conversation" if rubric.scope == "conversation" else "turn",
    }
    text = _SYSTEM_PROMPTS[key] = str(_template().render(part="system", **values)).strip()
    return text


def render_prompt(
    rubric: Rubric, unit: JudgingUnit, criteria: list[Criterion]
) -> tuple[list[Any], Any]:
    """The messages of a judge call and their layout (``branchpoint.gateway.call_layout``).

    Laid out for providers' prompt caches: the system prompt is the rubric's (every unit alike),
    then one user message with the criteria that apply to the scenario (every unit of the
    scenario alike), the scenario's context, the transcript in order (the transcript of an
    earlier turn is a prefix of a later one's), and last what changes per unit: the rated
    message and the reply's keys. The system prompt and the end of the transcript are
    cache prefixes (``Message.cache_prefix``: Anthropic's cache_control breakpoints). The layout
    stores the transcript's leading turns as they are stored (``unit.stored_turns``) as a
    reference, the rest as text."""
    from branchpoint.core.judge_transcript import marked_transcript
    from branchpoint.gateway.call_layout import CallLayout, ComposedMessage, TranscriptRef
    from branchpoint.gateway.completion import Message

    values = {
        "rubric": rubric,
        "levels": list(rubric.levels),
        "criteria": criteria,
        "unit_kind": "turn" if unit.turn_index is not None else "conversation",
        "rated_index": unit.turn_index,
        "scenario_title": unit.scenario_title,
        "persona_summary": unit.persona_summary,
        # English conversations' prompts stay as they were (their cached calls still match).
        "language": unit.language if primary_language(unit.language) != "en" else None,
        "language_name": language_name(unit.language),
    }
    tpl = _template()
    system = _system_prompt(rubric)
    listed = tpl.render(part="criteria", **values)
    head = tpl.render(part="head", **values)
    stored = unit.stored_turns
    turns = [(t.index, t.role, t.content) for t in unit.transcript]
    referred = marked_transcript(turns[:stored])
    rest = marked_transcript(turns[stored:])
    rate = tpl.render(part="ask", piece="rate", **values)
    asked = tpl.render(part="ask", piece="criteria", **values)
    prefix = listed + head + referred + rest
    user = prefix + rate + asked
    messages = [
        Message(role="system", content=system, cache_prefix=len(system)),
        Message(role="user", content=user, cache_prefix=len(prefix)),
    ]
    pieces: list[str | TranscriptRef] = [listed, head]
    if stored:
        pieces.append(TranscriptRef(unit.conversation_id, stored))
    pieces += [p for p in (rest, rate, asked) if p]
    layout = CallLayout(lead=(messages[0], ComposedMessage("user", tuple(pieces))))
    return messages, layout


def render_messages(rubric: Rubric, unit: JudgingUnit, criteria: list[Criterion]) -> list[Any]:
    return render_prompt(rubric, unit, criteria)[0]


# ------------------------------------------------------------------------------------ output


class _RatingBase(BaseModel):
    # defaults_required: what is parsed may leave out rationale and evidence, what is asked for
    # (the serialization schema, branchpoint.core.answer_schema) requires them.
    model_config = ConfigDict(extra="forbid", json_schema_serialization_defaults_required=True)
    LEVELS: ClassVar[tuple[str, ...]] = ()

    applicable: bool
    verdict: str | None = None
    rationale: str = ""
    evidence: list[str] = Field(default_factory=list)

    @field_validator("verdict", mode="before")
    @classmethod
    def _plain_verdict(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = value.strip().lower()
            if value in ("", "null", "none", "n/a", "na", "not_applicable", "not applicable"):
                return None
        return value

    @field_validator("evidence", mode="before")
    @classmethod
    def _listify(cls, value: Any) -> Any:
        if value is None:
            return []
        if isinstance(value, str):
            return [value] if value.strip() else []
        return value

    @model_validator(mode="after")
    def _verdict_fits(self) -> _RatingBase:
        if not self.applicable:
            self.verdict = None
            return self
        if self.verdict is None:
            raise ValueError("verdict is required when applicable is true")
        if self.verdict not in self.LEVELS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {', '.join(self.LEVELS)}")
        return self


_MODELS: dict[tuple[str, tuple[str, ...]], type[BaseModel]] = {}


def output_model(rubric: Rubric, criteria: list[Criterion]) -> type[BaseModel]:
    """The pydantic model of a valid answer: one optional entry per criterion, nothing else."""
    key = (rubric.rubric_hash(), tuple(c.id for c in criteria))
    if key not in _MODELS:  # building a pydantic model costs more than validating with it
        _MODELS[key] = _build_output_model(rubric, criteria)
    return _MODELS[key]


def _build_output_model(rubric: Rubric, criteria: list[Criterion]) -> type[BaseModel]:
    # One model both parses an answer and, in its serialization schema, says what is asked for
    # (branchpoint.core.answer_schema): parsing is lenient (a criterion, a rationale or the evidence may be
    # missing), the schema sent requires them all, as strict structured output needs.
    levels = tuple(rubric.levels)
    verdict = Annotated[
        str | None, WithJsonSchema({"type": ["string", "null"], "enum": [*levels, None]})
    ]
    rating = type(
        "Rating",
        (_RatingBase,),
        {
            "LEVELS": levels,
            "__module__": __name__,
            "__annotations__": {"verdict": verdict},
            "verdict": None,
        },
    )
    shown = WithJsonSchema(answer_schema(rating))  # inline: no $defs, the schema stays as it was
    fields: dict[str, Any] = {
        f"c_{i}": (Annotated[rating | None, shown], Field(None, alias=c.id))
        for i, c in enumerate(criteria)
    }
    return create_model(
        "JudgeOutput",
        __config__=ConfigDict(
            extra="forbid",
            populate_by_name=False,
            title=f"{rubric.id}_verdicts",
            json_schema_serialization_defaults_required=True,
        ),
        **fields,
    )


def json_schema(rubric: Rubric, criteria: list[Criterion]) -> dict[str, Any]:
    """JSON schema of the answer, strict enough for OpenAI-style structured output, generated
    from the model that parses the answer."""
    return answer_schema(output_model(rubric, criteria))


def _unwrap(obj: Any, ids: set[str]) -> Any:
    """Accept two near-misses small models make: a wrapper key, or a list of rated criteria."""
    if isinstance(obj, dict) and len(obj) == 1 and not ids & set(obj):
        (inner,) = obj.values()
        if isinstance(inner, (dict, list)):
            obj = inner
    if isinstance(obj, list):
        converted: dict[str, Any] = {}
        for item in obj:
            if not isinstance(item, dict):
                return obj
            item = dict(item)
            key = next((k for k in ("criterion_id", "criterion", "id") if k in item), None)
            if key is None:
                return obj
            converted[str(item.pop(key))] = item
        return converted
    return obj


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors(include_url=False)[:6]:
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "not a criterion or field that was asked for"
        parts.append(f"{loc}: {msg}")
    more = len(exc.errors()) - 6
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def parse_output(
    text: str, rubric: Rubric, criteria: list[Criterion]
) -> tuple[dict[str, _RatingBase | None] | None, str | None]:
    """``(ratings by criterion id, None)`` or ``(None, what is wrong)``. Missing criteria map to None."""
    try:
        obj = extract_json(text)
    except ValueError as exc:
        return None, str(exc)
    ids = {c.id for c in criteria}
    obj = _unwrap(obj, ids)
    if not isinstance(obj, dict):
        return None, "the JSON is not an object keyed by criterion id"
    # The system prompt lists every criterion of the rubric: a rating of one not asked for is
    # left out, not an error (any other key still is).
    others = {c.id for c in rubric.criteria} - ids
    obj = {k: v for k, v in obj.items() if k not in others}
    if not ids & set(obj):
        names = [c.id for c in criteria]
        shown = ", ".join(names[:4]) + (f", ... ({len(names)} in all)" if len(names) > 4 else "")
        return None, f"none of the criteria asked for is rated (expected keys: {shown})"
    model = output_model(rubric, criteria)
    try:
        parsed = model.model_validate(obj)
    except ValidationError as exc:
        return None, _describe(exc)
    return {c.id: getattr(parsed, f"c_{i}") for i, c in enumerate(criteria)}, None


# ------------------------------------------------------------------------------------ judge


# Params that decide where or how a judge's answer is decoded, never what it says: they stay out
# of a judgment's identity (a pinned structured-output mode, the server's address).
TRANSPORT_PARAMS = ("api_base", "structured")


def judge_version(prompt_version: str, params: Any | None) -> str:
    """The prompt version, plus a hash of the params that can change a verdict when any is set.

    Part of a judgment's identity (``Judgment.prompt_version``): re-judging with other params
    judges again and the analysis keeps the two sets apart; the same params (or none) find the
    stored verdicts."""
    from branchpoint.core.redaction import is_secret_key

    if params is None:
        return prompt_version
    data = dict(params.model_dump(exclude_unset=True) if hasattr(params, "model_dump") else params)
    extra = {
        k: v
        for k, v in dict(data.pop("extra", None) or {}).items()
        if k not in TRANSPORT_PARAMS and not is_secret_key(k)
    }
    kept = {k: v for k, v in data.items() if k not in TRANSPORT_PARAMS and v is not None}
    if extra:
        kept["extra"] = extra
    if not kept:
        return prompt_version
    digest = hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()
    return f"{prompt_version}+params:{digest[:10]}"


class LLMJudge:
    """A model, reached through the gateway by its spec, used as a judge."""

    version = PROMPT_VERSION

    def __init__(
        self,
        spec: str,
        gateway: Any,
        params: Any | None = None,
        *,
        max_retries: int = DEFAULT_MAX_RETRIES,
    ) -> None:
        self.spec = spec.strip()
        self.name = self.spec
        self.gateway = gateway
        self.params = params
        self.max_retries = max(0, max_retries)
        if params is not None:  # a mistyped structured=... is the user's error, before any call
            pinned_mode(params, where="--judge-param")
        self.version = judge_version(PROMPT_VERSION, params)

    def _params(self, rubric: Rubric, criteria: list[Criterion]) -> Any:
        from branchpoint.gateway.completion import GenParams

        # Greedy and seeded: a judge is an instrument, and the gateway caches deterministic calls.
        base = GenParams(temperature=0.0, seed=0, max_tokens=min(4096, 256 + 160 * len(criteria)))
        base = base.merged(self.params)
        return base.model_copy(update={"json_schema": json_schema(rubric, criteria)})

    def request(
        self, rubric: Rubric, unit: JudgingUnit, criteria: list[Criterion]
    ) -> tuple[list[Any], Any]:
        """The messages and params of this judge's first call on ``unit`` (what a batch sends)."""
        return render_messages(rubric, unit, criteria), self._params(rubric, criteria)

    def prompt(
        self, rubric: Rubric, unit: JudgingUnit, criteria: list[Criterion]
    ) -> tuple[list[Any], Any, Any]:
        """``request``'s messages and params, and the messages' layout (how they are stored)."""
        messages, layout = render_prompt(rubric, unit, criteria)
        return messages, self._params(rubric, criteria), layout

    def verdicts_from_reply(
        self,
        rubric: Rubric,
        unit: JudgingUnit,
        criteria: list[Criterion],
        text: str,
        *,
        finish_reason: str | None = None,
        call_id: str | None = None,
    ) -> list[CriterionVerdict]:
        """The verdicts in one reply, with no second try: invalid output is ``error`` for every
        criterion, with the raw output and what was wrong (a batch's answers; ``--retry-errors``
        asks again)."""
        ratings, problem = parse_output(text, rubric, criteria)
        if ratings is not None:
            return self._verdicts(unit, criteria, ratings, call_id)
        reason = f"invalid judge output: {problem or 'invalid output'}"
        if finish_reason == "length":
            reason += CUT_OFF_HINT
        return error_verdicts(criteria, reason[:4000], raw_output=text[:_RAW_KEEP], call_id=call_id)

    async def judge(
        self, rubric: Rubric, unit: JudgingUnit, criteria: list[Criterion]
    ) -> list[CriterionVerdict]:
        from branchpoint.gateway.completion import Message, ModelError

        messages, params, layout = self.prompt(rubric, unit, criteria)
        problems: list[str] = []
        raw = ""
        call_id: str | None = None
        for _attempt in range(self.max_retries + 1):
            try:
                completion, call_id = await self.gateway.complete(
                    self.spec,
                    messages,
                    params,
                    purpose="judge",
                    run_id=unit.run_id,
                    conversation_id=unit.conversation_id,
                    layout=layout,  # a retry's longer list does not fit it: stored whole
                )
            except ModelError as exc:
                reason = f"judge model call failed: {exc.reason}"
                if problems:
                    reason += f" (earlier invalid output: {problems[-1]})"
                return error_verdicts(
                    criteria, reason, raw_output=raw[:_RAW_KEEP] or None, call_id=call_id
                )
            raw = completion.text
            ratings, problem = parse_output(raw, rubric, criteria)
            if ratings is not None:
                return self._verdicts(unit, criteria, ratings, call_id)
            problem = problem or "invalid output"
            cut = CUT_OFF_HINT if completion.finish_reason == "length" else ""
            problems.append(problem + cut)
            messages = [
                *messages,
                Message(role="assistant", content=raw[:4000]),
                Message(
                    role="user",
                    content=(
                        f"Your reply could not be used: {problem}. Reply again with only the JSON object "
                        f"described, with one entry for each of these criteria: "
                        f"{', '.join(c.id for c in criteria)}."
                    ),
                ),
            ]
        reason = f"invalid judge output after {len(problems)} attempts: " + " | ".join(problems)
        return error_verdicts(criteria, reason[:4000], raw_output=raw[:_RAW_KEEP], call_id=call_id)

    def _verdicts(
        self,
        unit: JudgingUnit,
        criteria: list[Criterion],
        ratings: dict[str, _RatingBase | None],
        call_id: str | None,
    ) -> list[CriterionVerdict]:
        out: list[CriterionVerdict] = []
        for c in criteria:
            r = ratings.get(c.id)
            if r is None:
                out.append(
                    CriterionVerdict(
                        criterion_id=c.id,
                        applicable=True,
                        verdict=ERROR,
                        error="criterion missing from the judge's otherwise valid output",
                        call_id=call_id,
                    )
                )
                continue
            out.append(
                CriterionVerdict(
                    criterion_id=c.id,
                    applicable=r.applicable,
                    verdict=r.verdict if r.applicable else None,
                    rationale=r.rationale,
                    evidence=verify_quotes(r.evidence, unit.transcript),
                    call_id=call_id,
                )
            )
        return out
