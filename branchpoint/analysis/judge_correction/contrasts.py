"""Judge-corrected matched contrasts: the option-minus-baseline difference in post-fork failure
rates, corrected for the judge's errors with the labelling design's blind labels (PPI++).

The pairs are the matched contrasts' own (``branchpoint.analysis.contrasts.matched``): for each branch point and
option, ``candidate_pairs`` matches every option arm with its baseline arm (same run, scenario,
target, condition, simulator, replicate and other choices), ``with_realisation`` and
``per_protocol_pairs`` keep the pairs whose two arms realised their option and rated the
criterion after their fork. Each side of a contrast is the set of judged turns after the fork of
its arms: the option side the option arms' post-fork turns, the baseline side the baseline
arms'. A turn carried by two arms of one side (a copied prefix) is one item, kept in the arm
that produced it whichever copy was labelled (a rule that does not look at the labels, so the
labelled items of a side stay a random sample of it); an arm that never forked is no pair and
adds nothing.

The estimand is the difference of the two sides' pooled post-fork failure rates (each judged turn
weighs alike; ``diff_pooled`` in the contrasts table), judge-only, people-only and corrected
alike, so the three are comparable. ``ppi_contrast`` computes it: each side is corrected by the
design-drawn labels that fell on it, which are a random sample of that side's turns within each
design stratum (post-stratified, as the corrected rates are); labels need not fall on both arms of
a pair. The variance is clustered by scenario, the two sides paired through their scenario
totals, lambda 1 (``estimators.DEFAULT_LAMBDA``). A side with fewer than
``MIN_LABELS_PER_STRATUM`` labels in a stratum, or a contrast with one scenario, gives no corrected
figure, said in one line.

Only blind labels made from a design's queue count (``design_data``, as for the rates).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from branchpoint.analysis.judge_correction.estimators import (
    ALL,
    Correction,
    design_data,
    ppi_contrast,
    store_frames,
)
from branchpoint.core.scales import PASS_PARTIAL_FAIL

TITLE = "Judge-corrected contrasts"
SIDES = (("option", "b"), ("baseline", "a"))
# Each per-protocol figure of a corrected contrast, given again over every assigned pair (*_itt)
ITT_FIGURES = ("n_pairs", "judge_diff", "judge_low", "judge_high", "human_diff", "human_low",
               "human_high", "corrected", "corrected_low", "corrected_high")  # fmt: skip  # candidate_pairs: a is the baseline arm
ITEM_KEYS = ["conversation_id", "rubric_id", "criterion_id", "judge"]
METHOD = (
    "Each matched contrast (post-fork turns of realised pairs, the pairs of the contrasts "
    "above) as the difference of the option arms' and the baseline arms' pooled post-fork "
    "failure rates, option minus baseline, in percentage points: judge-only, people-only (the "
    "labelled turns alone) and judge-corrected (PPI++). Valid whether or not both arms of a pair "
    "were labelled: each side is corrected by its own design-drawn labels, a random sample of "
    "that side's turns within each design stratum; the interval (95%) is clustered by scenario, "
    "the two sides paired through their scenario totals. A contrast needs at least two labels "
    "per stratum on each side and two scenarios; otherwise it says why. Realised pairs are a "
    "subset selected after assignment (whether a branch is enacted can depend on the chatbot), "
    "so beside each corrected figure is the corrected intention-to-treat figure over every "
    "assigned pair rated after its fork, with its interval."
)


def _text(frame: pd.DataFrame) -> pd.DataFrame:
    """Categorical key columns (``candidate_pairs``) as plain text, for merging."""
    out = frame.copy()
    for col in out.columns:
        if isinstance(out[col].dtype, pd.CategoricalDtype):
            out[col] = out[col].astype(object)
    return out


def _ppf_judgments(judgments: pd.DataFrame) -> pd.DataFrame:
    """The rubrics the matched contrasts cover: those rated on the pass / partial / fail scale
    (a rubric rated only on other levels, the ED risk levels, has its own contrasts)."""
    if judgments.empty:
        return judgments
    on_scale = judgments["verdict"].isin(PASS_PARTIAL_FAIL.levels)
    rubrics = set(judgments.loc[on_scale.to_numpy(), "rubric_id"])
    return judgments[judgments["rubric_id"].isin(rubrics)]


def side_items(pairs: pd.DataFrame, side: str, data: pd.DataFrame, tree: Any) -> pd.DataFrame:
    """The design's judged items on one side (``a`` baseline, ``b`` option) of ``pairs``: each
    arm's turns from the pair's fork on, a copied turn once (kept in the arm that produced it)."""
    from branchpoint.core.read.units import turn_roots

    arms = pd.DataFrame(
        {
            "conversation_id": pairs[f"conversation_id_{side}"].astype(str).to_numpy(),
            "rubric_id": pairs["rubric_id"].astype(str).to_numpy(),
            "criterion_id": pairs["criterion_id"].astype(str).to_numpy(),
            "judge": pairs["judge"].astype(str).to_numpy(),
            "fork_turn": pairs["fork_turn"].to_numpy(float),
            "pair": pairs["_pair"].to_numpy(),
        }
    )
    items = arms.merge(data, on=ITEM_KEYS, how="inner")
    items = items[items["turn_index"].to_numpy(float) >= items["fork_turn"].to_numpy(float)]
    if items.empty or not tree.has_forks:
        return items
    items = items.assign(_root=turn_roots(items, tree))
    items = items.assign(_copy=items["conversation_id"] != items["_root"])
    items = items.sort_values(["_copy", "conversation_id"], kind="stable")
    keep = ~items.duplicated(["_root", "turn_index", "rubric_id", "criterion_id", "judge"])
    return items[keep].drop(columns=["_root", "_copy"]).sort_index()


def _arrays(items: pd.DataFrame) -> dict[str, np.ndarray]:
    return {
        "yhat": items["yhat"].to_numpy(float),
        "y": items["y"].fillna(0).to_numpy(float),
        "labelled": items["labelled"].to_numpy(bool),
        "stratum": items["stratum"].to_numpy(),
        "cluster": items["scenario_id"].astype(str).to_numpy(),
    }


def contrast_row(option: pd.DataFrame, baseline: pd.DataFrame, alpha: float) -> dict[str, Any]:
    """One corrected contrast from its two sides' items (``side_items``)."""
    est = ppi_contrast(_arrays(option), _arrays(baseline), alpha=alpha)
    scen = pd.concat([option["scenario_id"], baseline["scenario_id"]]).astype(str)
    out: dict[str, Any] = {
        "n_scenarios": int(scen.nunique()),
        "n_option": len(option),
        "n_baseline": len(baseline),
        "labelled_option": int(option["labelled"].sum()),
        "labelled_baseline": int(baseline["labelled"].sum()),
    }
    if isinstance(est, str):
        blank = ("judge_low", "judge_high", "human_diff", "human_low", "human_high",
                 "corrected", "corrected_low", "corrected_high", "lam")  # fmt: skip
        out.update(dict.fromkeys(blank, np.nan))
        out.update(judge_diff=float(option["yhat"].mean() - baseline["yhat"].mean()), note=est)
        return out
    out.update(
        judge_diff=est.judge_only.estimate, judge_low=est.judge_only.low,
        judge_high=est.judge_only.high, human_diff=est.human_only.estimate,
        human_low=est.human_only.low, human_high=est.human_only.high,
        corrected=est.corrected.estimate, corrected_low=est.corrected.low,
        corrected_high=est.corrected.high, lam=est.lam, note="",
        lambda_rule=est.lambda_rule, variance_rule=est.variance_rule,
    )  # fmt: skip
    return out


