"""The docs' reference pages, generated from the code at every build (an mkdocs hook).

Nothing here is written by hand, so it cannot go stale: the CLI page walks the typer app (every
command, subcommand, argument and option, with the help text `--help` prints); the format pages
render the JSON Schemas that `branchpoint schema KIND` prints; the Python API pages list each
package's `_EXPORTS` (its public names) for mkdocstrings to render from the docstrings.

The pages are added to the build as generated files (they are never written into docs/), so
`mkdocs serve` does not rebuild in a loop and no stale copy can be committed.
`tests/test_docs.py` calls the same functions.
"""

from __future__ import annotations

import importlib
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

# Before branchpoint is imported: no network at import, no hub look-ups (as the CLI does).
for _name, _value in (
    ("LITELLM_LOCAL_MODEL_COST_MAP", "True"),
    ("HF_HUB_OFFLINE", "1"),
    ("TRANSFORMERS_OFFLINE", "1"),
):
    os.environ.setdefault(_name, _value)

# `branchpoint schema KIND` for each format page: (kind, page, title, what it is)
FORMATS = (
    (
        "scenario",
        "scenario",
        "Scenario files",
        "A scenario (or a set file of several) as `branchpoint validate`, `variants` and `run` "
        "read it.",
    ),
    (
        "sweep",
        "manifest",
        "Sweep manifests",
        "The study manifest `branchpoint sweep FILE` and `plan_study(FILE)` read.",
    ),
    ("rubric", "rubric", "Rubrics", "A rubric file (`branchpoint/judges/rubrics/*.yaml`)."),
    (
        "prompt",
        "prompt",
        "Prompt conditions",
        "A system-prompt condition (`--condition NAME`, "
        "`branchpoint/scenarios/library/prompts/*.yaml`).",
    ),
    (
        "crisis_resources",
        "crisis-resources",
        "Crisis resources",
        "The crisis resources file (`branchpoint/scenarios/library/crisis_resources.yaml`).",
    ),
    (
        "transcript",
        "transcript",
        "Transcript records",
        "One record of `branchpoint export --level transcript` (JSON lines or Parquet).",
    ),
)

# The packages whose public API gets a page, in the layers' order (bottom first).
PACKAGES = ("core", "gateway", "scenarios", "simulator", "judges", "study", "analysis")


# ---------------------------------------------------------------------------------------------
# The CLI


def _cli_root() -> Any:
    import typer.main

    from branchpoint.tui.cli import app

    return typer.main.get_command(app)


def cli_commands() -> list[tuple[str, Any, Any]]:
    """Every command as (path, command, context), depth first, the root first."""
    root = _cli_root()
    out: list[tuple[str, Any, Any]] = []

    def walk(cmd: Any, ctx: Any) -> None:
        out.append((ctx.command_path, cmd, ctx))
        if hasattr(cmd, "list_commands"):
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                if sub is None or getattr(sub, "hidden", False):
                    continue
                walk(sub, sub.make_context(name, [], parent=ctx, resilient_parsing=True))

    walk(root, root.make_context("branchpoint", [], resilient_parsing=True))
    return out


def _text(s: str) -> str:
    """Help text as Markdown: HTML's special characters escaped, nothing else reinterpreted."""
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _help_blocks(help_text: str) -> str:
    """click's help: paragraphs; one that starts with \\b keeps its lines (a code block here)."""
    blocks = []
    for para in re.split(r"\n\s*\n", help_text.strip()):
        if para.lstrip().startswith("\b"):
            lines = para.split("\b", 1)[1].strip("\n").splitlines()
            indent = min((len(x) - len(x.lstrip()) for x in lines if x.strip()), default=0)
            blocks.append("```text\n" + "\n".join(x[indent:] for x in lines) + "\n```")
        else:
            blocks.append(_text(" ".join(line.strip() for line in para.splitlines())))
    return "\n\n".join(blocks)


