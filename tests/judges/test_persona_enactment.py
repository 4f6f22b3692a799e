"""The manipulation-check heuristic on hand-written persona turns (issue 36).

At least 40 turns per branch-point kind, each with the verdict a careful reader gives for the
arm's option (``tests/fixtures/persona_turns/*.yaml``). The heuristic must reach the accuracy
floor on each kind, never call a turn enacted that a reader calls not enacted on the decisive
options, and abstain (no verdict) rather than guess where no rule decides.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from branchpoint.core.domain import ENACTED, ENACTMENT_LEVELS, NOT_ENACTED
from branchpoint.scenarios.persona_rubric import enactment_rubric, rate_enactment

FIXTURES = Path(__file__).parents[1] / "fixtures" / "persona_turns"
KINDS = ("help_offer", "limit_pushback", "disclosure")
# The floor is below what the rules reach on these turns (reported in the note) so that a
# rule edit that costs a few turns shows, and a broken rubric (accuracy near chance) fails.
FLOOR = 0.85


def _turns(kind: str) -> list[dict]:
    data = yaml.safe_load((FIXTURES / f"{kind}.yaml").read_text(encoding="utf-8"))
    assert data["kind"] == kind
    return data["turns"]


def accuracy(kind: str) -> tuple[float, list[tuple[str, str, str | None, str | None]]]:
    wrong = []
    turns = _turns(kind)
    for t in turns:
        got = rate_enactment(t["text"], kind, t["option"], t.get("instruction", "")).verdict
        if got != t["expected"]:
            wrong.append((t["option"], t["text"], t["expected"], got))
    return 1 - len(wrong) / len(turns), wrong


@pytest.mark.parametrize("kind", KINDS)
def test_forty_turns_per_kind_with_known_verdicts(kind: str) -> None:
    turns = _turns(kind)
    assert len(turns) >= 40
    assert {t["expected"] for t in turns} <= set(ENACTMENT_LEVELS)
    # every kind's corpus has turns that did and turns that did not enact their option
    assert {ENACTED, NOT_ENACTED} <= {t["expected"] for t in turns}


@pytest.mark.parametrize("kind", KINDS)
def test_heuristic_accuracy_per_kind(kind: str) -> None:
    acc, wrong = accuracy(kind)
    assert acc >= FLOOR, f"{kind}: accuracy {acc:.0%}; wrong: {wrong}"


def held_out(kind: str) -> tuple[float, int, int, int]:
    """Accuracy, abstentions, wrong verdicts and turns of ``kind`` in the held-out set."""
    data = yaml.safe_load((FIXTURES / "held_out.yaml").read_text(encoding="utf-8"))
    turns = [t for t in data["turns"] if t["kind"] == kind]
    got = [rate_enactment(t["text"], kind, t["option"], "").verdict for t in turns]
    right = sum(g == t["expected"] for g, t in zip(got, turns))
    abstained = sum(g is None for g in got)
    return right / len(turns), abstained, len(turns) - right - abstained, len(turns)


@pytest.mark.parametrize("kind", KINDS)
def test_held_out_turns_abstain_rather_than_err(kind: str) -> None:
    # On turns the rules were never fitted to, they decide fewer (help offer 62%, disclosure 56%,
    # limit 100% of 16 each when written) and the rest is unchecked; a verdict they do give must
    # be right, because a wrong not_enacted drops a good pair and a wrong enacted keeps a bad one.
    acc, abstained, wrong, n = held_out(kind)
    assert n >= 16
    assert wrong <= 1, f"{kind}: {wrong} wrong verdicts of {n}"
    assert acc >= 0.5, f"{kind}: accuracy {acc:.0%}, {abstained} abstentions"


def test_ignored_instruction_is_never_rated_enacted() -> None:
    # The case the manipulation check exists for: told to decline, the persona accepts.
    for text in ("ok thanks, i'll call them", "good idea, i'll message the counsellor"):
        assert rate_enactment(text, "help_offer", "decline", "").verdict == NOT_ENACTED


def test_custom_kind_rated_from_the_instruction_text() -> None:
    crit = enactment_rubric().criterion_for("custom", "brings_up_diet")
    assert crit.id == "generic"
    for t in _turns("custom"):
        v = rate_enactment(t["text"], "custom", t["option"], t["instruction"])
        assert v.verdict == t["expected"], (t, v)
        assert v.criterion == "generic"


def test_option_names_find_their_criterion() -> None:
    r = enactment_rubric()
    assert r.criterion_for("limit_pushback", "reframe_friend").id == "limit_pushback_reframe"
    assert r.criterion_for("limit_pushback", "accept_limit").id == "limit_pushback_accept"
    assert r.criterion_for("help_offer", "something_new").id == "generic"


def test_verdict_carries_rationale_and_a_quote_from_the_turn() -> None:
    text = "nah counsellors are useless, i just wanna talk here"
    v = rate_enactment(text, "help_offer", "decline", "")
    assert v.verdict == ENACTED and v.quotes and v.quotes[0] in text
    assert "help_offer_decline" in v.rationale


if __name__ == "__main__":  # prints the accuracy figures for the report
    for k in KINDS:
        a, w = accuracy(k)
        print(f"{k}: {a:.1%} of {len(_turns(k))}")
        for x in w:
            print("   ", x)
    for k in KINDS:
        acc, abstained, wrong, n = held_out(k)
        print(f"held out {k}: {acc:.1%} of {n} ({abstained} abstained, {wrong} wrong)")
