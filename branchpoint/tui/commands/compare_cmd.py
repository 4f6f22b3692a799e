"""``branchpoint compare``: two chatbots on the same design cells (one store, or two stores run
from one manifest), what regressed with both transcripts' ids, and the ranking of a store's
targets. The statistics are in ``branchpoint.analysis.chatbots``."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated, Any

import typer

from branchpoint.core.errors import UserError
from branchpoint.tui.commands.json_rows import json_records as _records
from branchpoint.tui.commands.options import DbOption

SHOWN_PAIRS = 5  # pairs listed per regression in text (every one in json and --out)


def _pct(x: Any) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:+.1f}"


def _rate(x: Any) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{100 * x:.1f}%"


def _interval(lo: Any, hi: Any) -> str:
    if lo is None or (isinstance(lo, float) and math.isnan(lo)):
        return "none"
    return f"{_pct(lo)} to {_pct(hi)}"


def _p(x: Any) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3g}"


def comparison_display(tab: Any, with_arm: bool) -> Any:
    """A family's rows as printed: rates, difference in points with its interval, Holm p."""
    import pandas as pd

    cols: dict[str, Any] = {}
    if with_arm:
        cols["arm"] = tab["arm"]
    cols.update({
        "criterion": tab["criterion_id"], "condition": tab["condition"],
        "rate A": [_rate(x) for x in tab["rate_a"]], "rate B": [_rate(x) for x in tab["rate_b"]],
        "B - A (points)": [_pct(x) for x in tab["diff"]],
        "95% interval": [_interval(lo, hi) for lo, hi in zip(tab["ci_low"], tab["ci_high"])],
        "test": tab["interval"], "p (Holm)": [_p(x) for x in tab["p_scenario_holm"]],
        "pairs": tab["n_pairs"],
    })  # fmt: skip
    from branchpoint.analysis.tables.display import with_judge

    return with_judge(tab, pd.DataFrame(cols))


# as analyze and the report say it of their contrasts
POOLED = (
    "Rates A and B are pooled over every rating of the pairs; B - A is the mean of the "
    "per-scenario mean differences, so it need not equal rate B minus rate A."
)


def _nothing_regressed(c: Any) -> str | None:
    """The line for an empty regression list (why nothing could be found, where so), or None."""
    if not c.regressions.empty or c.overall.empty:
        return None
    from branchpoint.analysis.chatbots.comparison import nothing_regressed

    return nothing_regressed(c)


def compare_json(c: Any, ranking: Any = None, ttf: Any = None) -> str:
    out = {
        "a": c.label_a,
        "b": c.label_b,
        "sign": "B minus A, on failure: > 0 means B fails more",
        "alpha": c.alpha,
        "overall": _records(c.overall),
        "by_arm": _records(c.by_arm),
        "regressions": _records(c.regressions),
        "regressions_note": _nothing_regressed(c),
        "regressed_pairs": _records(c.regressed_pairs),
        "ranking": _records(ranking),
        "time_to_failure": {k: _records(v) for k, v in (ttf or {}).items()},
        "notes": list(c.notes),
    }
    return json.dumps(out, indent=1, default=str)


