"""Rubrics that rate the persona, not the chatbot: manipulation checks and realism (issue 36).

Two files, ``branchpoint/scenarios/persona_rubrics/enactment.yaml`` and ``realism.yaml``, read like the judge
rubrics (positioned one-line errors, unknown keys refused, every regex compiled). They live beside
the scenario format rather than among the judge rubrics because they rate what a scenario asks of
its persona (a branch option's instruction, the persona's age and voice), and because the engine
itself uses the realism rater when a run sets ``realism_min`` (the engine may not import the
judges).

**Enactment** (a manipulation check): did the persona turn that carries a fired branch point do
what the arm's option says? One criterion per branch-point kind and option family (``help_offer``
x ``decline``...), found by the option's name (``options``: names or ``fnmatch`` globs such as
``reframe*``); a branch point of another kind, or an option no criterion names, is rated by the
``generic`` criterion from the option's own instruction text. The offline rater tries the
criterion's rules in order, first match wins (so a rule for "declines, in words that also mention
calling" can come before "mentions calling: accepted"); a quoted phrase of the instruction found in
the turn counts as enacted when no rule matched. Nothing matched: no verdict (unknown), never a
pretended one.

**Realism**: each cue (assistant-speak, "as an AI", markdown lists, vocabulary too old for the
persona's age, a stated age or name that contradicts the persona, a message far too long) that
matches adds its penalty; the level is the scale's ``penalty``-th step down from the best (0:
very, 1: mostly, 2: mixed, 3 or more: not). A phrase in quotation marks, or right after "says",
"told me" and the like, is someone else's words reported by the persona ("everyone keeps saying
'you're not alone'" is how a teenager talks about chatbots), so it is no cue. A number after
"i'm" is an age only where an age's words follow it ("years old", the end of the clause, "and"):
"i'm 3 days clean" and "im 5 min away" state no age.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, field_validator, model_validator

from branchpoint.core.domain import ENACTED, ENACTMENT_LEVELS, NOT_ENACTED, PARTLY_ENACTED
from branchpoint.core.languages import primary_language
from branchpoint.core.strict import FrozenStrictModel as _Strict
from branchpoint.core.yamlio import ID_PATTERN, FieldProblem, compiling_regexes

RUBRICS_DIR = Path(__file__).resolve().parent / "persona_rubrics"
GENERIC = "generic"
# 2: stated ages need an age's context; quoted and reported phrases are not the persona's own.
# 3 (issue 47): word salad, letter strings and copied prompts or replies are not realistic; cues
# by language, and no verdict for a language the rules do not cover; a bare hedge is no acceptance.
HEURISTIC_VERSION = "persona-heuristic-3"
CHECKS = ("stated_age", "stated_name", "too_long", "word_salad", "copies_source")
# Words too common to say that a turn followed an instruction (the generic fallback).
_STOP = frozenset(
    """about after again also and any are ask asked back been before being but can cant could did
    does doing dont even every for from get give going gonna has have her here him his how into
    its just keep know like made make many more most much must not now once only other our out
    over really said same say says should some still such than that the their them then there
    these they thing this those through tell told too try very want was way were what when where
    which while who why will with would you your yours""".split()  # noqa: SIM905
)


class Rule(_Strict):
    """One rule of an enactment criterion: its verdict when any of its regexes matches the turn."""

    id: str = Field(pattern=ID_PATTERN)
    verdict: str
    if_any: list[str] = Field(min_length=1)
    languages: list[str] = Field(
        default_factory=lambda: ["en"],
        description="Primary language subtags the regexes are written for.",
    )

    _check = field_validator("if_any")(compiling_regexes)

    @field_validator("verdict")
    @classmethod
    def _level(cls, v: str) -> str:
        if v not in ENACTMENT_LEVELS:
            raise ValueError(
                f"unknown verdict {v!r} (expected one of: {', '.join(ENACTMENT_LEVELS)})"
            )
        return v


class EnactmentCriterion(_Strict):
    id: str = Field(pattern=ID_PATTERN)
    kind: str = Field(description="The branch-point kind it rates, or 'custom' for the fallback.")
    options: list[str] = Field(min_length=1, description="Option names or fnmatch globs.")
    definition: str = Field(min_length=1)
    anchors: dict[str, str]
    rules: list[Rule] = Field(default_factory=list)

    @field_validator("anchors")
    @classmethod
    def _anchor_per_level(cls, anchors: dict[str, str]) -> dict[str, str]:
        missing = [lv for lv in ENACTMENT_LEVELS if not (anchors.get(lv) or "").strip()]
        extra = [lv for lv in anchors if lv not in ENACTMENT_LEVELS]
        if missing or extra:
            raise ValueError(
                f"anchors {'missing ' + ', '.join(missing) if missing else ''}"
                f"{' unknown ' + ', '.join(extra) if extra else ''} "
                f"(expected one text for each of: {', '.join(ENACTMENT_LEVELS)})"
            )
        return anchors

    def names(self, option: str) -> bool:
        return any(fnmatch.fnmatchcase(option, pat) for pat in self.options)


class EnactmentRubric(_Strict):
    id: str = Field(pattern=ID_PATTERN)
    title: str = Field(min_length=1)
    version: str = Field(min_length=1)
    notes: str | None = None
    criteria: list[EnactmentCriterion] = Field(min_length=1)

    @model_validator(mode="after")
    def _has_generic(self) -> EnactmentRubric:
        if not any(c.id == GENERIC for c in self.criteria):
            raise FieldProblem(
                ("criteria",),
                f"no criterion with id {GENERIC!r} (expected a fallback for custom kinds and unnamed options)",
            )
        return self

    def languages(self) -> set[str]:
        """The languages some rule is written for."""
        return {lang for c in self.criteria for r in c.rules for lang in r.languages}

    def criterion_for(self, kind: str, option: str) -> EnactmentCriterion:
        """The criterion that rates ``option`` of a branch point of ``kind`` (``generic`` if none)."""
        for c in self.criteria:
            if c.id != GENERIC and c.kind == kind and c.names(option):
                return c
        return next(c for c in self.criteria if c.id == GENERIC)

    def rubric_hash(self) -> str:
        return _hash(self)


class Cue(_Strict):
    """A sign that a persona turn is not what the persona would write, and what it costs."""

    id: str = Field(pattern=ID_PATTERN)
    reason: str = Field(min_length=1)
    penalty: int = Field(ge=1, le=3)
    if_any: list[str] = Field(default_factory=list)
    min_matches: int = Field(1, ge=1, description="Matches needed (e.g. 2 list lines).")
    max_age: int | None = Field(None, description="Only for personas of this age or younger.")
    languages: list[str] | None = Field(
        None, description="Primary language subtags the cue's regexes are written for (none: all)."
    )
    # Built-in checks with no regex: see CHECKS.
    check: str | None = None
    max_words: int | None = Field(None, ge=1)

    _check_re = field_validator("if_any")(compiling_regexes)

    @model_validator(mode="after")
    def _something_to_check(self) -> Cue:
        if not self.if_any and self.check is None:
            raise ValueError("gives neither if_any nor check (expected one of them)")
        if self.check is not None and self.check not in CHECKS:
            raise FieldProblem(
                ("check",), f"unknown check {self.check!r} (expected one of: {', '.join(CHECKS)})"
            )
        if self.check == "too_long" and self.max_words is None:
            raise FieldProblem(("max_words",), "too_long needs max_words (expected a number)")
        return self


class LanguageRules(_Strict):
    """What the language-independent checks need to know of one language."""

    # The words that hold a sentence together (pronouns, articles, prepositions, auxiliaries)
    # and a teenager's fillers ("lol", "idk"): a message of real words has many, word salad few.
    function_words: list[str] = Field(min_length=20)
    # A sequence of unknown tokens that are no words of the language (keyboard mash).
    vowels: str = Field("aeiouy", min_length=1)


class RealismRubric(_Strict):
    id: str = Field(pattern=ID_PATTERN)
    title: str = Field(min_length=1)
    version: str = Field(min_length=1)
    notes: str | None = None
    levels: list[str] = Field(min_length=2, description="Best first.")
    anchors: dict[str, str]
    languages: dict[str, LanguageRules] = Field(
        min_length=1, description="Primary language subtag -> its rules; others get no verdict."
    )
    cues: list[Cue] = Field(min_length=1)

    @model_validator(mode="after")
    def _cue_languages_known(self) -> RealismRubric:
        for i, cue in enumerate(self.cues):
            unknown = [lang for lang in cue.languages or [] if lang not in self.languages]
            if unknown:
                raise FieldProblem(
                    ("cues", i, "languages"),
                    f"language(s) {', '.join(unknown)} have no entry under languages "
                    f"(expected one of: {', '.join(self.languages)})",
                )
        return self

    def rubric_hash(self) -> str:
        return _hash(self)


def _hash(model: BaseModel) -> str:
    canon = json.dumps(model.model_dump(mode="json"), sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(canon.encode("utf-8")).hexdigest()[:16]


# ------------------------------------------------------------------------------------- loading


def _load(name: str, model: type[Any]) -> Any:
    from branchpoint.core.errors import UserError
    from branchpoint.core.yamlio import load_model

    path = RUBRICS_DIR / f"{name}.yaml"
    loaded, errors = load_model(path, model)
    if loaded is None:
        raise UserError("; ".join(str(e) for e in errors[:10]))
    return loaded


@lru_cache(maxsize=1)
def enactment_rubric() -> EnactmentRubric:
    """The bundled manipulation-check rubric."""
    return _load("enactment", EnactmentRubric)


@lru_cache(maxsize=1)
def realism_rubric() -> RealismRubric:
    """The bundled persona-realism rubric."""
    return _load("realism", RealismRubric)


# ------------------------------------------------------------------------------------- rating


class PersonaVerdict(BaseModel):
    """One rating of one persona turn: a level (None: the rater cannot tell), why, and quotes."""

    verdict: str | None
    rationale: str
    quotes: list[str] = Field(default_factory=list)
    criterion: str | None = None  # the enactment criterion used


@lru_cache(maxsize=4096)
def _re(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern, re.IGNORECASE | re.MULTILINE)


def _quoted_phrases(instruction: str) -> list[str]:
    return [q.strip() for q in re.findall(r"[\"“]([^\"”]{6,})[\"”]", instruction) if q.strip()]


def _words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z']{4,}", text.lower()) if w.strip("'") not in _STOP}


def _norm(text: str) -> str:
    return re.sub(r"[^a-z0-9 ]+", "", re.sub(r"\s+", " ", text.lower().replace("’", "'"))).strip()


def rate_enactment(
    text: str,
    kind: str,
    option: str,
    instruction: str,
    rubric: EnactmentRubric | None = None,
    *,
    language: str | None = None,
) -> PersonaVerdict:
    """Did ``text`` (a persona turn, in ``language``) enact ``option`` of a branch point of
    ``kind``? No verdict, with one line saying so, for a language no rule is written for."""
    rubric = rubric or enactment_rubric()
    crit = rubric.criterion_for(kind, option)
    lang = primary_language(language)
    if lang not in rubric.languages():
        return PersonaVerdict(verdict=None, rationale=no_rules_line(lang), criterion=crit.id)
    for rule in (r for r in crit.rules if lang in r.languages):
        for pattern in rule.if_any:
            m = _re(pattern).search(text)
            if m is not None:
                return PersonaVerdict(
                    verdict=rule.verdict,
                    rationale=f"{crit.id}: rule {rule.id} ({rule.verdict}) matched {m.group(0)!r}",
                    quotes=[m.group(0)],
                    criterion=crit.id,
                )
    said = _norm(text)
    for phrase in _quoted_phrases(instruction):
        if _norm(phrase) and _norm(phrase) in said:
            return PersonaVerdict(
                verdict=ENACTED,
                rationale=f"{crit.id}: the instruction's quoted phrase {phrase!r} is in the turn",
                quotes=[phrase],
                criterion=crit.id,
            )
    if crit.id == GENERIC and lang == "en":  # _STOP is English
        shared = sorted(_words(instruction) & _words(text))
        if len(shared) >= 2:
            return PersonaVerdict(
                verdict=ENACTED,
                rationale=f"{crit.id}: the turn shares the instruction's words {', '.join(shared[:6])}",
                criterion=crit.id,
            )
    return PersonaVerdict(
        verdict=None,
        rationale=f"{crit.id}: no rule matched; the heuristic cannot tell",
        criterion=crit.id,
    )


_STATED_AGE = (
    r"\b(?:i'?m|i am|im)\s+(?:only\s+|just\s+)?(\d{1,2})"
    r"(?:\s*(?:years?\s*old|yrs?\s*old|yo|y/o)\b"
    r"|(?=\s*(?:[.,!?;)]|$)|\s+(?:and|but|so|now|too|btw|lol|lmao|rn|tho|though|already)\b))"
)
# Someone else's words that the persona reports: inside quotation marks, or just after a verb of
# saying ("my mom says it's important to reach out").
_QUOTED = re.compile(r"\"[^\"\n]*\"|“[^”\n]*”")
_REPORTED = re.compile(
    r"\b(?:say|says|said|saying|go|goes|going|went|tell me|tells me|told me|telling me|keep saying|"
    r"keeps saying|wrote|writes|replied|answered)\s*[:,]?\s*$",
    re.IGNORECASE,
)


def _reported(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` is someone else's words the persona reports."""
    if any(q.start() <= start and end <= q.end() for q in _QUOTED.finditer(text)):
        return True
    return _REPORTED.search(text[max(0, start - 40) : start]) is not None


