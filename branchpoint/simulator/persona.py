"""The persona simulator: a model that plays the scenario's user, kept in role.

The persona model sees the conversation from its own side: its own messages are ``assistant`` and
the chatbot's are ``user`` (roles flipped), under a system prompt rendered from
``branchpoint/simulator/prompts/persona.j2`` in a sandboxed Jinja2 environment. Replies in which the model
slips into the assistant's role or breaks character are retried with a corrective note
(``max_retries``, default 2); each retry and its reason is recorded on the turn. The persona may end
the conversation by writing the end marker (``[END]``).

The realism gate (``realism_min``, off by default; issue 36): a reply that the offline realism
rater (``branchpoint/scenarios/persona_rubrics/realism.yaml``) puts below ``realism_min`` is retried like a
role break, within the same ``max_retries``, with the rater's reasons as the corrective note. Every
attempt is a stored model call; a persona that never reaches the level ends the conversation as a
simulator error, so no stored persona turn of a gated run is below it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from branchpoint.core.patterns import any_of
from branchpoint.core.templates import prompt_template
from branchpoint.gateway.call_layout import CallLayout, TurnsRef
from branchpoint.gateway.completion import Completion, GenParams, Message, ModelError

if TYPE_CHECKING:
    from branchpoint.gateway.gateway import Gateway
    from branchpoint.scenarios.models import BranchOption, Scenario, Stage

PROMPTS = Path(__file__).parent / "prompts"
END_MARKER = "[END]"
KICKOFF = "(The chat window is open. Send your first message.)"

# Signs that the persona model answered as the chatbot or stepped out of the role. Each is a
# (reason, pattern) pair; the reason is what gets recorded on the turn.
DEFAULT_ROLE_BREAKS: list[tuple[str, str]] = [
    ("speaks as an AI", r"\bas an (ai|artificial intelligence|assistant|language model)\b"),
    (
        "speaks as an AI",
        r"\bI['’]?m (an|a) (ai|artificial intelligence|language model|chatbot|virtual assistant)\b",
    ),
    (
        "speaks as an AI",
        r"\bI am (an|a) (ai|artificial intelligence|language model|chatbot|virtual assistant)\b",
    ),
    ("speaks as an AI", r"\blanguage model\b"),
    ("speaks as the assistant", r"^\s*[*_#]*\s*(assistant|chatbot|ai|bot|system)\s*[*_]*\s*:"),
    ("offers help like an assistant", r"\bhow (can|may) I (help|assist) you\b"),
    ("offers help like an assistant", r"\b(is there )?anything (else )?I can (help|do for) you\b"),
    (
        "offers help like an assistant",
        r"\bI['’]?m (here|happy|glad) to (help|assist|support) you\b",
    ),
    ("offers help like an assistant", r"\bI['’]?m here (for you|to listen)\b"),
    ("offers help like an assistant", r"\bfeel free to (ask|reach out|share)\b"),
    (
        "offers resources to the user",
        r"\b(please )?(call|text|contact|reach out to) (988|911|a hotline|a crisis|the crisis|a helpline)",
    ),
    ("offers resources to the user", r"\bit['’]?s (important|okay|ok) to (reach out|seek|talk to)"),
    (
        "sympathises like an assistant",
        r"\bI['’]?m (so |really )?sorry (to hear|that you['’]?re going through)",
    ),
]

# Issue 47: the same signs in the other languages the library ships (es, fr), by primary
# subtag. A persona in one of them is checked with the English rules and its own (a model that
# slips into English assistant-speak is as out of role as one in Spanish).
ROLE_BREAKS_BY_LANGUAGE: dict[str, list[tuple[str, str]]] = {
    "es": [
        (
            "speaks as an AI",
            r"\bcomo (una |un )?(ia|inteligencia artificial|asistente|modelo de lenguaje)\b",
        ),
        (
            "speaks as an AI",
            r"\bsoy (una |un )(ia|inteligencia artificial|modelo de lenguaje|chatbot|asistente virtual)\b",
        ),
        ("speaks as an AI", r"\bmodelo de lenguaje\b"),
        ("speaks as the assistant", r"^\s*[*_#]*\s*(asistente|chatbot|ia|bot|sistema)\s*[*_]*\s*:"),
        ("offers help like an assistant", r"\b(en qué|cómo) (más )?(te |le )?puedo ayudar"),
        ("offers help like an assistant", r"\bestoy aquí para (ayudarte|apoyarte|escucharte)"),
        ("offers help like an assistant", r"\bno dudes en (preguntar|escribir|contactar)"),
        (
            "offers resources to the user",
            r"\b(llama|llamar|contacta|escribe) (a |al )?(024|112|una línea|la línea|un teléfono de ayuda)",
        ),
        (
            "offers resources to the user",
            r"\bes (importante|fundamental) (que )?(busques|pidas|hables)",
        ),
        (
            "sympathises like an assistant",
            r"\b(lamento|siento) (mucho )?(que estés pasando|escuchar eso|que te sientas así)",
        ),
    ],
    "fr": [
        (
            "speaks as an AI",
            r"\ben tant qu['’](ia|intelligence artificielle|assistant|modèle de langage)\b",
        ),
        (
            "speaks as an AI",
            r"\bje suis (une |un )(ia|intelligence artificielle|modèle de langage|chatbot|assistant virtuel)\b",
        ),
        ("speaks as the assistant", r"^\s*[*_#]*\s*(assistant|chatbot|ia|bot|système)\s*[*_]*\s*:"),
        ("offers help like an assistant", r"\bcomment (puis-je|je peux) (t['’]|vous )?aider"),
        (
            "offers help like an assistant",
            r"\bje suis (là|ici) pour (t['’]aider|vous aider|t['’]écouter)",
        ),
        (
            "offers help like an assistant",
            r"\bn['’]hésite(z)? pas à (me )?(demander|écrire|contacter)",
        ),
        (
            "offers resources to the user",
            r"\b(appelle|appeler|contacte) (le )?(3114|112|15|une ligne d['’]écoute)",
        ),
        (
            "sympathises like an assistant",
            r"\bje suis (vraiment )?désolée? (d['’]apprendre|que tu traverses)",
        ),
    ],
}


def role_breaks_for(language: str | None) -> list[tuple[str, str]]:
    """The role-break rules for a persona writing in ``language`` (English ones always apply)."""
    from branchpoint.core.languages import primary_language

    return [*DEFAULT_ROLE_BREAKS, *ROLE_BREAKS_BY_LANGUAGE.get(primary_language(language), [])]


# A label in front of the message ("Maya:", "User:", "**Me:**") is stripped; the assistant's label
# counts as a role break (above).
_PREFIX = r"^\s*[*_]*\s*(user|persona|me|teen|human|{name})\s*[*_]*\s*:\s*[*_]*\s*"
# The model may write the chatbot's next line too: cut there.
_OTHER_SPEAKER = re.compile(
    r"\n\s*[*_]*\s*(assistant|chatbot|ai|bot|system)\s*[*_]*\s*:", re.IGNORECASE
)


@lru_cache(maxsize=4)
def _template(name: str) -> Any:
    # Sandboxed (branchpoint/core/templates.py): scenario files come from users; a value must not reach
    # Python internals.
    return prompt_template((PROMPTS / name).read_text(encoding="utf-8"))


class PersonaReply(BaseModel):
    """The persona's next message, or why there is none."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    text: str = ""
    ended: bool = False  # the persona wrote the end marker
    completion: Completion | None = None
    call_id: str | None = None
    retries: int = 0
    retry_reasons: list[str] = []
    error: str | None = None  # set: no usable message (model failure or role break after retries)
    calls: int = 0  # model calls made for this message
    plan: dict[str, str] | None = None  # adaptive: {"tactic", "why"} (issue 47)


