"""False-positive rate, interval coverage and power of the matched-contrast tests.

    .venv/bin/python benchmarks/inference_calibration.py [--studies 2000] [--seed 0]

Simulates studies whose option effect varies by scenario (``b_s ~ Normal(mean, 0.08)``, 12
matched pairs per scenario, 6 post-fork turns per arm; see ``analysis.testing.calibration``) at 10,
20 and 40 scenarios, analyses each with the real ``matched_contrasts`` and prints, at alpha 0.05:

- with a mean effect of 0 (zero on average, not in any one scenario): the false-positive rate of
  the primary test (t over scenario means) and of the pair-level tests (McNemar, Wilcoxon, a
  t-test over pairs), and of a cluster bootstrap used as a test; the coverage of the primary
  t interval, the pair-level t interval and the cluster-bootstrap percentile interval;
- with planted mean effects of +5 and +10 points: each method's power.

The primary method's false-positive rate must stay at or below 6.5% with 20 or more scenarios.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from analysis.testing.calibration import Simulation, calibrate

SIZES = (10, 20, 40)
EFFECTS = (0.05, 0.10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--studies", type=int, default=2000, help="simulated studies per setting")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    base = Simulation(n_scenarios=10, n_studies=args.studies, seed=args.seed)
    print(
        f"{args.studies} studies per setting; {base.pairs_per_scenario} pairs per scenario, "
        f"{base.turns} post-fork turns per arm, baseline {base.base:.0%} (sd {base.base_sd}), "
        f"effect sd {base.effect_sd} across scenarios; alpha 0.05"
    )
    print("\nNull (mean effect 0): false-positive rate | coverage of the true mean effect (0)")
    head = (
        f"{'scenarios':>9} | {'primary':>7} {'McNemar':>7} {'Wilcox.':>7} {'pair t':>7} "
        f"{'boot.':>7} | {'cov prim':>8} {'cov pair':>8} {'cov boot':>8} | {'s':>5}"
    )
    print(head)
    print("-" * len(head))
    worst = 0.0
    for s in SIZES:
        t0 = time.perf_counter()
        c = calibrate(replace(base, n_scenarios=s, seed=args.seed + s))
        if s >= 20:
            worst = max(worst, c.reject_primary)
        print(
            f"{s:>9} | {c.reject_primary:7.1%} {c.reject_mcnemar:7.1%} {c.reject_wilcoxon:7.1%} "
            f"{c.reject_pair_t:7.1%} {c.reject_bootstrap:7.1%} | {c.cover_primary:8.1%} "
            f"{c.cover_pair_t:8.1%} {c.cover_bootstrap:8.1%} | {time.perf_counter() - t0:5.1f}"
        )
    print("\nPower (planted mean effect, points): share of studies rejecting H0")
    head = f"{'scenarios':>9} {'effect':>6} | {'primary':>7} {'McNemar':>7} {'Wilcox.':>7} {'boot.':>7}"
    print(head)
    print("-" * len(head))
    for s in SIZES:
        for e in EFFECTS:
            c = calibrate(
                replace(base, n_scenarios=s, mean_effect=e, seed=args.seed + 1000 + s),
            )
            print(
                f"{s:>9} {100 * e:>+6.0f} | {c.reject_primary:7.1%} {c.reject_mcnemar:7.1%} "
                f"{c.reject_wilcoxon:7.1%} {c.reject_bootstrap:7.1%}"
            )
    verdict = "holds" if worst <= 0.065 else "FAILS"
    mc_se = (0.05 * 0.95 / args.studies) ** 0.5  # Monte Carlo standard error of a 5% rate
    print(
        f"\nprimary false-positive rate at 20+ scenarios: {worst:.1%} (target <= 6.5%: {verdict}; "
        f"Monte Carlo standard error {mc_se:.1%} with {args.studies} studies)"
    )
    print("(power of a pair-level test is not comparable: it is bought with its false positives)")


if __name__ == "__main__":
    main()
