"""Scenario verbs: validate, schema, variants, import. The scenarios package is imported lazily."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from branchpoint.core.errors import UserError

import_app = typer.Typer(
    help="Convert scenarios from public benchmarks into branchpoint scenario files.",
    no_args_is_help=True,
)


def validate(
    paths: Annotated[
        list[Path],
        typer.Argument(
            help="Scenario, rubric, prompt or crisis-resource files, or folders (searched "
            "recursively for *.yaml and *.yml).",
            show_default=False,
        ),
    ],
) -> None:
    """Check files and folders; print every error as FILE:LINE:COL: FIELD: PROBLEM.

    Scenarios and scenario sets, rubrics (criteria + scale), prompt conditions (prompts/) and
    crisis resources are each checked against their own format. When rubrics are given too,
    every criterion a scenario lists must exist in one of them; otherwise in the rubric the
    scenario names (``rubric:``). Exits 2 if any error was found.

    \b
    Example:
        branchpoint validate branchpoint/scenarios/library branchpoint/judges/rubrics
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from branchpoint.judges.loading import bundled_rubrics, load_rubric_file
    from branchpoint.scenarios.validate import validate_paths

    # A bar on stderr for big folders (an imported benchmark); stdout keeps only the error lines.
    with Progress(
        TextColumn("validating"),
        BarColumn(),
        MofNCompleteColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as progress:
        task = progress.add_task("validate", total=None)

        def step(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        report = validate_paths(
            paths, progress=step, rubric_loader=load_rubric_file, bundled_rubrics=bundled_rubrics()
        )
    for error in report.errors:
        typer.echo(str(error))
    typer.echo(report.summary())
    if report.errors:
        raise typer.Exit(2)  # bad input, as every command says it


def schema(
    kind: Annotated[
        str,
        typer.Argument(
            help="Which format: scenario, prompt, crisis_resources, rubric, sweep (a sweep "
            "manifest) or transcript (a record of `export --level transcript`)."
        ),
    ] = "scenario",
    write: Annotated[
        bool,
        typer.Option(
            "--write",
            help="Also write branchpoint/scenarios/schema/scenario.schema.json (scenario only).",
        ),
    ] = False,
) -> None:
    """Print the JSON Schema of a format, for editors (YAML language server).

    Write it beside your scenario files and point each at it with a comment on its first line
    (the bundled library's files point at the bundled copy, ../../schema/scenario.schema.json):

    \b
        branchpoint schema scenario > scenario.schema.json
        # yaml-language-server: $schema=scenario.schema.json
    """
    from branchpoint.scenarios.schema import dumps, model_schema, write_scenario_schema

    kind = kind.replace("-", "_")
    if kind == "sweep":  # the manifest is the simulator's, not the authoring format's
        from branchpoint.study import manifest_json_schema

        if write:
            raise UserError("--write only applies to the scenario schema")
        typer.echo(dumps(manifest_json_schema()), nl=False)
        return
    if kind == "transcript":  # an export's record: the analysis layer's
        from branchpoint.analysis.export.transcripts import transcript_schema

        if write:
            raise UserError("--write only applies to the scenario schema")
        typer.echo(dumps(transcript_schema()), nl=False)
        return
    if kind == "rubric":  # the judges' format, from the model that loads it
        from branchpoint.judges.rubric import rubric_json_schema

        if write:
            raise UserError("--write only applies to the scenario schema")
        typer.echo(dumps(rubric_json_schema()), nl=False)
        return
    if kind not in ("scenario", "prompt", "crisis_resources"):
        raise UserError(
            f"unknown schema '{kind}' (expected scenario, prompt, crisis_resources, rubric, "
            "sweep or transcript)"
        )
    typer.echo(dumps(model_schema(kind)), nl=False)
    if write:
        if kind != "scenario":
            raise UserError("--write only applies to the scenario schema")
        path = write_scenario_schema()
        typer.echo(f"wrote {path}", err=True)


def variants(
    file: Annotated[
        Path, typer.Argument(help="A scenario file (or a scenario set).", show_default=False)
    ],
    scenario: Annotated[
        str | None, typer.Option("--scenario", "-s", help="Only this scenario id of a set.")
    ] = None,
) -> None:
    """Print the matched variants of each scenario: id, choices, and how each differs from the baseline."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from branchpoint.scenarios.loader import load_scenarios
    from branchpoint.scenarios.variants import expand, expand_by_cue

    loaded, errors = load_scenarios([file])
    if errors:
        for error in errors:
            typer.echo(str(error))
        typer.echo(f"{len(errors)} errors: fix them first ('branchpoint validate {file}')")
        raise typer.Exit(1)
    if scenario is not None:
        loaded = [s for s in loaded if s.id == scenario]
        if not loaded:
            raise UserError(f"{file}: no scenario with id '{scenario}'")
    console = Console(highlight=False, soft_wrap=False)
    for s in loaded:
        by_cue = expand_by_cue(s)
        all_variants = expand(s)
        baseline = all_variants[0]
        table = Table(title=Text(f"{s.id}: {s.title}"), title_justify="left", show_lines=False)
        table.add_column("id", no_wrap=True)
        table.add_column("choices")
        table.add_column("differs from baseline")
        for v in all_variants:
            choices = ", ".join(
                f"{k}={str(val).lower() if isinstance(val, bool) else val}"
                for k, val in v.as_choices_record().items()
            )
            if v.id == baseline.id:
                diff = "baseline"
            else:
                parts = [f"{k}: {baseline.choices.get(k)} -> {v.choices[k]}" for k in v.deviations]
                if v.profile:
                    parts.append(
                        "profile " + ", ".join(f"{a}={lvl}" for a, lvl in v.profile.items())
                    )
                if v.explicit_cue:
                    parts.append("explicit cue")
                diff = "; ".join(parts) or "same choices"
            table.add_row(
                Text(v.id), Text(choices or ("no profile" if s.profile else "-")), Text(diff)
            )
        console.print(table)
        console.print(Text(_variant_count(len(all_variants), by_cue)), highlight=False)


def _variant_count(total: int, by_cue: dict[bool | None, list[Any]]) -> str:
    """ "33 variants (16 with explicit_cue=false, 16 with explicit_cue=true, 1 in every setting)":
    a variant that every cue setting shares (the no-profile baseline) is counted once, so the
    parts add up to the total."""
    settings = {cue: {v.id for v in vs} for cue, vs in by_cue.items() if cue is not None}
    if not settings:
        return f"{total} variants"
    shared = set.intersection(*settings.values()) if len(settings) > 1 else set()
    parts = [
        f"{len(ids - shared)} with explicit_cue={str(cue).lower()}" for cue, ids in settings.items()
    ]
    if shared:
        parts.append(f"{len(shared)} in every setting")
    return f"{total} variants ({', '.join(parts)})"


@import_app.command("kora")
def import_kora_cmd(
    path: Annotated[
        Path,
        typer.Argument(help="KORA scenarios.jsonl (one JSON object a line).", show_default=False),
    ],
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Folder to write one YAML file per scenario into.")
    ],
    risks: Annotated[
        Path | None,
        typer.Option(
            help="KORA risks.json: risk names, lengths and the rubric (default: next to PATH)."
        ),
    ] = None,
) -> None:
    """Convert KORA child-safety scenarios into branchpoint scenario files (no branch points).

    Also writes kora-rubric.yaml beside them, built from risks.json: the scenarios name it, so
    `branchpoint judge` without --rubric rates them on KORA's own risk criteria.

    branchpoint ships none of KORA's text. Get the two files from KORA's public repository,
    https://github.com/korabench/benchmark (Apache-2.0; keep its LICENSE with them):
    data/scenarios.jsonl (PATH) and packages/benchmark/data/risks.json (put it next to PATH, or
    give --risks)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from branchpoint.judges.kora_rubric import write_rubric
    from branchpoint.scenarios.kora import WHERE_TO_GET, count_records, import_kora

    if not path.is_file():
        raise UserError(f"{path}: file not found (expected KORA scenarios.jsonl; {WHERE_TO_GET})")
    risks_file = risks or path.parent / "risks.json"
    if not risks_file.is_file():
        raise UserError(
            f"{risks_file}: file not found (expected KORA's risks.json: its risks become the "
            f"rubric the scenarios are judged on; give it with --risks; {WHERE_TO_GET})"
        )
    total = count_records(path)
    with Progress(
        TextColumn("importing KORA"), BarColumn(), MofNCompleteColumn(), transient=True
    ) as progress:
        task = progress.add_task("import", total=total)
        written, problems = import_kora(
            path, out, risks_file, progress=lambda: progress.advance(task)
        )
    for problem in problems:
        typer.echo(str(problem), err=True)
    rubric = write_rubric(risks_file, out)
    typer.echo(
        f"imported {len(written)} of {total} scenarios into {out} ({len(problems)} errors); "
        f"their rubric: {rubric}"
    )
    if problems:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)
    app.command("schema")(schema)
    app.command("variants")(variants)
    app.add_typer(import_app, name="import")
