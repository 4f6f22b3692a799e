"""Import the public KORA child-safety scenarios as branchpoint scenarios.

KORA (github.com/korabench/benchmark, Apache-2.0) gives, for each scenario, a persona seed (age,
gender, maturity, background), a narrative, the child's first message, evaluation criteria and
sometimes the assistant's memory of earlier chats. Each becomes a scenario without branch points:
the seed makes the persona, the narrative (and memory) its context, the first message the opening,
the risk and category the tags, and the criteria one scenario-specific criterion.

Judging uses KORA's own risk criteria: each scenario names the rubric file ``kora-rubric.yaml``
beside it (``branchpoint import kora`` writes it there from risks.json, by ``branchpoint.judges.kora_rubric``;
KORA's text is never copied into this repository) and lists the criterion of its risk, so
``branchpoint run`` then ``branchpoint judge`` rate every chatbot turn on that risk's definition.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from io import StringIO
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from ruamel.yaml import YAML
from ruamel.yaml.scalarstring import FoldedScalarString, LiteralScalarString

from branchpoint.core.templates import is_template
from branchpoint.scenarios.models import Scenario

SOURCE = "KORA benchmark (github.com/korabench/benchmark, Apache-2.0)"
# Where a lab gets the two files: branchpoint ships none of KORA's text.
WHERE_TO_GET = (
    "KORA's files come from its public repository, https://github.com/korabench/benchmark "
    "(Apache-2.0; keep its LICENSE with them): data/scenarios.jsonl and "
    "packages/benchmark/data/risks.json"
)
DISCLAIMER = (
    "Imported from the public KORA benchmark; not written or reviewed by the branchpoint project "
    "and not clinically validated."
)


@dataclass(frozen=True)
class KoraProblem:
    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


# The rubric built from KORA's risks.json at import (``branchpoint.judges.kora_rubric``), written next to the
# imported scenarios: one criterion per KORA risk, whose id is the risk id; its rubric id is "kora".
RUBRIC_ID = "kora"
RUBRIC = "kora-rubric.yaml"


def load_risks(path: str | Path) -> dict[str, tuple[str, str]]:
    """risk id -> (risk name, category name), from KORA's risks.json."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    out: dict[str, tuple[str, str]] = {}
    for category in data:
        for risk in category.get("risks", []):
            out[risk["id"]] = (risk["name"], category["name"])
    return out


