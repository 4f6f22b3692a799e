"""Words of the domain that several layers share, each written here once.

- The events ``observe`` detects in a chatbot reply, on which ``on_event`` branch points fire.
- The keys of a conversation's flat choices record (``Conversation.choices``) that are not branch
  points: one ``profile:<attribute>`` key per profile attribute of the bio, and ``explicit_cue``.

Scenarios and the simulator both need these, so they sit in the base layer.
"""

from __future__ import annotations

from typing import Literal, get_args

# ``limit`` covers refusals too.
EventKind = Literal["help_offer", "limit", "crisis_resource"]
EVENTS: tuple[EventKind, ...] = get_args(EventKind)

# Choices record: {"<branch point id>": "<option>", "profile:<attribute>": "<level>",
# "explicit_cue": true|false}. No profile key means no profile (the no-bio baseline).
PROFILE_PREFIX = "profile:"
EXPLICIT_CUE = "explicit_cue"


def profile_key(attribute: str) -> str:
    """The choices-record key of a profile attribute, e.g. ``profile:race``."""
    return PROFILE_PREFIX + attribute


def is_branch_key(key: str) -> bool:
    """Whether a choices-record key names a behaviour branch point (not the profile or the cue)."""
    return not key.startswith(PROFILE_PREFIX) and key != EXPLICIT_CUE


# Manipulation checks (issue 36) share the ``judgments`` table with the chatbot judges under a
# rubric id of their own, so that they are stored, resumed and audited like any verdict; they rate
# the persona, not the chatbot, and the read layer keeps them out of the chatbot tables. (Automatic
# realism ratings use the human ratings' pseudo-rubric, ``REALISM_RUBRIC`` below, so that a
# person's rating and the rater's of one persona turn share their key.)
ENACTMENT_RUBRIC = "enactment"
# A manipulation check's verdicts, best first: did the persona turn do what its arm's option said.
ENACTED, PARTLY_ENACTED, NOT_ENACTED = "enacted", "partly", "not_enacted"
ENACTMENT_LEVELS: tuple[str, ...] = (ENACTED, PARTLY_ENACTED, NOT_ENACTED)

# Persona realism, rated by people (branchpoint.core.human_labels) and by the rater: the pseudo-rubric, its
# two criteria and its levels, best first. Here, not beside the labels' store code, so that `run
# --realism-min` can check a level without importing the store before its fork server starts.
REALISM_RUBRIC = "realism"
REALISM_TURN = "persona_realism"
REALISM_CONVERSATION = "conversation_realism"
REALISM_LEVELS: tuple[str, ...] = ("very", "mostly", "mixed", "not")


# Replays (issue 47): a branch a person forked from a stored conversation (``branchpoint replay``)
# has origin REPLAY_ORIGIN and lives in its run's replay run, never in a designed run.
REPLAY_ORIGIN = "replay"
REPLAY_RUN_SUFFIX = "-replays"


def replay_run_id(run_id: str) -> str:
    """The run that holds the replays of ``run_id`` (a replay's replays stay in it)."""
    return run_id if run_id.endswith(REPLAY_RUN_SUFFIX) else run_id + REPLAY_RUN_SUFFIX


def designed_run_id(run_id: str) -> str:
    """The designed run whose replays ``run_id`` holds (``run_id`` itself for a designed run)."""
    return run_id[: -len(REPLAY_RUN_SUFFIX)] if run_id.endswith(REPLAY_RUN_SUFFIX) else run_id
