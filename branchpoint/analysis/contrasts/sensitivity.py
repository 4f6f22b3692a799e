"""Simulator sensitivity of the conclusions: do the matched contrasts say the same thing whichever
model played the persona?

The same cells (run, scenario, variant, target, condition, replicate) played by each simulator
are analysed apart, and each contrast's per-protocol result under every other simulator is set
against the reference simulator's (the first named, or ``reference``). A conclusion *moves* when
the difference changes sign, when it is significant (scenario-level Holm p < ``alpha``) under one
simulator and not the other, or when the branch is realised under one only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from branchpoint.analysis.contrasts.matched import (
    CRITERION_KEYS,
    matched_contrasts_within,
    text_levels,
)
from branchpoint.analysis.pairing.realisation import NOT_REALISED
from branchpoint.analysis.tables.judgments import as_conversation_frame

KEYS = ["contrast", "branch_point", "baseline", "option", *CRITERION_KEYS, "risk_area", "condition"]
SHOWN = ["diff", "p_scenario_holm", "n_pairs", "realisation"]


def _verdict(row: Any, alpha: float) -> str:
    ref_real, oth_real = row["realisation_ref"], row["realisation_other"]
    if (ref_real == NOT_REALISED) != (oth_real == NOT_REALISED):
        return "realised under one simulator only"
    if ref_real == NOT_REALISED:
        return "not realised under either"
    moves = []
    d_ref, d_oth = row["diff_ref"], row["diff_other"]
    if np.sign(d_ref) != np.sign(d_oth) and not (np.isnan(d_ref) or np.isnan(d_oth)):
        moves.append("sign changes")
    p_ref, p_oth = row["p_scenario_holm_ref"], row["p_scenario_holm_other"]
    sig_ref = bool(p_ref < alpha) if p_ref == p_ref else False
    sig_oth = bool(p_oth < alpha) if p_oth == p_oth else False
    if sig_ref != sig_oth:
        moves.append("significance changes")
    return "; ".join(moves) if moves else "same conclusion"


def conclusions_by_simulator(
    data: pd.DataFrame,
    realisation: pd.DataFrame | None = None,
    baselines: Mapping[str, str] | None = None,
    *,
    reference: str | None = None,
    alpha: float = 0.05,
    n_boot: int = 200,
    seed: int = 0,
) -> pd.DataFrame:
    """One row per contrast x criterion x condition x other simulator: both results and
    ``verdict`` (``same conclusion``, or what moved). Empty with fewer than two simulators."""
    sims = text_levels(as_conversation_frame(data)["simulator"])
    if len(sims) < 2:
        return pd.DataFrame()
    ref_sim: str = reference if reference is not None and reference in sims else sims[0]
    each = matched_contrasts_within(
        data,
        "simulator",
        baselines,
        realisation=realisation,
        n_boot=n_boot,
        seed=seed,
        per_target=False,
        secondary_tests=False,  # not compared
        counts=False,  # nor are the dropouts and realised arms
    )
    results = {sim: each[sim].contrasts for sim in sims}
    ref = results[ref_sim]
    if ref.empty:
        return pd.DataFrame()
    keys = [k for k in KEYS if k in ref.columns]
    rows = []
    for sim in sims:
        if sim == ref_sim or results[sim].empty:
            continue
        other = results[sim]
        left = ref[[*keys, *[c for c in SHOWN if c in ref.columns]]]
        right = other[[*[k for k in keys if k in other.columns], *SHOWN]]
        m = left.merge(right, on=keys, how="outer", suffixes=("_ref", "_other"))
        m["realisation_ref"] = m["realisation_ref"].fillna(NOT_REALISED)
        m["realisation_other"] = m["realisation_other"].fillna(NOT_REALISED)
        m.insert(0, "simulator_other", sim)
        m.insert(0, "simulator_ref", ref_sim)
        m["verdict"] = [_verdict(r, alpha) for _, r in m.iterrows()]
        rows.append(m)
    return pd.concat(rows, ignore_index=True) if rows else pd.DataFrame()


def moved(table: pd.DataFrame) -> pd.DataFrame:
    """The rows whose conclusion moves between simulators."""
    if table.empty:
        return table
    keep = ~table["verdict"].isin(["same conclusion", "not realised under either"])
    return table[keep.to_numpy()]


def summary_line(table: pd.DataFrame, columns: Sequence[str] = ("contrast", "criterion_id")) -> str:
    """One sentence for the report: whether the conclusions move, and which."""
    if table.empty:
        return "No contrast could be compared across simulators."
    m = moved(table)
    n = int(len(table))
    if m.empty:
        return f"The conclusions do not move: all {n} compared contrasts agree across simulators."
    named = sorted({" / ".join(str(r[c]) for c in columns) for _, r in m.iterrows()})
    return (
        f"The conclusions move for {len(m)} of {n} compared contrasts "
        f"(sign, significance or realisation differs): {', '.join(named)}."
    )
