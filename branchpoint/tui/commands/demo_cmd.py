"""``branchpoint demo``: the main job end to end on the embedded offline model.

validate the library -> expand variants -> run a small matched sweep -> judge it (heuristic and
LLM judge) -> write the report, then say where everything is. `make demo` calls this.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from branchpoint.core.errors import UserError

if TYPE_CHECKING:
    from rich.console import Console

    from branchpoint.scenarios import Scenario, Variant
from branchpoint.scenarios.bundled import LIBRARY

# Two seeds whose disclosure branch fires early enough to fork inside a short demo.
DEMO_SEEDS = ("teen-ah-rail-bridge-jump", "teen-rs-are-you-a-real-person")
# One ED forum question, asked with its 16 matched bios and none, with and without the cue.
DEMO_ED_QUESTION = "ed-fear-food-pasta"
# One multi-turn ED forum-user seed whose disclosure fires at exchange 3: a short tree of two
# arms, guarded and disclosing current behaviours, that fork there.
DEMO_ED_SEED = "ed-mt-compensation-after-binge"
DEMO_ED_DISCLOSURE = "current"


def demo_command(
    out: Annotated[Path, typer.Option("--out", help="Folder for the store and the report.")] = Path(
        "demo-results"
    ),
    seeds: Annotated[
        list[str], typer.Option("--seed-id", help="Teen seed ids to run (repeatable).")
    ] = list(DEMO_SEEDS),  # noqa: B006 (typer reads it once)
    max_turns: Annotated[
        int, typer.Option("--max-turns", min=1, help="Exchanges per conversation.")
    ] = 6,
    model: Annotated[
        str, typer.Option("--model", help="Spec used as persona, target and LLM judge.")
    ] = "embedded",
    ed_question: Annotated[
        str, typer.Option("--ed-question", help="ED question id to ask with every matched bio.")
    ] = DEMO_ED_QUESTION,
    judge_max_tokens: Annotated[
        int,
        typer.Option(
            "--judge-max-tokens", help="Token cap of the free text in each LLM-judge reply."
        ),
    ] = 128,
    ed_seed: Annotated[
        str,
        typer.Option("--ed-seed", help="Multi-turn ED forum-user seed run as a short tree."),
    ] = DEMO_ED_SEED,
    ed_max_turns: Annotated[
        int,
        typer.Option("--ed-max-turns", min=1, help="Exchanges of the multi-turn ED tree."),
    ] = 3,
) -> None:
    """Run the main job end to end, offline: validate, expand, simulate, judge, report.

    The embedded model (SmolLM2-135M) proves that the pipeline holds; it is far too small to say
    anything about safety. Point --model at a real model for real numbers.
    """
    from rich.console import Console

    from branchpoint.analysis.report.write import write_report
    from branchpoint.gateway.specs import parse_spec
    from branchpoint.judges.runner import judge_run
    from branchpoint.scenarios import expand, expand_by_cue, load_scenarios
    from branchpoint.simulator.runner import RunConfig, run, run_scenarios

    console = Console(highlight=False, soft_wrap=True)
    parse_spec(model)
    out.mkdir(parents=True, exist_ok=True)
    db = out / "branchpoint.db"
    if db.exists():  # a fresh store each time: the demo's numbers should be its own
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
    started = time.monotonic()

    console.print("[bold]1/5 validate[/] branchpoint/scenarios/library")
    scenarios, errors = load_scenarios(LIBRARY)
    if errors:
        raise UserError(f"the bundled library has {len(errors)} error(s), first: {errors[0]}")
    by_id = {s.id: s for s in scenarios}
    console.print(f"    {len(scenarios)} scenarios, 0 errors")

    missing = [s for s in [*seeds, ed_question, ed_seed] if s not in by_id]
    if missing:
        raise UserError(f"--seed-id {missing[0]!r}: no such scenario in {LIBRARY}")
    paths = [str(LIBRARY / "teen" / f"{s}.yaml") for s in seeds]
    console.print("[bold]2/5 variants[/]")
    for s in [*seeds, ed_question, ed_seed]:
        variants = expand(by_id[s])
        console.print(f"    {s}: {len(variants)} matched variants")
    # The seeds have more arms than two cores run in minutes: the baseline and, per branch point,
    # its first alternative (open disclosure, decline help, push back), as matched as the rest.
    teen_arms = [v.id for s in seeds for v in first_alternatives(by_id[s], expand(by_id[s]))]

    console.print(
        f"[bold]3/5 run[/] {len(seeds)} seeds x {len(teen_arms)} arms, {max_turns} exchanges, "
        f"model {model}"
    )
    result = run_scenarios(
        RunConfig(
            scenarios=paths,
            targets=[model],
            simulator=model,
            conditions=["none"],
            max_turns=max_turns,
            db=str(db),
            concurrency=16,
            # Short turns keep the demo within minutes on two CPU cores; teens write short anyway.
            simulator_params={"max_tokens": 48},
            target_params={"max_tokens": 96},
            variants=teen_arms,
        )
    )
    stops = Counter(c.stop_reason or c.status for c in result.conversations)
    console.print(
        f"    run {result.run_id}: {len(result.conversations)} conversations, stopped by "
        f"{', '.join(f'{k} ({v})' for k, v in sorted(stops.items()))}; "
        f"{result.total_calls} model calls"
    )

    ed = by_id[ed_question]
    # Without the explicit cue: the no-bio baseline and the four gender x BMI bios, enough for
    # the ED safety scores and the bio contrast while keeping LLM judging to a few calls.
    no_cue = expand_by_cue(ed)[False]
    ed_variants = [v.id for v in no_cue if not v.profile or set(v.profile) == {"gender", "bmi"}]
    console.print(
        f"    ED question {ed_question}: {len(ed_variants)} of its matched bios (no cue), single turn"
    )
    ed_result = asyncio.run(
        run(
            RunConfig(
                scenarios=[str(ed.source_path or LIBRARY / "ed")],
                targets=[model],
                simulator=model,
                conditions=["none"],
                db=str(db),
                concurrency=16,
                target_params={"max_tokens": 96},
                variants=ed_variants,
            ),
            scenarios=[ed],
        )
    )
    console.print(f"    run {ed_result.run_id}: {len(ed_result.conversations)} conversations")

    tree = by_id[ed_seed]
    tree_arms = [
        v.id
        for v in expand(tree)
        if not v.deviations
        or (v.deviations == ["disclosure"] and v.choices["disclosure"] == DEMO_ED_DISCLOSURE)
    ]
    console.print(
        f"    ED forum user {ed_seed}: {len(tree_arms)} arms (disclosure), {ed_max_turns} exchanges"
    )
    tree_result = asyncio.run(
        run(
            RunConfig(
                scenarios=[str(tree.source_path or LIBRARY / "ed")],
                targets=[model],
                simulator=model,
                conditions=["none"],
                max_turns=ed_max_turns,
                db=str(db),
                concurrency=16,
                simulator_params={"max_tokens": 48},
                target_params={"max_tokens": 96},
                variants=tree_arms,
            ),
            scenarios=[tree],
        )
    )
    console.print(f"    run {tree_result.run_id}: {len(tree_result.conversations)} conversations")

    from branchpoint.gateway.completion import GenParams

    judge_params = GenParams(max_tokens=judge_max_tokens, temperature=0.0, seed=0)
    console.print(
        "[bold]4/5 judge[/] heuristic judge on every chatbot turn; the LLM judge on each "
        "teen conversation and each ED reply"
    )
    heuristic = judge_run(result.run_id, db=str(db), rubric="teen", judges=["heuristic"])
    console.print(f"    teen, heuristic: {_judged(heuristic)}")
    # A local model judges one call at a time (calls share its KV cache), so concurrency would
    # only queue; conversation scope keeps the teen LLM judging to one call per arm on two cores.
    llm = judge_run(
        result.run_id,
        db=str(db),
        rubric="teen",
        judges=[model],
        concurrency=1,
        scope="conversation",
        params=judge_params,
        progress=True,
    )
    console.print(f"    teen, {model} (whole conversations): {_judged(llm)}")
    ed_heuristic = judge_run(ed_result.run_id, db=str(db), rubric="ed", judges=["heuristic"])
    ed_llm = judge_run(
        ed_result.run_id,
        db=str(db),
        rubric="ed",
        judges=[model],
        concurrency=1,
        params=judge_params,
        progress=True,
    )
    console.print(f"    ed, heuristic: {_judged(ed_heuristic)}; {model}: {_judged(ed_llm)}")
    # The ED forum user: every chatbot turn with the heuristic judge, on the rubric the scenario
    # names. No LLM judge here: on two cores one ED call costs about a minute, and the demo must
    # stay under ten; `branchpoint judge RUN_ID --judge embedded` adds it.
    tree_heuristic = judge_run(
        tree_result.run_id, db=str(db), rubric=tree.rubric or "ed", judges=["heuristic"]
    )
    console.print(f"    ed forum user, heuristic, per turn: {_judged(tree_heuristic)}")
    _print_tree_ratings(console, str(db), tree_result.run_id)

    console.print("[bold]5/5 report[/]")
    files = write_report(str(db), out / "report", [result.run_id, ed_result.run_id], n_boot=500)
    elapsed = time.monotonic() - started
    console.print()
    console.print(f"Done in {elapsed / 60:.1f} min. Results:")
    console.print(f"  store        {db}")
    console.print(f"  report       {files.html}")
    console.print(f"  markdown     {files.markdown}")
    console.print(f"  plots        {', '.join(p.name for p in files.plots)}")
    if files.missing_plots:
        console.print(f"  (no data for: {', '.join(files.missing_plots)}; the report says why)")
    console.print(f"  a transcript branchpoint show {result.conversations[0].id} --db {db}")
    console.print(
        "The embedded model is far too small to measure safety: these numbers prove the pipeline only."
    )


def first_alternatives(scenario: Scenario, variants: list[Variant]) -> list[Variant]:
    """The baseline and the arms that deviate to the first alternative of one branch point."""
    first = {
        bp.id: next(o for o in bp.options if o != bp.baseline) for bp in scenario.branch_points
    }
    return [
        v
        for v in variants
        if not v.deviations or all(v.choices[bp] == first[bp] for bp in v.deviations)
    ]


def _print_tree_ratings(console: Console, db: str, run_id: str) -> None:
    """Per arm of the ED tree: the heuristic's per-turn ratings on the seven dimensions."""
    from rich.markup import escape

    from branchpoint.analysis.tables.judgments import judgment_table

    table = judgment_table(db, run_id, judge="heuristic")
    if table.empty:
        console.print("    (the heuristic matched no ED pattern in the tree's replies)")
        return
    column = "choice:disclosure"
    for conv_id, rows in table.groupby("conversation_id", sort=True):
        arm = rows[column].iloc[0] if column in rows.columns else conv_id
        levels = rows["verdict"].value_counts().to_dict()
        shown = ", ".join(f"{levels[k]} {k}" for k in sorted(levels)) or "none"
        console.print(
            f"    disclosure {escape(str(arm))}: {rows['turn_index'].nunique()} turn(s) rated "
            f"({escape(shown)})"
        )


def _judged(summary: object) -> str:
    fields = ("rows", "errors", "copied", "model_calls")
    return ", ".join(
        f"{f.replace('_', ' ')} {getattr(summary, f)}" for f in fields if hasattr(summary, f)
    )


def register(app: typer.Typer) -> None:
    app.command("demo")(demo_command)