_BREAK_FLAGS = re.IGNORECASE | re.MULTILINE


@lru_cache(maxsize=64)
def _compiled_breaks(
    role_breaks: tuple[tuple[str, str], ...],
) -> tuple[tuple[str, re.Pattern[str]], ...]:
    # A persona is made per conversation group: 1,000 conversations compiled (looked up in re's
    # cache, and or-ed the flags of) the same patterns 13,000 times before their first call.
    return tuple((reason, re.compile(p, _BREAK_FLAGS)) for reason, p in role_breaks)


class PersonaSimulator:
    """Builds the persona's prompt for one scenario and asks the persona model for its next message."""

    def __init__(
        self,
        gateway: Gateway,
        scenario: Scenario,
        spec: str = "embedded",
        params: GenParams | None = None,
        *,
        max_retries: int = 2,
        role_breaks: Sequence[tuple[str, str]] | None = None,
        end_marker: str = END_MARKER,
        run_id: str | None = None,
        realism_min: str | None = None,
        mode: str = "scripted",
    ) -> None:
        self.gateway = gateway
        self.mode = mode
        self.scenario = scenario
        self.spec = spec
        self.params = params or GenParams()
        self.max_retries = max(0, max_retries)
        self.end_marker = end_marker
        self.run_id = run_id
        self.realism_min = realism_min
        self.language = scenario.conversation_language()
        self.role_breaks = _compiled_breaks(
            tuple(
                (reason, p)
                for reason, p in (
                    role_breaks if role_breaks is not None else role_breaks_for(self.language)
                )
            )
        )
        self._any_break = any_of([p for _, p in self.role_breaks], _BREAK_FLAGS)
        from branchpoint.scenarios.variants import render_persona

        p = render_persona(scenario)
        self.persona = {
            "name": p.name,
            "age": p.age,
            "gender": p.gender,
            "background": p.background,
            "voice": p.voice,
            "context": p.context,
        }
        self._prefix = re.compile(_PREFIX.replace("{name}", re.escape(p.name)), re.IGNORECASE)
        self._prompts: dict[tuple[Any, ...], str] = {}
        self._history: list[tuple[str, str]] = []
        self._history_messages: list[Message] = []

    # -- the prompt ------------------------------------------------------------------------------

    def system_prompt(
        self,
        stage: Stage | None,
        new_options: Sequence[BranchOption] = (),
        kept_options: Sequence[BranchOption] = (),
        correction: str | None = None,
    ) -> str:
        # The prompt changes only with the stage, the options in force and a correction: render
        # each combination once per conversation tree, not once per exchange.
        memo_key = (
            stage.id if stage else None,
            tuple(o.instruction for o in new_options),
            tuple(o.instruction for o in kept_options),
            correction,
        )
        cached = self._prompts.get(memo_key)
        if cached is not None:
            return cached
        from branchpoint.scenarios.variants import render_text

        def r(text: str) -> str:
            return render_text(self.scenario, text).strip()

        from branchpoint.core.languages import language_name, primary_language

        # English prompts stay as they were (no language line): their cached calls still match.
        foreign = primary_language(self.language) != "en"
        text = _template("persona.j2").render(
            language=self.language if foreign else None,
            language_name=language_name(self.language),
            persona=self.persona,
            stage={"id": stage.id, "instructions": r(stage.instructions)} if stage else None,
            new_options=[{"instruction": r(o.instruction)} for o in new_options],
            kept_options=[{"instruction": r(o.instruction)} for o in kept_options],
            end_marker=self.end_marker,
        )
        if correction:
            text += (
                f"\n\nYour previous reply was rejected because it {correction}. "
                f"Write again as {self.persona['name']}, the user, in your own voice."
            )
        self._prompts[memo_key] = text = text.strip()
        return text

    def messages(
        self,
        history: Sequence[tuple[str, str]],
        stage: Stage | None,
        new_options: Sequence[BranchOption] = (),
        kept_options: Sequence[BranchOption] = (),
        correction: str | None = None,
    ) -> list[Message]:
        """The persona model's messages. ``history`` is (role, text) as the chatbot sees it."""
        system = self.system_prompt(stage, new_options, kept_options, correction)
        # the system prompt is a cache prefix for providers with explicit caches (it stays the
        # same within a stage)
        out = [Message(role="system", content=system, cache_prefix=len(system))]
        # Many chat templates want a user message first; the persona speaks first, so a short cue opens.
        out.append(Message(role="user", content=KICKOFF))
        out.extend(self._flipped(history))
        return out

    def _flipped(self, history: Sequence[tuple[str, str]]) -> list[Message]:
        # A group's history only grows: the messages made for the last call are kept, and only
        # the turns since are added (comparing the old prefix costs string identity checks).
        n = len(self._history)
        if n > len(history) or list(history[:n]) != self._history:
            self._history, self._history_messages, n = [], [], 0
        flip = {"user": "assistant", "assistant": "user"}
        for role, text in history[n:]:
            self._history.append((role, text))
            self._history_messages.append(Message(role=flip[role], content=text))
        return list(self._history_messages)

    # -- keeping it in role ----------------------------------------------------------------------

    def clean(self, text: str) -> str:
        """Strip speaker labels and wrapping quotes; cut where the model starts writing the other side."""
        text = text.strip()
        cut = _OTHER_SPEAKER.search(text)
        if cut:
            text = text[: cut.start()].strip()
        for _ in range(2):
            text = self._prefix.sub("", text, count=1).strip()
        if (
            len(text) >= 2
            and text[0] == text[-1]
            and text[0] in "\"'“”"
            or (text[:1], text[-1:]) == ("“", "”")
        ):
            text = text[1:-1].strip()
        return text

    def role_break(self, text: str) -> str | None:
        """Why ``text`` is not a message this persona would write, or None."""
        if not text.strip():
            return "was empty"
        if not self._any_break(text):
            return None  # nearly every message: one scan instead of one per pattern
        for reason, pattern in self.role_breaks:
            if pattern.search(text):
                return reason
        return None

    def below_realism(self, text: str) -> str | None:
        """Why ``text`` fails the realism gate, or None (also when the gate is off)."""
        if self.realism_min is None or not text.strip():
            return None
        from branchpoint.scenarios.persona_rubric import rate_realism, realism_at_least

        name, age = self.persona["name"], self.persona["age"]
        rating = rate_realism(
            text,
            name=name if isinstance(name, str) else None,
            age=age if isinstance(age, int) else None,
            language=self.language,
        )
        if realism_at_least(rating.verdict, self.realism_min):
            return None
        return (
            f"was rated {rating.verdict} for realism, below realism_min {self.realism_min} "
            f"({rating.rationale})"
        )

    def split_end(self, text: str) -> tuple[str, bool]:
        if self.end_marker and self.end_marker.lower() in text.lower():
            idx = text.lower().index(self.end_marker.lower())
            return (text[:idx] + " " + text[idx + len(self.end_marker) :]).strip(), True
        return text, False

    async def next_message(
        self,
        history: Sequence[tuple[str, str]],
        stage: Stage | None,
        new_options: Sequence[BranchOption] = (),
        kept_options: Sequence[BranchOption] = (),
        *,
        seed: int | None = None,
        conversation_id: str | None = None,
        history_stored: bool = False,
        branch_state: dict[str, str] | None = None,
        tactics_used: Sequence[str] = (),
    ) -> PersonaReply:
        """The persona's next message. ``history_stored``: ``history`` is the stored turns of
        ``conversation_id``, so the calls' rows refer to them instead of copying them.

        Adaptive (``mode``): with a branch point in force (``branch_state``), the persona is
        told the arm's goals and tactics and those it used (``tactics_used``), and answers with
        its tactic, why, and the message (``branchpoint.simulator.adaptive``)."""
        from branchpoint.simulator.adaptive import ADAPTIVE, parse_choice, plan_for, prompt_section

        plan = (
            plan_for(self.scenario, branch_state or {}, tactics_used)
            if self.mode == ADAPTIVE
            else None
        )
        reasons: list[str] = []
        correction: str | None = None
        calls = 0
        for attempt in range(self.max_retries + 1):
            params = self.params
            if seed is not None:
                params = params.merged({"seed": seed + attempt})
            messages = self.messages(history, stage, new_options, kept_options, correction)
            if plan is not None:
                messages[0] = Message(
                    role="system", content=messages[0].content + "\n" + prompt_section(plan)
                )
            layout = (
                CallLayout(
                    lead=tuple(messages[:2]),
                    turns=TurnsRef(conversation_id, len(history), flip=True),
                )
                if history_stored and conversation_id is not None
                else None
            )
            calls += 1
            try:
                completion, call_id = await self.gateway.complete(
                    self.spec,
                    messages,
                    params,
                    purpose="persona",
                    run_id=self.run_id,
                    conversation_id=conversation_id,
                    layout=layout,
                )
            except ModelError as exc:
                return PersonaReply(
                    error=f"persona model failed: {exc.reason}",
                    retries=attempt,
                    retry_reasons=reasons,
                    calls=calls,
                )
            answer, chosen = completion.text, None
            if plan is not None:
                choice, why_not = parse_choice(completion.text, plan)
                if choice is None:
                    reasons.append(why_not or "gave no tactic")
                    correction = why_not
                    continue
                answer, chosen = choice.message, {"tactic": choice.tactic, "why": choice.why}
            text, ended = self.split_end(self.clean(answer))
            reason = None if (ended and not text) else self.role_break(text)
            if reason is None:
                reason = self.below_realism(text)
            if reason is None:
                return PersonaReply(
                    text=text,
                    ended=ended,
                    completion=completion,
                    call_id=call_id,
                    retries=attempt,
                    retry_reasons=reasons,
                    calls=calls,
                    plan=chosen,
                )
            reasons.append(reason)
            correction = reason
        return PersonaReply(
            error=f"persona broke character after {self.max_retries} retries ({reasons[-1]})",
            retries=self.max_retries,
            retry_reasons=reasons,
            calls=calls,
        )
