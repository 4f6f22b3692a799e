"""What a screen may ask of the app: the store, who labels, sample settings, and where to go next.

Screens reach the app through this protocol rather than importing ``branchpoint.tui.app.app`` (which imports
every screen), and open each other through it rather than importing each other, so that the
screens import one way only: the app knows the screens; a screen knows none of them.
"""

from __future__ import annotations

from typing import Protocol

from branchpoint.core.store import Store


class AppContext(Protocol):
    store: Store
    annotator: str
    page_size: int
    sample_size: int
    seed: int

    def open_transcript(self, conversation_id: str, judge: str | None = None) -> None: ...

    def open_compare(
        self, conversation_id: str, judge: str | None = None, across: str = "arms"
    ) -> None: ...

    def open_label_sample(self, run_id: str | None, judge: str | None) -> None: ...

    def open_label_conversations(self, conversation_ids: list[str]) -> None: ...

    def open_realism(self, run_id: str | None) -> None: ...

    def open_live(self, run_id: str | None) -> None: ...

    def open_agreement(self, run_id: str | None) -> None: ...
