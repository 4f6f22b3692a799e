"""The conversations list's filter line: ``target:litellm:openai/gpt-4o disclosure=open fails:ai_identity
"some words"``.

``field:value`` sets a field, ``branch_point=option`` a variant choice, and any other word is
searched for in the messages. ``enacted:no`` keeps the conversations with a persona turn whose
manipulation check says not enacted, ``realism:low`` those with a persona turn rated below
``mostly`` realistic (issue 36). Values may be quoted. A bad token is one line saying what was
expected, and the list keeps its previous filter.
"""

from __future__ import annotations

import shlex

from branchpoint.core.read.browse import ConversationFilter

FIELDS: dict[str, str] = {
    "run": "run_id",
    "scenario": "scenario",
    "target": "target",
    "condition": "condition",
    "cond": "condition",
    "simulator": "simulator",
    "sim": "simulator",
    "status": "status",
    "stop": "stop_reason",
    "fails": "failing",
    "judge": "judge",
    "text": "text",
}
# Flags on the persona's turns: ``field:value`` -> the filter's boolean field (one value each).
FLAGS: dict[str, tuple[str, str]] = {
    "enacted": ("no", "not_enacted"),
    "realism": ("low", "low_realism"),
}
HELP = (
    "field:value (run scenario target condition simulator status stop fails judge text), "
    "enacted:no, realism:low, branch_point=option, or words to search for"
)


class FilterError(ValueError):
    pass


def parse_filter(line: str, base: ConversationFilter | None = None) -> ConversationFilter:
    """The filter that ``line`` describes; ``base`` supplies the run and the sort order."""
    try:
        tokens = shlex.split(line)
    except ValueError as exc:
        raise FilterError(f"filter: {exc} (expected balanced quotes)") from None
    values: dict[str, object] = {}
    choices: dict[str, str] = {}
    words: list[str] = []
    for token in tokens:
        key, sep, value = token.partition(":")
        if sep and key in FLAGS:
            expected, field = FLAGS[key]
            if value != expected:
                raise FilterError(f"filter: {key}: {value!r} (expected {key}:{expected})")
            values[field] = True
            continue
        if sep and key in FIELDS:
            if not value:
                raise FilterError(f"filter: {key}: empty value (expected {key}:VALUE)")
            values[FIELDS[key]] = value
            continue
        bp, eq, option = token.partition("=")
        if eq and bp and option and ":" not in bp:
            choices[bp] = option
            continue
        if sep and key.isidentifier():
            raise FilterError(f"filter: {key}: unknown field (expected {HELP})")
        words.append(token)
    if words and "text" not in values:
        values["text"] = " ".join(words)
    run_id = values.pop("run_id", base.run_id if base else None)
    sort = base.sort if base else "id"
    return ConversationFilter(run_id=run_id, choices=choices, sort=sort, **values)
