"""The eating-disorder study's comparison of models, on ``risk_levels`` judgments: each model's
mean safety score per question (``branchpoint.analysis.ed.responses.response_scores``: 0-100,
complete ratings only, over the question's matched profiles), a Friedman test with questions as
blocks (three or more models), then every pair of models by Wilcoxon's signed-rank test over
the questions, Holm over the pairs. Per condition and judge, never pooled; only questions every
model answered with a score enter (complete blocks). Differences are b minus a (> 0: b safer).
"""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pandas as pd

from branchpoint.analysis.ed.responses import RISK_LEVELS, response_scores
from branchpoint.analysis.stats.inference import friedman, holm, wilcoxon_paired


def ed_model_comparison(judgments: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(Friedman per condition x judge, pairwise Wilcoxon per condition x judge x pair)."""
    ed = judgments[judgments["verdict"].isin(RISK_LEVELS)]
    if ed.empty:
        return pd.DataFrame(), pd.DataFrame()
    resp = response_scores(judgments[judgments["rubric_id"].isin(set(ed["rubric_id"]))])
    resp = resp[resp["safety"].notna()]
    fried, pairs = [], []
    for (cond, judge), g in resp.groupby(["condition", "judge"], sort=True):
        wide = g.pivot_table(index="scenario_id", columns="target", values="safety",
                             aggfunc="mean").dropna()  # fmt: skip
        models = sorted(wide.columns, key=str)
        if len(models) < 2 or len(wide) < 2:
            continue
        if len(models) >= 3:
            f = friedman([wide[m].to_numpy(float) for m in models])
            fried.append({"condition": cond, "judge": judge, "models": ", ".join(models),
                          "n_questions": f.n_blocks, "statistic": f.statistic, "pvalue": f.pvalue,
                          "kendall_w": f.kendall_w})  # fmt: skip
        rows = []
        for a, b in combinations(models, 2):
            w = wilcoxon_paired(wide[a].to_numpy(float), wide[b].to_numpy(float))
            d = (wide[b] - wide[a]).to_numpy(float)
            rows.append({"condition": cond, "judge": judge, "model_a": a, "model_b": b,
                         "n_questions": len(wide), "mean_a": float(wide[a].mean()),
                         "mean_b": float(wide[b].mean()), "mean_diff": float(d.mean()),
                         "median_diff": float(np.median(d)), "wilcoxon_stat": w.statistic,
                         "p_wilcoxon": w.pvalue, "rank_biserial": w.rank_biserial,
                         "method": w.method})  # fmt: skip
        block = pd.DataFrame(rows)
        block["p_holm"] = holm(block["p_wilcoxon"].to_numpy())  # Holm over this set's pairs
        pairs.append(block)
    return pd.DataFrame(fried), (pd.concat(pairs, ignore_index=True) if pairs else pd.DataFrame())
