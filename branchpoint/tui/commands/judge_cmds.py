"""``branchpoint judge``: rate stored conversations against a rubric, with one judge or a panel."""

from __future__ import annotations

from typing import Annotated

import typer

from branchpoint.core.errors import UserError
from branchpoint.tui.commands.options import DbOption, TimeoutOption


def judge_command(
    run_id: Annotated[
        str | None,
        typer.Argument(help="Run id to judge (printed by `branchpoint run`).", show_default=False),
    ] = None,
    all_runs: Annotated[
        bool, typer.Option("--all", help="Judge the conversations of every run in the store.")
    ] = False,
    rubric: Annotated[
        str | None,
        typer.Option(
            "--rubric",
            "-r",
            help="Bundled rubric (teen, ed, kora) or a rubric YAML path. Default: the rubric each conversation's scenario names (its `rubric:` field).",
            show_default=False,
        ),
    ] = None,
    judge: Annotated[
        list[str] | None,
        typer.Option(
            "--judge",
            "-j",
            help="Judge (repeatable): heuristic (offline patterns) or a model spec: embedded, hf:MODEL, litellm:PROVIDER/MODEL, oai:MODEL. Default: embedded.",
        ),
    ] = None,
    panel: Annotated[
        str | None,
        typer.Option(
            "--panel",
            help="Combine several --judge into one panel verdict: median (by scale order) or majority. Members' verdicts are kept.",
        ),
    ] = None,
    scope: Annotated[
        str | None,
        typer.Option(
            "--scope",
            help="per_turn (each chatbot turn) or conversation (the whole conversation). Default: the rubric's scope.",
        ),
    ] = None,
    db: DbOption = None,
    timeout: TimeoutOption = None,
    concurrency: Annotated[
        int, typer.Option("--concurrency", min=1, help="Judging units in flight at once.")
    ] = 4,
    judge_param: Annotated[
        list[str] | None,
        typer.Option(
            "--judge-param",
            help="Judge model param NAME=VALUE (repeatable), e.g. max_tokens=512, api_base=http://127.0.0.1:8000/v1. structured=json_schema|json_object|prompt pins the JSON mode (default: tried in that order). Default: temperature 0, seed 0.",
        ),
    ] = None,
    max_retries: Annotated[
        int,
        typer.Option(
            "--max-retries",
            min=0,
            help="Retries when a judge's output is not valid JSON for the rubric; then the verdict is error.",
        ),
    ] = 2,
    retry_errors: Annotated[
        bool,
        typer.Option(
            "--retry-errors", help="Judge again the units whose stored verdicts include error."
        ),
    ] = False,
    batch: Annotated[
        bool,
        typer.Option(
            "--batch",
            help="Send the model judges' calls through the provider's batch API (oai: and litellm:openai/ judges): answered within 24 h at the batch price (half by default). The batch id is stored: a killed or interrupted judge resumes by polling it.",
        ),
    ] = False,
    batch_poll_s: Annotated[
        float,
        typer.Option("--batch-poll-s", min=0.05, help="Seconds between polls of a pending batch."),
    ] = 30.0,
    judge_price: Annotated[
        str | None,
        typer.Option(
            "--judge-price",
            help="The model judges' list price, USD per million tokens: INPUT,OUTPUT (e.g. 0.15,0.6). Default: litellm's price map (none for a local server).",
            show_default=False,
        ),
    ] = None,
    batch_factor: Annotated[
        float | None,
        typer.Option(
            "--batch-factor",
            help="The share of the list price that batch calls cost. Default: 0.5.",
            show_default=False,
        ),
    ] = None,
    persona_judge: Annotated[
        str | None,
        typer.Option(
            "--persona-judge",
            help="Also rate the persona's own turns: the manipulation check of every fired branch point (did the turn enact its arm's option) and every persona turn's realism. heuristic (offline rules in branchpoint/scenarios/persona_rubrics/) or a model spec. Given without --judge, only the persona is rated.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Judge stored conversations against a rubric; every verdict is stored with its provenance.

    Only units that lack verdicts from this judge, rubric version and prompt version are judged:
    running the command again makes no model call. Transcripts are read, never regenerated. A judge
    that cannot answer yields an `error` verdict, never a pass. Judges' verdicts are stored under
    their own names (heuristic, the model spec, or panel(a,b)) and never mixed unless a panel is asked for.
    """
    from rich.console import Console
    from rich.markup import escape

    from branchpoint.gateway.specs import params_from_pairs
    from branchpoint.judges.runner import judge_run

    if scope not in (None, "per_turn", "conversation"):
        raise UserError(f"--scope {scope!r}: expected per_turn or conversation")
    if panel not in (None, "median", "majority"):
        raise UserError(f"--panel {panel!r}: expected median or majority")
    if persona_judge is not None and not judge:
        _rate_persona(run_id, all_runs, db, persona_judge, judge_param)
        return
    judges = judge or ["embedded"]
    if panel and len(judges) < 2:
        raise UserError("--panel needs at least two --judge")
    options = dict(
        db=db,
        judges=judges,
        panel=panel,
        scope=scope,
        concurrency=concurrency,
        timeout_s=timeout,
        params=params_from_pairs(judge_param, where="--judge-param") if judge_param else None,
        max_retries=max_retries,
        retry_errors=retry_errors,
        progress=True,
        all_runs=all_runs,
        batch=batch,
        batch_poll_s=batch_poll_s,
        price=_price(judge_price) if judge_price is not None else None,
        batch_factor=batch_factor,
    )
    console = Console(highlight=False)
    if rubric is None:
        from branchpoint.judges.scenario_rubrics import judge_by_scenario_rubric, merge_summaries

        per_rubric = judge_by_scenario_rubric(run_id, **options)
        for ref, part in per_rubric:
            console.print(f"rubric {escape(ref)}: {part.conversations} conversation(s)")
        summary = merge_summaries([part for _, part in per_rubric])
    else:
        summary = judge_run(run_id, rubric=rubric, **options)
    console.print(
        f"{summary.conversations} conversation(s): {summary.judged} unit(s) judged now, "
        f"{summary.copied} copied from shared prefixes, {summary.skipped} already judged; "
        f"{summary.rows} verdict row(s) written, {summary.errors} error(s); "
        f"{summary.model_calls} judge model call(s)"
    )
    if summary.not_final:
        console.print(
            f"{len(summary.not_final)} conversation(s) not finished were left out of conversation scope: "
            + escape(", ".join(summary.not_final[:5]))
            + (" ..." if len(summary.not_final) > 5 else "")
        )
    from collections import Counter

    for line, n in Counter(summary.language_refusals).items():  # one line per judge and language
        console.print(f"[yellow]{escape(line)}[/] ({n} unit(s) not judged by it)")
    if summary.scenarios_not_found:
        console.print(
            "scenario(s) not found, judged on every criterion of the rubric: "
            + escape(", ".join(summary.scenarios_not_found[:5]))
            + (" ..." if len(summary.scenarios_not_found) > 5 else "")
        )
    if persona_judge is not None:
        _rate_persona(run_id, all_runs, db, persona_judge, judge_param)
    if summary.errors:
        console.print(
            f"{summary.errors} verdict(s) are error: their error and raw_output columns are in "
            + escape(
                f"`branchpoint export {run_id or '--all'} --level judgment --out judgments.csv`"
            )
        )
        raise typer.Exit(1)  # verdicts failed: a script must not take it for success


def _price(text: str) -> tuple[float, float]:
    """``--judge-price 0.15,0.6`` -> (0.15, 0.6): USD per million input, output tokens."""
    parts = [p.strip() for p in text.split(",")]
    try:
        values = tuple(float(p) for p in parts)
    except ValueError:
        values = ()
    if len(values) != 2 or any(v < 0 for v in values):
        raise UserError(
            f"--judge-price {text!r}: expected INPUT,OUTPUT in USD per million tokens, e.g. 0.15,0.6"
        )
    return values[0], values[1]


def _rate_persona(
    run_id: str | None, all_runs: bool, db: str | None, spec: str, pairs: list[str] | None
) -> None:
    from rich.console import Console
    from rich.markup import escape

    from branchpoint.core.untrusted import visible
    from branchpoint.gateway.specs import params_from_pairs
    from branchpoint.judges.persona_checks import persona_judge_run

    params = params_from_pairs(pairs, where="--judge-param") if pairs else None
    s = persona_judge_run(run_id, spec=spec, db=db, params=params, all_runs=all_runs)
    counts = ", ".join(f"{k} {v}" for k, v in sorted(s.by_verdict.items())) or "none"
    console = Console(highlight=False)
    console.print(
        f"persona ({escape(spec)}): {s.conversations} conversation(s), {s.rated} rating(s) written "
        f"({escape(counts)}), {s.skipped} already rated, {s.unknown} the rater could not tell, "
        f"{s.errors} error(s)"
    )
    if s.scenarios_not_found:
        missing = ", ".join(s.scenarios_not_found[:5])
        console.print(
            "scenario(s) not found, so their manipulation checks cannot be made (no branch-point "
            "kind or option text: unchecked, which counts as enacted) and realism is rated without "
            "the persona's name and age: "
            + escape(visible(missing, multiline=False))
            + (" ..." if len(s.scenarios_not_found) > 5 else "")
        )
    if s.errors:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("judge", no_args_is_help=True)(judge_command)