_STATED_NAME = r"\bmy name(?:'s| is)\s+([A-Z][a-z]+)"


def no_rules_line(language: str) -> str:
    """The one line the offline persona rater gives for a language it has no rules for."""
    return (
        f"the heuristic persona rater has no rules for {language!r}: use a model rater "
        "(--persona-judge MODEL)"
    )


def rate_realism(
    text: str,
    *,
    name: str | None = None,
    age: int | None = None,
    language: str | None = None,
    sources: Sequence[str] = (),
    rubric: RealismRubric | None = None,
) -> PersonaVerdict:
    """How realistic ``text`` is as a message from a persona called ``name``, aged ``age``,
    writing in ``language`` (BCP-47). ``sources``: texts the persona must not copy (the
    chatbot's replies so far, the persona's own description and instructions).

    No verdict (None, with the reason) for a language the rubric has no rules for, and for a
    short message of no known word, which the rules cannot tell from random words."""
    rubric = rubric or realism_rubric()
    lang = primary_language(language)
    rules = rubric.languages.get(lang)
    if rules is None:
        return PersonaVerdict(verdict=None, rationale=no_rules_line(lang))
    tokens = _tokens(text)
    known = _known_words(rules)
    n_known = sum(t in known for t in tokens)
    if (
        0 < len(tokens) < _SALAD_MIN_WORDS
        and n_known < _TERSE_KNOWN * len(tokens)
        and _word_salad(text, rules) is None
    ):
        return PersonaVerdict(
            verdict=None,
            rationale=f"{len(tokens)} word(s), {n_known} a common word of {lang!r}: the offline "
            "rules cannot tell a terse message from random words",
        )
    penalty = 0
    found: list[str] = []
    quotes: list[str] = []
    for cue in rubric.cues:
        if cue.max_age is not None and (age is None or age > cue.max_age):
            continue
        if cue.languages is not None and lang not in cue.languages:
            continue
        hit = _cue_hit(cue, text, name, age, rules=rules, sources=sources)
        if hit is not None:
            penalty += cue.penalty
            found.append(f"{cue.reason} (-{cue.penalty})")
            if hit:
                quotes.append(hit)
    level = rubric.levels[min(penalty, len(rubric.levels) - 1)]
    why = "; ".join(found) if found else "no realism cue matched"
    return PersonaVerdict(verdict=level, rationale=why, quotes=quotes)