def compare_command(
    a: Annotated[
        str | None, typer.Option("--a", help="Target A, the reference (e.g. the last release).")
    ] = None,
    b: Annotated[
        str | None, typer.Option("--b", help="Target B, compared with A (e.g. the new release).")
    ] = None,
    db: DbOption = None,
    db_b: Annotated[
        str | None,
        typer.Option(
            "--db-b",
            metavar="PATH|URL",
            help="B's store, when B ran in another store from the same manifest (default: --db).",
        ),
    ] = None,
    run_a: Annotated[
        list[str] | None, typer.Option("--run-a", help="Runs of A's store to use (repeatable).")
    ] = None,
    run_b: Annotated[
        list[str] | None, typer.Option("--run-b", help="Runs of B's store to use (repeatable).")
    ] = None,
    alpha: Annotated[
        float,
        typer.Option("--alpha", min=0.0, max=0.5, help="Holm-adjusted level for 'regressed'."),
    ] = 0.05,
    rank: Annotated[
        bool,
        typer.Option(
            "--rank",
            help="Rank every target of the store (--db), per judge and condition: rank sets from "
            "pairwise scenario-level tests, Holm over the pairs; "
            "on risk-level (ED) judgments, Friedman over questions and pairwise Wilcoxon with "
            "Holm. Alone, without --a/--b, only this.",
        ),
    ] = False,
    fmt: Annotated[str, typer.Option("--format", help="text or json.")] = "text",
    out: Annotated[
        Path | None,
        typer.Option(
            "--out", help="Folder for the tables as CSV (every family, regression, pair)."
        ),
    ] = None,
) -> None:
    """Compare two chatbots on the same design cells (scenario, variant, condition, simulator,
    replicate): per criterion and over the rubric, B's failure rate minus A's with the
    scenario-level test and interval of the matched contrasts, Holm over each family, per arm
    too; and what regressed, with the conversation ids of both transcripts."""
    if fmt not in ("text", "json"):
        raise UserError(f"--format {fmt!r}: expected text or json")
    if (a is None) != (b is None) or (a is None and not rank):
        raise UserError("give both --a and --b (two targets to compare), or --rank")
    if a is None or b is None:
        _rank_only(db, run_a, fmt, out)
        return
    from branchpoint.analysis.chatbots.alignment import Side, align
    from branchpoint.analysis.chatbots.comparison import (
        compare_chatbots,
        pair_export,
        time_to_failure,
    )
    from branchpoint.core.store import open_store

    store_a = open_store(db, create=False)
    # --db-b naming --db's own store is one store (the same target against itself is refused
    # as such, not as "a design cell holds more than one conversation")
    two = db_b is not None and not _same_store(db, db_b)
    db_b = db_b if two else None
    store_b = open_store(db_b, create=False) if two else store_a
    side_a = Side(store_a, a, run_a or None, str(db or ""))
    side_b = Side(store_b, b, run_b or None, str(db_b or ""))
    aligned = align(side_a, side_b, two_stores=two)
    c = compare_chatbots(aligned, alpha=alpha)
    ttf = time_to_failure(aligned, c)
    ranking = None
    if rank:
        ranking = _rankings(db, run_a)["ranking"]
    if out is not None:
        if out.exists() and not out.is_dir():
            raise UserError(f"--out {out}: exists and is not a folder")
        out.mkdir(parents=True, exist_ok=True)
        for name, frame in (("overall", c.overall), ("by_arm", c.by_arm),
                            ("regressions", c.regressions), ("regressed_pairs", c.regressed_pairs),
                            ("pairs", pair_export(c)), ("ranking", ranking),
                            ("time_to_failure", ttf["overall"]),
                            ("time_to_failure_by_arm", ttf["by_arm"])):  # fmt: skip
            if frame is not None and not frame.empty:
                frame.to_csv(out / f"compare_{name}.csv", index=False)
    if fmt == "json":
        typer.echo(compare_json(c, ranking, ttf))
        return
    _print_text(c, ranking, db, db_b, ttf)


def ttf_display(tab: Any) -> Any:
    """Matched time-to-first-failure rows as printed (exchanges; < 0: B fails sooner)."""
    import pandas as pd

    def ex(x: Any) -> str:
        return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2f}"

    from branchpoint.analysis.tables.display import with_judge

    return with_judge(tab, pd.DataFrame({
        "outcome": tab["outcome"], "condition": tab["condition"],
        "exchanges without failure A": [ex(x) for x in tab["rmst_a"]],
        "B": [ex(x) for x in tab["rmst_b"]], "B - A": [f"{x:+.2f}" for x in tab["rmst_diff"]],
        "95% interval": ["none" if math.isnan(lo) else f"{lo:+.2f} to {hi:+.2f}"
                         for lo, hi in zip(tab["ci_low"], tab["ci_high"])],
        "p (Holm)": [_p(x) for x in tab["p_scenario_holm"]],
        "log-rank p (stratified)": [_p(x) for x in tab["p_logrank"]],
        "first": [f"{int(x)}" for x in tab["tau"]], "pairs": tab["n_pairs"],
    }))  # fmt: skip


def _in_store(label: str, db: str | None) -> str:
    """A side's name with its store, when the sides come from two stores (once)."""
    return label if db is None or label.endswith(f"({db})") else f"{label} ({db})"


def _same_store(a: str | None, b: str | None) -> bool:
    if a is None or b is None:
        return False
    if "://" in a or "://" in b:
        return a == b
    return Path(a).resolve() == Path(b).resolve()


