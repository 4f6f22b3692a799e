"""Column widths sized to the terminal and to the cells; the part of a value that tells rows apart."""

from __future__ import annotations

from branchpoint.tui.app.columns import (
    CELL_PADDING,
    SCROLLBAR,
    common_prefix,
    distinguishing_choices,
    fit_widths,
    usual_choices,
)


def test_widths_fit_the_terminal_and_widen_with_it() -> None:
    natural = [5, 24, 15, 20, 10, 9, 18]
    keep = [-1, 1, 3, 2, 1, -1, 0]
    narrow = fit_widths(natural, 80, keep=keep)
    assert sum(narrow) + CELL_PADDING * len(natural) + SCROLLBAR <= 80
    assert narrow[0] == 5 and narrow[5] == 9  # never cut
    assert narrow[2] == 15  # the choices give way last
    assert narrow[6] == 6  # the id first
    wide = fit_widths(natural, 160, keep=keep)
    assert wide == natural  # room for every cell
    # a long heading takes what room is left over
    assert fit_widths([5, 7], 160, wants=[0, 40])[1] == 40


def test_the_prefix_that_targets_share_is_dropped_at_a_separator() -> None:
    targets = ["litellm:openrouter/a/model-1", "litellm:openrouter/a/model-2"]
    assert common_prefix(targets) == "litellm:openrouter/a/"
    assert common_prefix(["scripted:target0", "scripted:target1"]) == "scripted:"
    assert common_prefix(["scripted:a", "scripted:a"]) == ""  # one value: shown whole


def test_choices_show_what_sets_a_row_apart() -> None:
    rows = [
        {"disclosure": "guarded", "help": "accept"},
        {"disclosure": "open", "help": "accept"},
        {"disclosure": "guarded", "help": "decline"},
    ]
    usual = usual_choices(rows)
    assert [distinguishing_choices(r, usual) for r in rows] == [
        "(usual)",
        "disclosure=open",
        "help=decline",
    ]
    assert (
        distinguishing_choices(rows[1], usual_choices(rows[1:2])) == "disclosure=open help=accept"
    )
