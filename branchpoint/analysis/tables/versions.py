"""Judgments from different rubric or judge-prompt versions are never pooled.

Re-judging after editing a rubric (same id, new content: a new ``rubric_hash``) or with a new
judge prompt (``prompt_version``) adds a second set of verdicts on the same turns. Pooled, they
would double the ratings and mix two instruments. Analysis keeps them apart instead: the judge
label of every version but the only one carries the version, ``judge [rubric 1a2b3c4d, prompt
v2]``, so every table (which already separates judges) shows each version on its own rows, and a
note names the versions with their counts.
"""

from __future__ import annotations

import pandas as pd

VERSION_KEYS = ["rubric_hash", "prompt_version"]


def version_label(judge: str, rubric_hash: str, prompt_version: str) -> str:
    return f"{judge} [rubric {str(rubric_hash)[:8]}, prompt {prompt_version or '-'}]"


def version_conflicts(versions: pd.DataFrame) -> list[str]:
    """One line per rubric x judge judged under two or more versions (``versions``: rubric_id,
    rubric_hash, judge, prompt_version, n; as ``branchpoint.core.read.judgment_versions`` returns)."""
    if versions.empty:
        return []
    lines = []
    for (rubric, judge), grp in versions.groupby(["rubric_id", "judge"], sort=True):
        if len(grp) < 2:
            continue
        parts = [
            f"rubric hash {h}, prompt {p or '-'}: {int(n)} judgments"
            for h, p, n in grp[["rubric_hash", "prompt_version", "n"]].itertuples(index=False)
        ]
        lines.append(
            f"rubric {rubric}, judge {judge}: judgments from {len(grp)} versions "
            f"({'; '.join(parts)}); they are analysed apart, never pooled"
        )
    return lines


def keep_versions_apart(judgments: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """The judgment table with the judge relabelled per version where a rubric x judge has
    several, and the notes that say so. A table with one version per judge is returned as is."""
    if judgments.empty or not set(VERSION_KEYS) <= set(judgments.columns):
        return judgments, []
    keys = ["rubric_id", "judge", *VERSION_KEYS]
    work = judgments[keys].astype(str)
    versions = work.value_counts().rename("n").reset_index()
    notes = version_conflicts(versions)
    if not notes:
        return judgments, []
    per = versions.groupby(["rubric_id", "judge"])["n"].transform("size")
    split = versions[per > 1]
    labels = {
        (r, j, h, p): version_label(j, h, p) for r, j, h, p in split[keys].itertuples(index=False)
    }
    out = judgments.copy()
    tuples = list(work.itertuples(index=False, name=None))
    out["judge"] = [labels.get(t, t[1]) for t in tuples]
    return out, notes


def run_config_conflicts(config_hashes: dict[str, str], conversations: pd.DataFrame) -> list[str]:
    """One line per pair of runs whose configurations differ but which hold the same cell
    (variant x target x condition x simulator): analysing them together would pool two
    instruments as replicates of one. Runs that recorded no configuration hash are not judged.

    ``config_hashes``: run id -> hash (``branchpoint.core.read.run_config_hashes``); ``conversations``: at
    least run_id, variant_id, target, condition and simulator (``branchpoint.core.read.conversation_rows``).
    """
    if len(set(config_hashes.values())) < 2 or conversations.empty:
        return []
    cells = ["variant_id", "target", "condition", "simulator"]
    known = conversations[conversations["run_id"].isin(list(config_hashes))]
    per_cell = known[["run_id", *cells]].drop_duplicates()
    lines: list[str] = []
    seen: set[tuple[str, str]] = set()
    for _, grp in per_cell.groupby(cells, sort=True):
        runs = sorted(set(grp["run_id"]))
        for i, a in enumerate(runs):
            for b in runs[i + 1 :]:
                if config_hashes[a] == config_hashes[b] or (a, b) in seen:
                    continue
                seen.add((a, b))
                row = grp.iloc[0]
                lines.append(
                    f"runs {a} (config {config_hashes[a][:12]}) and {b} (config "
                    f"{config_hashes[b][:12]}) both hold target {row['target']} x condition "
                    f"{row['condition']} with different configurations; analyse them apart "
                    f"(--run {a}, then --run {b}) rather than pooled"
                )
    return lines
