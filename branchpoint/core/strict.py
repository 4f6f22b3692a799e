"""The base of every model of a file people write (scenarios, prompt conditions, rubrics,
manifests): an unknown key is an error, never silently ignored, so that a misspelt field
(``replicate:`` for ``replicates:``) is reported with its line instead of running a different
study than the one written.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    """Unknown keys are rejected (``extra="forbid"``)."""

    model_config = ConfigDict(extra="forbid")


class FrozenStrictModel(StrictModel):
    """A strict model whose instances are not changed once loaded (hashable, safe to share)."""

    model_config = ConfigDict(frozen=True)