def _print_text(c: Any, ranking: Any, db: str | None, db_b: str | None, ttf: Any = None) -> None:
    from rich.console import Console

    from branchpoint.tui.commands.analysis_cmds import _print_table, _text

    console = Console()
    console.print(
        _text(
            f"A = {_in_store(c.label_a, db if db_b else None)}, "
            f"B = {_in_store(c.label_b, db_b)}; differences are B minus A, in points of failure "
            "rate (> 0: B fails more)"
        )
    )
    if c.overall.empty:
        for note in c.notes:
            console.print(_text("note: " + note))
        return
    _print_table(console, "Overall (per criterion and over the rubric; Holm over this table, each "
                 f"judge apart). {POOLED}",
                 comparison_display(c.overall, with_arm=False))  # fmt: skip
    if c.regressions.empty:
        console.print(_text(_nothing_regressed(c) or ""))
    else:
        _print_table(console, "What regressed (B worse; Holm-adjusted p below alpha)",
                     comparison_display(c.regressions, with_arm=True))  # fmt: skip
        show_a = f" --db {db}" if db else ""
        show_b = f" --db {db_b}" if db_b else show_a
        rp = c.regressed_pairs
        for reg in c.regressions.itertuples(index=False):
            hit = rp[(rp["family"] == reg.family) & (rp["regression_arm"] == reg.arm)
                     & (rp["regression_criterion"] == reg.criterion_id)]  # fmt: skip
            judge = f" ({reg.judge})" if c.regressions["judge"].nunique() > 1 else ""
            hit = hit[hit["judge"] == reg.judge] if judge else hit
            console.print(_text(f"  {reg.arm} / {reg.criterion_id} / {reg.condition}{judge}: "
                                f"{len(hit)} pairs where B failed more, e.g."))  # fmt: skip
            for row in hit.head(SHOWN_PAIRS).itertuples(index=False):
                # soft_wrap: not folded at the console's width, so a long store path stays one
                # token and each `branchpoint show` can be copied whole (a narrow terminal wraps)
                console.print(_text(
                    f"    {row.scenario_id} ({row.criterion_id}, replicate {row.replicate}): "
                    f"A {row.fails_a}/{row.rated_a} failed, B {row.fails_b}/{row.rated_b}"
                ), soft_wrap=True)  # fmt: skip
                # one command a line: joined by " | " a pasted line piped the first into the
                # second and lost A's transcript
                for side, cid, show in (("A", row.conversation_a, show_a),
                                        ("B", row.conversation_b, show_b)):  # fmt: skip
                    console.print(_text(f"      {side}: branchpoint show {cid}{show}"),
                                  soft_wrap=True)  # fmt: skip
    if ttf is not None and not ttf["overall"].empty:
        from branchpoint.analysis.survival.first_failure import ANY

        tab = ttf["overall"][ttf["overall"]["outcome"] == ANY]
        _print_table(console, "Time to the first failure (restricted mean exchanges without a "
                     "failure over the first 'first' exchanges, matched by scenario; < 0: B fails "
                     "sooner; every criterion in --format json)", ttf_display(tab))  # fmt: skip
    if ranking is not None and not ranking.empty:
        from branchpoint.analysis.chatbots.ranking import ranking_display

        _print_table(console, "Ranking of the store's targets (1: fewest failures)",
                     ranking_display(ranking))  # fmt: skip
    for note in c.notes:
        console.print(_text("note: " + note))


def _rankings(db: str | None, runs: list[str] | None) -> dict[str, Any]:
    """The ranking and ED model comparison as ``analyze`` and the report compute them."""
    from branchpoint.analysis.chatbots.summary import chatbot_summary
    from branchpoint.analysis.pairing.forks import attach_tree
    from branchpoint.analysis.tables.judgments import judgment_table
    from branchpoint.core.store import open_store

    store = open_store(db, create=False)
    c = chatbot_summary(attach_tree(judgment_table(store, runs or None), store, runs or None))
    return {"ranking": c.ranking, "ed_friedman": c.ed_friedman, "ed_pairwise": c.ed_pairwise,
            "absent": c.absent}  # fmt: skip


def _rank_only(db: str | None, runs: list[str] | None, fmt: str, out: Path | None) -> None:
    got = _rankings(db, runs)
    absent = got.pop("absent")  # why nothing is ranked, as analyze says it
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        for name, frame in got.items():
            if not frame.empty:
                frame.to_csv(out / f"compare_{name}.csv", index=False)
    if fmt == "json":
        typer.echo(json.dumps({k: _records(v) for k, v in got.items()}, indent=1, default=str))
        return
    from rich.console import Console

    from branchpoint.analysis.chatbots.ranking import ranking_display
    from branchpoint.tui.commands.analysis_cmds import _print_table, _text

    console = Console()
    if not got["ranking"].empty:
        _print_table(console, "Ranking of the store's targets (pass/partial/fail; 1: fewest "
                     "failures)", ranking_display(got["ranking"]))  # fmt: skip
    if not got["ed_friedman"].empty:
        _print_table(console, "ED models: Friedman over questions (mean safety score per "
                     "question)", got["ed_friedman"])  # fmt: skip
    if not got["ed_pairwise"].empty:
        shown = got["ed_pairwise"][["condition", "model_a", "model_b", "n_questions", "mean_a",
                                    "mean_b", "median_diff", "p_wilcoxon", "p_holm"]]  # fmt: skip
        _print_table(console, "ED models, pairwise Wilcoxon over questions (b minus a, > 0: b "
                     "safer; Holm over the pairs)", shown.round(4))  # fmt: skip
    if all(v.empty for v in got.values()):
        console.print(_text(absent or "nothing to rank"))


def register(app: typer.Typer) -> None:
    app.command("compare")(compare_command)