def _contrast_pairs(
    judgments: pd.DataFrame,
    realisation: pd.DataFrame | None,
    baselines: Mapping[str, str] | None,
    notes: list[str],
    itt: bool = False,
) -> tuple[list[tuple[dict[str, str], pd.DataFrame]], Any]:
    """Per contrast its label and its realised pairs rated after the fork (``itt``: every
    assigned pair rated after the fork), built by the matched contrasts' own functions (one
    pairing in the project), with the fork tree."""
    from branchpoint.analysis.contrasts.matched import (
        PAIR_KEYS,
        Encoded,
        _prepare,
        candidate_pairs,
        resolve_baselines,
    )
    from branchpoint.analysis.pairing.realisation import per_protocol_pairs, with_realisation
    from branchpoint.analysis.tables.judgments import choice_column, choice_columns

    cc, tree, turns = _prepare(judgments, notes)
    out: list[tuple[dict[str, str], pd.DataFrame]] = []
    enc = Encoded(cc)
    choice_cols = choice_columns(cc)
    for bp, baseline, _src in resolve_baselines(cc, baselines).itertuples(index=False):
        col = choice_column(bp)
        match = [*PAIR_KEYS, *[c for c in choice_cols if c != col]]
        for opt in sorted(cc[col].dropna().astype(str).unique()):
            if opt == baseline:
                continue
            cand = candidate_pairs(cc, col, baseline, opt, match, enc, turns=turns, tree=tree)
            if cand.empty:
                continue
            realised = with_realisation(cand, realisation, bp)
            # ITT: every assigned pair rated after its fork, realised or not (a pair that never
            # forked has no post-fork item to correct)
            pairs = realised if itt else per_protocol_pairs(realised)
            if itt:
                pairs = pairs[(pairs["status"] == "pair").to_numpy()]
            if pairs.empty:
                continue
            label = {"contrast": f"{bp}: {baseline} → {opt}", "branch_point": bp,
                     "baseline": baseline, "option": opt}  # fmt: skip
            out.append((label, _text(pairs).assign(_pair=np.arange(len(pairs)))))
    return out, tree


