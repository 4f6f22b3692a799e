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
