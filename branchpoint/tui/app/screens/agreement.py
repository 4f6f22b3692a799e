"""Agreement between people and judges on what has been labelled so far: per rater pair and
criterion, quadratic weighted kappa, Krippendorff's alpha, and the direction of disagreement;
below, per judge x target x condition x criterion, the judge-corrected failure rate
(``branchpoint.analysis.judge_correction.estimators``, PPI++) from the blind labels of the labelling design, how many
labels there are and how many more a +/- 5 point interval needs. The corrected table is computed
in its own worker (it reads every judged turn), so the agreement table does not wait for it.

The statistics are ``branchpoint.analysis.raters.agreement``'s, the same as ``branchpoint report``. pandas and that
module are imported here, in the worker, the first time this screen opens, never at app start;
only the judgments of labelled conversations are read.
"""

from __future__ import annotations

import math
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from branchpoint.core.read.browse import criterion_labels, labelled_judgments
from branchpoint.tui.app.context import AppContext
from branchpoint.tui.app.safe_text import one_line

# (column of branchpoint.analysis.raters.agreement's pair table, heading); columns it lacks are left out
COLUMNS = (
    ("rater_a", "rater a"),
    ("rater_b", "rater b"),
    ("criterion_id", "criterion"),
    ("n_items", "n"),
    ("raw_agreement", "agree"),
    ("kappa_quadratic", "kappa_w"),
    ("alpha_nominal", "alpha"),
    ("under", "under"),
    ("over", "over"),
)


CORRECTED_HEADS = (
    "judge", "target", "condition", "criterion", "labels", "more", "corrected", "judge only",
)  # fmt: skip


def _rate(value: Any, low: Any = None, high: Any = None) -> Text:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return Text("-")
    if low is None or (isinstance(low, float) and math.isnan(low)):
        return Text(f"{100 * value:.1f}%")
    return Text(f"{100 * value:.1f}% ({100 * low:.1f}-{100 * high:.1f})")


def corrected_cells(row: dict[str, Any]) -> list[Text]:
    corrected = (
        one_line(f"n/a: {row['note']}", 40)
        if row.get("note")
        else _rate(row["corrected"], row["corrected_low"], row["corrected_high"])
    )
    return [
        one_line(row["judge"], 24),
        one_line(row["target"], 28),
        one_line(row["condition"], 16),
        one_line(row["criterion_id"], 28),
        Text(str(row["n_labelled"])),
        Text(str(row["labels_more"])),
        corrected,
        _rate(row["judge_rate"], row.get("judge_low"), row.get("judge_high")),
    ]


def cell(value: Any) -> Text:
    if isinstance(value, float):
        return Text("-" if math.isnan(value) else f"{value:.3f}")
    return one_line(value, 28)


class AgreementScreen(Screen[None]):
    DEFAULT_CSS = """
    AgreementScreen #summary { height: auto; padding: 0 1; background: $panel; }
    AgreementScreen #pairs { height: 1fr; }
    AgreementScreen #corrected-note { height: auto; padding: 0 1; background: $panel; }
    AgreementScreen #corrected { height: 1fr; }
    """
    BINDINGS = [Binding("escape,q", "app.pop_screen", "back")]
    WIDGET_KEYS = (("up, down, pageup, pagedown, home, end", "move in the table"),)

    def __init__(self, run_id: str | None = None) -> None:
        super().__init__()
        self.run_id = run_id
        self.pairs: list[dict[str, Any]] = []

    @property
    def bp_app(self) -> AppContext:
        return self.app  # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(Text("computing agreement ..."), id="summary")
        yield DataTable(id="pairs", cursor_type="row", zebra_stripes=True)
        yield Static(Text("computing judge-corrected rates ..."), id="corrected-note")
        yield DataTable(id="corrected", cursor_type="row", zebra_stripes=True)
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        # The corrected rates start once the agreement table is drawn (``_show``): their pass over
        # every judged item (and importing ppi-python) would hold the GIL the table waits for.
        self.compute()

    @work(thread=True, exclusive=True, group="corrected")
    def compute_corrected(self) -> None:
        from branchpoint.analysis.judge_correction.estimators import (
            ALL,
            DEFAULT_WIDTH,
            judge_corrected,
        )

        result = judge_corrected(self.bp_app.store, self.run_id)
        if result.empty:
            self.app.call_from_thread(self._show_corrected, [], result.notes[0])
            return
        cells = result.table[result.table["condition"] != ALL]
        note = (
            f"judge-corrected failure rates (PPI++, 95%, design {result.design_id}); "
            f"more: labels still needed for +/- {DEFAULT_WIDTH:g} points"
        )
        self.app.call_from_thread(self._show_corrected, cells.to_dict("records"), note)

    def _show_corrected(self, rows: list[dict[str, Any]], note: str) -> None:
        self.query_one("#corrected-note", Static).update(Text(note))
        table = self.query_one("#corrected", DataTable)
        table.clear(columns=True)
        if not rows:
            return
        for head in CORRECTED_HEADS:
            table.add_column(head)
        for row in rows:
            table.add_row(*corrected_cells(row))

    @work(thread=True, exclusive=True, group="agreement")
    def compute(self) -> None:
        import pandas as pd

        from branchpoint.analysis.raters.agreement import agreement_report

        store = self.bp_app.store
        labels = pd.DataFrame(criterion_labels(store, self.run_id))
        judgments = pd.DataFrame(labelled_judgments(store, self.run_id))
        if labels.empty or judgments.empty:
            self.app.call_from_thread(self._show, [], "no human labels on judged turns yet")
            return
        result = agreement_report(judgments, labels, judge_vs_judge=False)
        rows = result.pairs.to_dict("records") if not result.pairs.empty else []
        note = (
            f"{len(labels)} labels by {labels['annotator'].nunique()} annotator(s); "
            "under/over: rater a saw less/more risk than rater b"
        )
        self.app.call_from_thread(self._show, rows, note)

    def _show(self, rows: list[dict[str, Any]], note: str) -> None:
        self.pairs = rows
        self.query_one("#summary", Static).update(Text(note))
        self.compute_corrected()
        table = self.query_one("#pairs", DataTable)
        table.clear(columns=True)
        present = [(key, head) for key, head in COLUMNS if not rows or key in rows[0]]
        for _, head in present:
            table.add_column(head)
        for row in rows:
            table.add_row(*(cell(row.get(key)) for key, _ in present))