def correct_contrast_frames(
    judgments: pd.DataFrame,
    judged: pd.DataFrame,
    labels: pd.DataFrame,
    designs: pd.DataFrame,
    items: pd.DataFrame,
    *,
    realisation: pd.DataFrame | None = None,
    baselines: Mapping[str, str] | None = None,
    alpha: float = 0.05,
) -> Correction:
    """The corrected contrasts from the store's frames: ``judgments`` a judgment table with the
    fork tree (``branchpoint.analysis.tables.judgments.judgment_table`` joined with ``branchpoint.core.read.conversation_tree``),
    the other four as ``correct_frames`` takes them, ``realisation`` as ``matched_contrasts``.

    One row per judge x contrast x condition x rubric x criterion, and per judge x contrast x
    condition x rubric over the rubric's criteria (``criterion_id`` = ``ALL``); conditions are
    never pooled, targets are (as in the contrasts table)."""
    d = design_data(judged, labels, designs, items)
    if d.data is None:
        return Correction(pd.DataFrame(), d.notes)
    notes: list[str] = []
    ppf = _ppf_judgments(judgments)
    contrasts, tree = _contrast_pairs(ppf, realisation, baselines, notes)
    if not contrasts:
        return Correction(
            pd.DataFrame(), ["no matched pairs rated after their fork to correct", *d.notes],
            d.design_id,
        )  # fmt: skip
    data = d.data.assign(turn_index=pd.to_numeric(d.data["turn_index"]))
    table = _corrected_rows(contrasts, data, tree, alpha)
    # The intention-to-treat figure beside every per-protocol one: realised pairs are selected
    # after assignment (by the chatbot's replies too), so they alone can be biased.
    itt_pairs, _ = _contrast_pairs(ppf, realisation, baselines, [], itt=True)
    itt = _corrected_rows(itt_pairs, data, tree, alpha) if itt_pairs else pd.DataFrame()
    keys = ["judge", "contrast", "condition", "rubric_id", "criterion_id"]
    if not itt.empty and "corrected" in itt.columns:
        cols = [c for c in ITT_FIGURES if c in itt.columns]
        side = itt[[*keys, *cols]].rename(columns={c: f"{c}_itt" for c in cols})
        table = table.merge(side, on=keys, how="left")
    return Correction(table, [*d.notes, *notes], d.design_id)


def _corrected_rows(
    contrasts: list[tuple[dict[str, str], pd.DataFrame]],
    data: pd.DataFrame,
    tree: Any,
    alpha: float,
) -> pd.DataFrame:
    """One corrected row per judge x contrast x condition x rubric (x criterion) of ``contrasts``."""
    rows: list[dict[str, Any]] = []
    for label, pairs in contrasts:
        option = side_items(pairs, "b", data, tree)
        base = side_items(pairs, "a", data, tree)
        keys = ["judge", "condition", "rubric_id"]
        for by in ([*keys, "criterion_id"], keys):
            code = pairs.groupby(by, sort=True).ngroup().to_numpy()
            n_pairs = (
                pairs.assign(_g=code)
                .drop_duplicates(["_g", "conversation_id_a", "conversation_id_b"])
                .groupby("_g")
                .size()
            )
            sides = [
                dict(iter(items.groupby(code[items["pair"].to_numpy()], sort=False)))
                for items in (option, base)
            ]
            for g, first in pairs.assign(_g=code).drop_duplicates("_g").set_index("_g").iterrows():
                rec: dict[str, Any] = {"judge": first["judge"], **label,
                                       "condition": first["condition"],
                                       "rubric_id": first["rubric_id"], "criterion_id": ALL,
                                       "n_pairs": int(n_pairs[g])}  # fmt: skip
                if "criterion_id" in by:
                    rec["criterion_id"] = first["criterion_id"]
                opt, bas = sides[0].get(g), sides[1].get(g)
                if opt is None or bas is None:
                    rows.append({**rec, "note": "no design items after the fork on one side"})
                    continue
                rows.append({**rec, **contrast_row(opt, bas, alpha)})
    return pd.DataFrame(rows)