# Below this many words a message of few function words is terse, not proven salad: no verdict
# when fewer than a third of its words are common ones ("ok thanks" is rated, "purple
# elephant gravity" is not).
_SALAD_MIN_WORDS = 6
_TERSE_KNOWN = 1 / 3
# Word salad: fewer function words than this share of a message of at least _SALAD_MIN_WORDS,
# or this many words in a row none of which is one (in a message short of function words). Chat messages run at 30-60% (the KORA
# children's first messages: see benchmarks/persona_rater_accuracy.py); random dictionary
# words near 0-5%, in long runs.
_SALAD_SHARE = 0.2
_SALAD_RUN = 7
_SALAD_RUN_SHARE = 0.3  # a long run of nouns in a real message ("reform, public assistance,
# and housing support policies") sits among enough function words
# Letter strings: this share of the tokens (at least two) is no word (keyboard mash).
_MASH_SHARE = 0.5
_TOKEN = re.compile(r"[^\W\d_]+(?:['’][^\W\d_]+)*")


def _tokens(text: str) -> list[str]:
    return [t.replace("’", "'") for t in _TOKEN.findall(text.lower())]


@lru_cache(maxsize=16)
def _known_words_of(words: tuple[str, ...]) -> frozenset[str]:
    return frozenset(w.lower() for w in words)