def load_conversation_lengths(path: str | Path) -> dict[str, int]:
    """risk id -> the number of exchanges KORA gives conversations about that risk."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return {
        risk["id"]: risk["conversationLength"]
        for category in data
        for risk in category.get("risks", [])
        if isinstance(risk.get("conversationLength"), int) and risk["conversationLength"] >= 1
    }


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _clean(text: str) -> str:
    # A few KORA texts carry stray control bytes (damaged punctuation); YAML cannot hold them raw.
    return _CONTROL.sub("", text)


def _literal(text: str) -> str:
    """Keep the text literal: KORA text is never a template, even if it holds braces."""
    if is_template(text):
        return "{% raw %}" + text + "{% endraw %}"
    return text


_FOLD_WIDTH = 96
_SINGLE_SPACE = re.compile(r"(?<=\S) (?=\S)")


def block_scalar(text: str) -> Any:
    """Long text as YAML block scalars: literal when it has line breaks, folded when it is long."""
    text = text.strip()
    if "\n" in text:
        return LiteralScalarString(text)
    if len(text) <= _FOLD_WIDTH:
        return text
    folded = FoldedScalarString(text)
    # Fold only at single spaces between words, so that reading it back gives the same text.
    folds: list[int] = []
    start, previous = 0, None
    for match in _SINGLE_SPACE.finditer(text):
        if match.start() - start > _FOLD_WIDTH and previous is not None:
            folds.append(previous)
            start = previous + 1
        previous = match.start()
    folded.fold_pos = folds  # type: ignore[attr-defined]
    return folded


def _get(row: dict[str, Any], key: str, kind: type = str) -> Any:
    value = row.get(key)
    if (
        isinstance(value, bool)
        or not isinstance(value, kind)
        or (kind is str and not value.strip())
    ):
        raise ValueError(f"field '{key}' is missing or not {'text' if kind is str else 'a number'}")
    return _clean(value) if kind is str else value


def convert(
    row: dict[str, Any],
    risks: dict[str, tuple[str, str]] | None = None,
    lengths: dict[str, int] | None = None,
) -> dict[str, Any]:
    """One KORA record -> scenario data (plain dict, valid against :class:`Scenario`).

    The scenario names the KORA rubric file next to it and lists its risk's criterion, so that judging uses
    KORA's own risk definition; ``lengths`` (from risks.json) sets ``max_turns``.
    """
    seed = row.get("seed")
    if not isinstance(seed, dict):
        raise ValueError("field 'seed' is missing or not an object")
    uid = str(_get(seed, "id")).lower()
    age = _get(seed, "childAge", int)
    gender = _get(seed, "childGender")
    category, risk = _get(seed, "riskCategoryId"), _get(seed, "riskId")
    risk_name, category_name = (risks or {}).get(
        risk, (risk.replace("_", " "), category.replace("_", " "))
    )
    title = row.get("shortTitle") or seed.get("shortTitle") or risk_name
    voice = _get(row, "childMaturity")
    levels = (seed.get("childCognitiveMaturity"), seed.get("childEmotionalMaturity"))
    if all(levels):
        voice += f"\n\nCognitive maturity: {levels[0]}; emotional maturity: {levels[1]}."
    context = _get(row, "narrative")
    memory = row.get("modelMemory")
    if isinstance(memory, str) and memory.strip():
        context += (
            "\n\nWhat you have told the assistant in earlier chats:\n" + _clean(memory).strip()
        )
    motivation = seed.get("motivation") or {}
    notes = [
        f"Core behaviour: {seed.get('coreBehavior', '').strip()}",
        f"Risk signal: {seed.get('riskSignalType', '?')}; social context: {seed.get('socialContext', '?')}.",
    ]
    if isinstance(motivation, dict) and motivation.get("name"):
        notes.append(f"Motivation: {motivation['name']} ({motivation.get('description', '')}).")
    if seed.get("notes"):
        notes.append(f"KORA notes: {_clean(str(seed['notes']))}")
    notes.append(DISCLAIMER)
    tags = ["kora", category, risk]
    if isinstance(seed.get("ageRange"), str):
        tags.append(f"age-{seed['ageRange']}")
    if isinstance(seed.get("riskSignalType"), str):
        tags.append(f"signal-{seed['riskSignalType']}")
    data: dict[str, Any] = {
        "id": f"kora-{uid}",
        "title": str(title).strip(),
        "risk_area": category,
        "content_warning": block_scalar(
            f"{risk_name} ({category_name}): a child or teen in a risky situation, written for "
            "safety testing; may describe self-harm, abuse, violence or other distressing themes."
        ),
        "persona": {
            # KORA personas have no names; a neutral placeholder rather than an invented one.
            "name": "unnamed child" if age < 13 else "unnamed teen",
            "age": age,
            "gender": gender,
            "background": block_scalar(_literal(_get(row, "childBackground"))),
            "voice": block_scalar(_literal(voice)),
            "context": block_scalar(_literal(context)),
        },
        "opening": block_scalar(_literal(_get(row, "firstUserMessage"))),
        # KORA's own conversation length for the risk, in exchanges
        **({"max_turns": lengths[risk]} if lengths and risk in lengths else {}),
        "rubric": RUBRIC,
        "criteria": [risk],
        "custom_criteria": [
            {
                "id": f"kora_{risk}",
                "name": f"KORA: {risk_name}",
                "definition": block_scalar(_get(row, "evaluationCriteria")),
            }
        ],
        "tags": tags,
        "notes": block_scalar("\n".join(notes)),
        "source": f"{SOURCE}, scenario {uid}",
    }
    return data


def yaml_writer() -> YAML:
    y = YAML(typ="rt")
    y.width = 4096  # block scalars carry their own folds; never re-wrap plain text
    y.indent(mapping=2, sequence=4, offset=2)
    return y


def dump(data: dict[str, Any]) -> str:
    buf = StringIO()
    buf.write(
        "# Content warning: child-safety test scenario imported from KORA; may describe distressing\n"
        "# themes. Not written or reviewed by the branchpoint project; not clinically validated.\n"
    )
    yaml_writer().dump(data, buf)
    return buf.getvalue()


def iter_records(path: str | Path) -> Iterator[tuple[int, dict[str, Any] | None, str | None]]:
    """``(line number, record or None, problem or None)`` for each non-blank line."""
    with open(path, encoding="utf-8", errors="strict") as fh:
        for n, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                yield (
                    n,
                    None,
                    f"not valid JSON: {exc.msg} at column {exc.colno} (expected one JSON object a line)",
                )
                continue
            if not isinstance(row, dict):
                yield n, None, "not a JSON object (expected one JSON object a line)"
                continue
            yield n, row, None


def count_records(path: str | Path) -> int:
    with open(path, encoding="utf-8", errors="replace") as fh:
        return sum(1 for line in fh if line.strip())


def import_kora(
    path: str | Path,
    out_dir: str | Path,
    risks_path: str | Path | None = None,
    progress: Callable[[], None] | None = None,
) -> tuple[list[Path], list[KoraProblem]]:
    """Convert every record of ``path``; write one YAML file per scenario into ``out_dir``."""
    src = Path(path)
    out = Path(out_dir)
    risks_file = Path(risks_path) if risks_path else src.parent / "risks.json"
    risks = load_risks(risks_file) if risks_file.exists() else {}
    lengths = load_conversation_lengths(risks_file) if risks_file.exists() else {}
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    problems: list[KoraProblem] = []
    seen: dict[str, int] = {}
    try:
        records = list(iter_records(src))
    except UnicodeDecodeError as exc:
        return [], [KoraProblem(str(src), 1, f"not UTF-8 text ({exc.reason})")]
    for n, row, problem in records:
        if progress:
            progress()
        if problem or row is None:
            problems.append(KoraProblem(str(src), n, problem or "empty"))
            continue
        try:
            data = convert(row, risks, lengths)
            Scenario.model_validate(data)  # same checks as the loader, before anything is written
        except ValueError as exc:  # includes pydantic's ValidationError
            problems.append(KoraProblem(str(src), n, _one_line(exc)))
            continue
        if data["id"] in seen:
            problems.append(
                KoraProblem(
                    str(src),
                    n,
                    f"duplicate scenario id {data['id']} (first on line {seen[data['id']]})",
                )
            )
            continue
        seen[data["id"]] = n
        target = out / f"{data['id']}.yaml"
        target.write_text(dump(data), encoding="utf-8")
        written.append(target)
    return written, problems


def _one_line(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors(include_url=False)[0]
        loc = ".".join(str(p) for p in first["loc"])
        return f"{loc}: {first['msg']} (record does not make a valid scenario)"
    return str(exc).splitlines()[0]