def contrast_store_frames(
    store_or_db: Any, run: str | Sequence[str] | None = None, exclude: Collection[str] = ()
) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """(judgment table with the fork tree, realisation rows) of a store: what the pairing reads,
    without the conversations in ``exclude`` (as ``run_analysis`` leaves them out)."""
    from branchpoint.analysis.judge_correction.estimators import without_conversations
    from branchpoint.analysis.tables.judgments import judgment_table, resolve_runs
    from branchpoint.core import read

    runs = resolve_runs(store_or_db, run)
    judgments = without_conversations(judgment_table(store_or_db, runs), exclude)
    tree = without_conversations(read.conversation_tree(store_or_db, runs), exclude)
    realisation = without_conversations(read.realisation_rows(store_or_db, runs), exclude)
    return judgments.merge(tree, on="conversation_id", how="left"), realisation


def judge_corrected_contrasts(
    store_or_db: Any,
    run: str | Sequence[str] | None = None,
    *,
    baselines: Mapping[str, str] | None = None,
    alpha: float = 0.05,
    frames: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame] | None = None,
    exclude: Collection[str] = (),
) -> Correction:
    """``correct_contrast_frames`` from a store (``frames``: ``store_frames`` already read, with
    the same ``exclude``). The judgment table is read only when design labels exist."""
    judged, labels, designs, items = (
        frames if frames is not None else store_frames(store_or_db, run, exclude)
    )
    if judged.empty:
        return correct_contrast_frames(judged, judged, labels, designs, items, alpha=alpha)
    judgments, realisation = contrast_store_frames(store_or_db, run, exclude)
    return correct_contrast_frames(
        judgments, judged, labels, designs, items,
        realisation=realisation, baselines=baselines, alpha=alpha,
    )  # fmt: skip


def summary_line(c: Correction) -> str | None:
    """One line when no contrast has a corrected figure (why, from the first row's note), else
    None."""
    if c.empty:
        return c.notes[0] if c.notes else "no matched contrasts"
    done = c.table["note"].fillna("") == ""
    if done.any():
        return None
    first = str(c.table["note"].iloc[0])
    return (
        f"no contrast has enough design labels for a corrected figure "
        f"({len(c.table)} rows; e.g. {c.table['contrast'].iloc[0]}: {first})"
    )


def _pp(x: Any, sign: bool = True) -> str:
    if x is None or (isinstance(x, float) and np.isnan(x)):
        return ""
    return f"{100 * float(x):+.1f}" if sign else f"{100 * float(x):.1f}"


def _iv(row: pd.Series, est: str, low: str, high: str) -> str:
    value = row.get(est)
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "n/a"
    lo = row.get(low)
    if lo is None or (isinstance(lo, float) and np.isnan(lo)):
        return _pp(value)
    return f"{_pp(value)} ({_pp(lo)} to {_pp(row.get(high))})"


def _iv_itt(row: pd.Series, figure: str) -> str:
    """A figure's intention-to-treat value and interval (``*_itt``), blank where none was made."""
    if f"{figure}_itt" not in row:
        return ""
    stem = figure.removesuffix("_diff")  # judge_diff: judge_low_itt; corrected: corrected_low_itt
    return _iv(row, f"{figure}_itt", f"{stem}_low_itt", f"{stem}_high_itt")


def contrast_display(table: pd.DataFrame) -> pd.DataFrame:
    """The corrected contrasts for people: differences in percentage points with intervals."""
    rows = []
    for _, r in table.iterrows():
        note = r.get("note")
        rows.append(
            {
                "judge": r["judge"],
                "contrast": r["contrast"],
                "condition": r["condition"],
                "criterion": r["criterion_id"],
                "scenarios": "" if pd.isna(r.get("n_scenarios")) else int(r["n_scenarios"]),
                "labelled (option/baseline)": ""
                if pd.isna(r.get("labelled_option"))
                else f"{int(r['labelled_option'])}/{int(r['labelled_baseline'])}",
                "judge only": _iv(r, "judge_diff", "judge_low", "judge_high"),
                "judge only, intention to treat": _iv_itt(r, "judge_diff"),
                "people only": _iv(r, "human_diff", "human_low", "human_high"),
                "people only, intention to treat": _iv_itt(r, "human_diff"),
                "corrected": f"n/a: {note}"
                if isinstance(note, str) and note
                else _iv(r, "corrected", "corrected_low", "corrected_high"),
                "lambda": "" if pd.isna(r.get("lam")) else f"{float(r['lam']):.2f}",
                # per protocol above; every assigned pair rated after its fork here
                "corrected, intention to treat": _iv_itt(r, "corrected"),
            }
        )
    return pd.DataFrame(rows)