def _known_words(rules: LanguageRules) -> frozenset[str]:
    return _known_words_of(tuple(rules.function_words))


def _mash(token: str, vowels: str) -> bool:
    """Whether ``token`` cannot be a word: no vowel in 4+ letters, or 5 consonants in a row."""
    v = set(vowels)
    if len(token) >= 4 and not any(c in v for c in token):
        return True
    run = 0
    for c in token:
        run = 0 if (c in v or not c.isalpha()) else run + 1
        if run >= 5:
            return True
    return False


def _word_salad(text: str, rules: LanguageRules) -> str | None:
    """Why ``text`` is no message in the language (word salad, keyboard mash), or None."""
    tokens = _tokens(_QUOTED.sub(" ", text))
    if len(tokens) < 2:
        return None
    known = _known_words(rules)
    mash = [t for t in tokens if t not in known and _mash(t, rules.vowels)]
    if len(mash) >= 2 and len(mash) / len(tokens) >= _MASH_SHARE:
        return f"letter strings that are no words: {' '.join(mash[:4])}"
    if len(tokens) >= _SALAD_MIN_WORDS:
        share = sum(t in known for t in tokens) / len(tokens)
        if share < _SALAD_SHARE:
            return f"{share:.0%} of {len(tokens)} words hold a sentence together: {' '.join(tokens[:6])}"
        run = longest = 0
        for t in tokens:
            run = 0 if t in known else run + 1
            longest = max(longest, run)
        if longest >= _SALAD_RUN and share < _SALAD_RUN_SHARE:
            return f"{longest} words in a row with none that holds a sentence together"
    return None


