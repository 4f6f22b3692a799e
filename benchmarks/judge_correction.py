"""Calibration of the judge-corrected intervals (issue 34): synthetic studies with planted true
labels and a judge with known, per-target error, labelled as ``branchpoint.core.human_labels`` draws labels.

For each setting it prints, over the target x condition cells and the per-target rates, the
coverage of the nominal 95% judge-only, human-only and corrected (PPI++) intervals of the true
rate, and their mean widths. The corrected interval should cover at least 94% everywhere; the
judge-only one should not when the judge errs; the corrected one should be narrower than the
human-only one where the judge is informative.

    python benchmarks/judge_correction.py [--reps 300] [--seed 0]

The small designs of issue 44 (5-30 scenarios x 50-300 labels, strata of 2-10 labels, 2% failure
rates, judges at 0%, 100% and near-perfect, no difference) are in
``benchmarks/judge_correction_grid.py``. Measured after issue 44 (lambda 1, the label minimum and
the rectifier floor), 250 replications: corrected 94.8% (clustered, spread 1.0), 97.3% (few
labels), 95.8% (strong clustering).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from branchpoint.analysis.judge_correction.estimators import ppi_design
from branchpoint.analysis.judge_correction.synthetic import Setting, simulate, true_rate

SENS, SPEC = 0.7, 0.95
TWO = {"target-a": 0.25, "target-b": 0.15}

SETTINGS = (
    Setting("iid, 10k turns, 500 labels", 500, 5, 500, TWO,
            {t: SENS for t in TWO}, {t: SPEC for t in TWO}),
    Setting("clustered (spread 1.0), 10k, 500 labels", 100, 25, 500, TWO,
            {t: SENS for t in TWO}, {t: SPEC for t in TWO}, spread=1.0),
    Setting("per-target bias (b: sens .5 spec .9), clustered", 100, 25, 500, TWO,
            {"target-a": 0.9, "target-b": 0.5}, {"target-a": 0.97, "target-b": 0.9}, spread=1.0),
    Setting("few labels: 200 of 20k, clustered", 200, 25, 200, TWO,
            {t: SENS for t in TWO}, {t: SPEC for t in TWO}, spread=0.8),
    Setting("many labels: 2,000 of 50k, clustered", 250, 50, 2000, TWO,
            {t: SENS for t in TWO}, {t: SPEC for t in TWO}, spread=0.8),
    Setting("strong clustering (spread 1.5), 40 scenarios, 1,000 labels", 40, 100, 1000, TWO,
            {t: SENS for t in TWO}, {t: SPEC for t in TWO}, spread=1.5),
    Setting("good judge (sens .95 spec .98), clustered", 100, 25, 500, TWO,
            {t: 0.95 for t in TWO}, {t: 0.98 for t in TWO}, spread=1.0),
    Setting("uninformative judge, clustered", 100, 25, 500, TWO,
            {t: SENS for t in TWO}, {t: SPEC for t in TWO}, spread=1.0, informative=False),
)  # fmt: skip

KINDS = ("judge_only", "human_only", "corrected")


def replicate(s: Setting, rng: np.random.Generator) -> dict[str, list[tuple[bool, float]]]:
    """One synthetic study: (covered, width) of each interval, per cell and per target."""
    st = simulate(s, rng)
    out: dict[str, list[tuple[bool, float]]] = {k: [] for k in KINDS}
    groups = [
        (t, c, (st.target == t) & (st.condition == c)) for t in s.targets for c in s.conditions
    ]
    groups += [(t, None, st.target == t) for t in s.targets]
    for t, c, mask in groups:
        if c is None:  # the per-target rate: its cells weighted by their (equal) sizes
            truth = float(np.mean([true_rate(s, t, cc) for cc in s.conditions]))
        else:
            truth = true_rate(s, t, c)
        est = ppi_design(
            st.yhat[mask], st.y[mask], st.labelled[mask], st.stratum[mask], st.scenario[mask]
        )
        assert not isinstance(est, str), est
        for kind in KINDS:
            iv = getattr(est, kind)
            out[kind].append((iv.low <= truth <= iv.high, iv.high - iv.low))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", type=int, nargs="*", help="settings to run, by position (from 0)")
    ap.add_argument("--by-group", action="store_true", help="print each group's coverage too")
    args = ap.parse_args()
    print(f"nominal 95% intervals, {args.reps} replications per setting; coverage of the true rate "
          "over 4 target x condition cells and 2 per-target rates (min over those groups in brackets)")  # fmt: skip
    head = f"{'setting':58} {'turns':>6} {'labels':>6}"
    for kind in KINDS:
        head += f" | {kind:>10} cover (min)  width"
    print(head)
    start = time.perf_counter()
    for i, s in enumerate(SETTINGS):
        if args.only and i not in args.only:
            continue
        rng = np.random.default_rng([args.seed, i])
        per_group: dict[str, list[list[tuple[bool, float]]]] = {k: [] for k in KINDS}
        for _ in range(args.reps):
            rep = replicate(s, rng)
            for k in KINDS:
                per_group[k].append(rep[k])
        line = f"{s.name:58} {s.n_items:>6} {s.n_labels:>6}"
        for k in KINDS:
            cov = np.array([[c for c, _ in rep] for rep in per_group[k]], float)  # reps x groups
            wid = np.array([[w for _, w in rep] for rep in per_group[k]], float)
            line += f" | {cov.mean():>16.1%} ({cov.mean(0).min():.1%}) {wid.mean():.3f}"
        print(line, flush=True)
        if args.by_group:
            for k in KINDS:
                cov = np.array([[c for c, _ in rep] for rep in per_group[k]], float)
                print(f"    {k}: " + " ".join(f"{c:.1%}" for c in cov.mean(0)))
    print(f"{time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