def anchor(path: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", path.lower()).strip("-")


def cli_markdown() -> str:
    commands = cli_commands()
    lines = [
        "# Command line",
        "",
        "Generated from the `branchpoint` command itself at every docs build: each command and "
        "option with the help that `--help` prints. Exit status: 0 done, 1 some conversations "
        "or verdicts failed, 2 bad input (one line per problem), 130 interrupted.",
        "",
    ]
    for path, cmd, _ in commands[1:]:
        lines.append(f"- [`{path}`](#{anchor(path)}): {_text(cmd.get_short_help_str(80))}")
    lines.append("")
    for path, cmd, ctx in commands:
        if path == "branchpoint":
            continue
        lines += [f"## `{path}` {{#{anchor(path)}}}", ""]
        lines += ["```text", cmd.get_usage(ctx).strip(), "```", ""]
        if cmd.help:
            lines += [_help_blocks(cmd.help), ""]
        subs = [p for p, _, _ in commands if p.startswith(path + " ")]
        if subs:
            lines += ["Subcommands: " + ", ".join(f"[`{p}`](#{anchor(p)})" for p in subs), ""]
        records = []
        for param in cmd.get_params(ctx):
            if getattr(param, "hidden", False):
                continue
            record = param.get_help_record(ctx)
            if record is None:  # an argument without help text: its name is in the usage line
                continue
            records.append(record)
        if records:
            lines += ["| option | what |", "| --- | --- |"]
            for opts, help_text in records:
                cell = _text(" ".join(help_text.split())).replace("|", "\\|")
                lines.append(f"| `{opts.replace('|', '¦')}` | {cell} |")
            lines.append("")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# The formats, from their JSON Schemas


def schema_of(kind: str) -> dict[str, Any]:
    """What `branchpoint schema KIND` prints, parsed."""
    from typer.testing import CliRunner

    from branchpoint.tui.cli import app

    result = CliRunner().invoke(app, ["schema", kind])
    if result.exit_code != 0:
        raise RuntimeError(f"branchpoint schema {kind} exited {result.exit_code}: {result.output}")
    return dict(json.loads(result.output))


def _type(spec: dict[str, Any]) -> str:
    if "$ref" in spec:
        name = spec["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{anchor(name)})"
    if "const" in spec:
        return f"`{json.dumps(spec['const'])}`"
    if "enum" in spec:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in spec["enum"])
    for key in ("anyOf", "oneOf"):
        if key in spec:
            return " or ".join(_type(s) for s in spec[key])
    kind = spec.get("type")
    if kind == "array":
        return f"list of {_type(spec.get('items', {}))}"
    if kind == "object":
        extra = spec.get("additionalProperties")
        if isinstance(extra, dict) and extra:
            return f"mapping of name to {_type(extra)}"
        return "mapping"
    if isinstance(kind, list):
        return " or ".join(str(k) for k in kind)
    return str(kind or "any")


def _bounds(spec: dict[str, Any]) -> str:
    words = {
        "minimum": ">=",
        "maximum": "<=",
        "exclusiveMinimum": ">",
        "exclusiveMaximum": "<",
        "minLength": "length >=",
        "minItems": "items >=",
        "pattern": "matches",
    }
    parts = [f"{w} `{spec[k]}`" for k, w in words.items() if k in spec]
    for key in ("anyOf", "oneOf"):
        for sub in spec.get(key, []):
            inner = _bounds(sub)
            if inner:
                parts.append(inner)
    return ", ".join(parts)


def _object_table(spec: dict[str, Any]) -> list[str]:
    props: dict[str, Any] = spec.get("properties", {})
    if not props:
        return []
    required = set(spec.get("required", []))
    rows = ["| key | type | required | default | what |", "| --- | --- | --- | --- | --- |"]
    for name, prop in props.items():
        default = f"`{json.dumps(prop['default'])}`" if "default" in prop else ""
        what = _text(" ".join(str(prop.get("description", "")).split()))
        bounds = _bounds(prop)
        if bounds:
            what = f"{what} ({bounds})" if what else bounds
        rows.append(
            f"| `{name}` | {_type(prop)} | {'yes' if name in required else ''} | {default} | "
            + what.replace("|", "\\|")
            + " |"
        )
    return rows


def format_markdown(kind: str, title: str, what: str) -> str:
    schema = schema_of(kind)
    lines = [
        f"# {title}",
        "",
        f"{what} Generated at every docs build from the JSON Schema that "
        f"`branchpoint schema {kind}` prints (the pydantic models are the source of truth); "
        "editors that use the YAML language server complete and check a file against it.",
        "",
    ]
    if kind == "scenario":
        lines += [
            "To check a file in an editor, write the schema next to your scenarios and point the "
            "file at it with a comment on its first line:",
            "",
            "```sh",
            "branchpoint schema scenario > scenario.schema.json",
            "```",
            "",
            "```yaml",
            "# yaml-language-server: $schema=scenario.schema.json",
            "```",
            "",
        ]
        fmt = ROOT / "branchpoint" / "scenarios" / "FORMAT.md"
        body = fmt.read_text(encoding="utf-8").split("\n", 1)[1]  # its own title dropped
        body = re.sub(r"^## ", "### ", body, flags=re.M)
        lines += [
            "## The format in brief",
            "",
            "From `branchpoint/scenarios/FORMAT.md`, which ships with the package.",
            body.strip(),
            "",
        ]
    lines += ["## Fields", ""]
    top = {k: v for k, v in schema.items() if k != "$defs"}
    if top.get("properties"):
        lines += [f"### {schema.get('title', kind)} {{#top}}", ""]
        if top.get("description"):
            lines += [_text(str(top["description"])), ""]
        lines += _object_table(top) + [""]
    elif "anyOf" in top or "oneOf" in top:
        lines += [f"A file is one of: {_type(top)}.", ""]
    for name, spec in sorted(schema.get("$defs", {}).items()):
        lines += [f"### {name} {{#{anchor(name)}}}", ""]
        if spec.get("description"):
            lines += [_text(" ".join(str(spec["description"]).split())), ""]
        table = _object_table(spec)
        lines += (table or [f"Type: {_type(spec)}"]) + [""]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# The Python API


def exports(package: str) -> dict[str, str]:
    """A package's public names and the module each is defined in."""
    module = importlib.import_module(f"branchpoint.{package}" if package else "branchpoint")
    table = getattr(module, "_EXPORTS", None)
    if table:
        return dict(sorted(table.items()))
    names = getattr(module, "__all__", [])
    return {n: getattr(getattr(module, n), "__module__", module.__name__) for n in sorted(names)}


def _home(package: str, export: str, source: str) -> str | None:
    """The layer package that documents ``export`` when it is not ``package`` itself: the one
    its defining module belongs to, if that package exports it too (the root package exports
    names of every layer; a layer may export a name of a lower one)."""
    parts = source.split(".")
    home = parts[1] if len(parts) > 2 and parts[0] == "branchpoint" else None
    if home is None or home == package or home not in PACKAGES:
        return None
    return home if exports(home).get(export) == source else None


def api_markdown(package: str) -> str:
    name = f"branchpoint.{package}" if package else "branchpoint"
    module = importlib.import_module(name)
    doc = (module.__doc__ or "").strip()
    lines = [
        f"# `{name}`",
        "",
        "Generated at every docs build from the package's public names (its `_EXPORTS` table) "
        "and their docstrings.",
        "",
    ]
    if doc:
        lines += [_text(doc.split("\n\n", 1)[0].replace("\n", " ")), ""]
    again = {n: home for n, s in exports(package).items() if (home := _home(package, n, s))}
    if again:  # one object, one section: a name exported again is documented where it lives
        lines += ["Also exported here, documented in its own package:", ""]
        for export, home in again.items():
            lines.append(f"- `{export}`: [`branchpoint.{home}`]({home}.md)")
        lines.append("")
    for export, source in exports(package).items():
        if export in again:
            continue
        lines += [
            f"::: {source}.{export}",
            "    options:",
            "      show_root_heading: true",
            "      show_root_full_path: false",
            "      heading_level: 2",
            "",
        ]
    return "\n".join(lines) + "\n"


def api_packages() -> list[str]:
    """The packages with a page: the root (once it exports names) and each layer's package."""
    root = importlib.import_module("branchpoint")
    first = [""] if getattr(root, "_EXPORTS", None) or getattr(root, "__all__", None) else []
    return first + list(PACKAGES)


def api_page(package: str) -> str:
    return f"reference/api/{package or 'branchpoint'}.md"


# ---------------------------------------------------------------------------------------------
# mkdocs


def pages() -> Iterator[tuple[str, str]]:
    """(path under docs/, Markdown) of every generated page."""
    yield "reference/cli.md", cli_markdown()
    for kind, page, title, what in FORMATS:
        yield f"reference/formats/{page}.md", format_markdown(kind, title, what)
    for package in api_packages():
        yield api_page(package), api_markdown(package)


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for path, text in pages():
        files.append(File.generated(config, path, content=text))
    return files


# Sections in reading order; pages and sections not named keep mkdocs' order after those named,
# so a page dropped into a folder appears without editing anything here. Keys are file stems
# (pages) and folder names (sections).
ORDER = {
    "": ("index", "getting-started", "guides", "methods", "operations", "reference", "development"),
    "guides": (
        "authoring-scenarios",
        "running",
        "sweeps",
        "judging",
        "labelling",
        "report",
        "tui",
        "exports",
    ),
    "methods": ("contrasts", "manipulation-checks", "judge-correction"),
    "operations": ("postgresql", "ray", "budgets", "proxies", "plugins"),
    "development": ("architecture", "tests", "benchmarks"),
    "reference": ("cli", "formats", "api"),
    "formats": tuple(page for _, page, _, _ in FORMATS),
    "api": ("branchpoint", *PACKAGES),
}
SECTION_TITLES = {"api": "Python API"}


def _key(item: Any) -> str:
    """A page's file stem, or a section's folder name (from its first page's path)."""
    if getattr(item, "is_page", False):
        return Path(item.file.src_uri).stem
    first = item.children[0] if getattr(item, "children", None) else None
    while first is not None and not getattr(first, "is_page", False):
        first = first.children[0] if first.children else None
    if first is None:
        return ""
    depth = 0
    parent = item.parent
    while parent is not None:
        depth += 1
        parent = parent.parent
    return Path(first.file.src_uri).parts[depth]


def on_nav(nav: Any, config: Any, files: Any) -> Any:
    def arrange(items: list[Any], order: tuple[str, ...]) -> None:
        items.sort(key=lambda c: order.index(_key(c)) if _key(c) in order else len(order))
        for item in items:
            if getattr(item, "children", None):
                key = _key(item)
                item.title = SECTION_TITLES.get(key, item.title)
                arrange(item.children, ORDER.get(key, ()))

    arrange(nav.items, ORDER[""])
    # previous / next links follow the new order
    flat: list[Any] = []

    def collect(items: list[Any]) -> None:
        for item in items:
            if getattr(item, "is_page", False):
                flat.append(item)
            collect(getattr(item, "children", None) or [])

    collect(nav.items)
    nav.pages = flat
    for before, after in zip([None, *flat], [*flat, None]):
        if before is not None:
            before.next_page = after
        if after is not None:
            after.previous_page = before
    return nav