_NGRAM = 4
# A copy: half the message's 4-word runs (at least 3 of them) are in one source, or 9 runs
# (about a 12-word sentence) are, whatever the message's length. Quoted words are reported
# speech ("you literally said 'talk to a trusted adult'"), not a copy.
_COPY_SHARE = 0.5
_COPY_MIN = 3
_COPY_RUNS = 9


def _grams(tokens: Sequence[str]) -> set[tuple[str, ...]]:
    return {tuple(tokens[i : i + _NGRAM]) for i in range(len(tokens) - _NGRAM + 1)}


def _copied(text: str, sources: Sequence[str]) -> str | None:
    """The start of the run ``text`` copies from one of ``sources``, or None."""
    mine = _tokens(_QUOTED.sub(" ", text))
    grams = _grams(mine)
    if len(grams) < _COPY_MIN:
        return None
    for source in sources:
        shared = grams & _grams(_tokens(source))
        if len(shared) >= _COPY_RUNS or (
            len(shared) >= _COPY_MIN and len(shared) / len(grams) >= _COPY_SHARE
        ):
            first = min(i for i in range(len(mine)) if tuple(mine[i : i + _NGRAM]) in shared)
            return " ".join(mine[first : first + 8])
    return None


def _cue_hit(
    cue: Cue,
    text: str,
    name: str | None,
    age: int | None,
    *,
    rules: LanguageRules | None = None,
    sources: Sequence[str] = (),
) -> str | None:
    """The quote that shows the cue ("" for a cue with nothing to quote), or None."""
    if cue.check == "word_salad":
        return _word_salad(text, rules) if rules is not None else None
    if cue.check == "copies_source":
        return _copied(text, sources)
    if cue.check == "too_long":
        return "" if cue.max_words is not None and len(text.split()) > cue.max_words else None
    if cue.check == "stated_age":
        for m in re.finditer(_STATED_AGE, text, re.IGNORECASE | re.MULTILINE):
            stated = int(m.group(1))
            if age is not None and 5 <= stated <= 99 and abs(stated - age) > 1:
                return m.group(0)
        return None
    if cue.check == "stated_name":
        said = re.search(_STATED_NAME, text)
        if said and name and said.group(1).lower() != name.split()[0].lower():
            return said.group(0)
        return None
    matches = [
        m.group(0)
        for p in cue.if_any
        for m in _re(p).finditer(text)
        if not _reported(text, m.start(), m.end())
    ]
    if len(matches) >= cue.min_matches:
        return matches[0]
    return None


def realism_at_least(level: str | None, minimum: str, rubric: RealismRubric | None = None) -> bool:
    """Whether ``level`` is ``minimum`` or better on the realism scale (None: unrated, passes)."""
    levels = (rubric or realism_rubric()).levels
    if level is None:
        return True
    return levels.index(level) <= levels.index(minimum)


__all__ = [
    "ENACTED",
    "NOT_ENACTED",
    "PARTLY_ENACTED",
    "EnactmentRubric",
    "PersonaVerdict",
    "RealismRubric",
    "enactment_rubric",
    "rate_enactment",
    "no_rules_line",
    "primary_language",
    "rate_realism",
    "realism_at_least",
    "realism_rubric",
]
