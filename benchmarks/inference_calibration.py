"""False-positive rate, interval coverage and power of the matched-contrast tests.

    .venv/bin/python benchmarks/inference_calibration.py [--studies 2000] [--seed 0]

Simulates studies whose option effect varies by scenario (``b_s ~ Normal(mean, 0.08)``, 12
matched pairs per scenario, 6 post-fork turns per arm; see ``branchpoint.analysis.testing.calibration``) at 10,
20 and 40 scenarios, analyses each with the real ``matched_contrasts`` and prints, at alpha 0.05:

- with a mean effect of 0 (zero on average, not in any one scenario): the false-positive rate of
  the primary test (t over scenario means) and of the pair-level tests (McNemar, Wilcoxon, a
  t-test over pairs), and of a cluster bootstrap used as a test; the coverage of the primary
  t interval, the pair-level t interval and the cluster-bootstrap percentile interval;
- with planted mean effects of +5 and +10 points: each method's power.

The primary method's false-positive rate must stay at or below 6.5% with 20 or more scenarios.

Then the design grid of issue 38 (``branchpoint.analysis.testing.calibration.calibrate_design``): 5, 8, 10,
20 and 40 scenarios x scenario sd 0.08 and 0.15 x base failure rates 3% and 30%, with unequal
pairs per scenario (3 to 21), printing per setting the coverage of the failure-rate interval
(``failure_rates``; target >= 94%) and the primary contrast test's false-positive rate under an
exact null (target <= 5.5%). ``--quick`` runs a small grid with few studies (a smoke run).

``--degenerate`` (issue 44): the settings where the usual interval degenerates, through the real
``scenario_level_test`` (the test and interval every matched contrast gets): rare outcomes (1% vs
3%, 2% vs 2%) at 6 and 10 scenarios, where most scenario means are 0 and many studies have no
spread at all; every scenario at the same value (+100 points, and 0 vs 0); 3 to 8 scenarios; and
effects that are +100 in most scenarios and -100 in the rest (skewed, at the bounds). Per setting:
coverage of the true mean difference, false-positive rate where it is 0, and the share of
zero-width intervals (target: none, coverage >= 94%).

``--enactment`` (issue 44): enactment that depends on the chatbot
(``branchpoint.analysis.testing.enactment``): a firm reply (P 0.5) lowers failure by 15 points
and makes the option arm enact with P 0.3 (0.9 after a soft reply); "pre-fork" (one reply shared
by both arms) and "post-fork" (each arm's reply at the branch); mean effect 0 and +10 points
where enacted; 5, 10, 20 and 40 scenarios. Per setting, through the real ``matched_contrasts``
with the manipulation checks: coverage of the ITT truth by the ITT interval and by the
per-protocol one, and each one's rejection rate. Measured (2,000 studies a setting, Monte Carlo
standard error 0.5 points; seed 0): ITT coverage 94.3-95.6% at 10-40 scenarios (100% at 5, where
the sign-flip test cannot reject), ITT false-positive rate 4.4-5.7% (5.7%: pre-fork, 40
scenarios, 1.4 Monte Carlo standard errors above 5%; seeds 7 and 8 gave 4.8% and 5.75%: 5.4%
over 6,000 studies, coverage 94.6%); per protocol, scored against
the ITT truth, covers 23.8-74.0% at 10-40 scenarios with an effect after a post-fork reply, and
with no effect at all rejects 8.8% / 15.7% / 26.1% at 10 / 20 / 40 scenarios (post-fork).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from branchpoint.analysis.testing.calibration import Design, Simulation, calibrate, calibrate_design

SIZES = (10, 20, 40)
EFFECTS = (0.05, 0.10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--studies", type=int, default=2000, help="simulated studies per setting")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--quick", action="store_true", help="smoke run: the design grid only, few studies"
    )
    ap.add_argument("--grid-only", action="store_true", help="only the issue-38 design grid")
    ap.add_argument("--degenerate", action="store_true", help="only the issue-44 degenerate grid")
    ap.add_argument(
        "--enactment", action="store_true", help="only the issue-44 chatbot-dependent enactment"
    )
    args = ap.parse_args()
    if args.enactment:
        studies = 200 if args.quick else args.studies
        sys.exit(0 if enactment_grid(studies, args.seed, quick=args.quick) or args.quick else 1)
    if args.degenerate:
        sys.exit(0 if degenerate_grid(min(args.studies, 500), args.seed) else 1)
    if args.quick or args.grid_only:
        ok = design_grid(200 if args.quick else args.studies, args.seed, quick=args.quick)
        sys.exit(0 if ok or args.quick else 1)
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
    if not design_grid(args.studies, args.seed):
        sys.exit(1)


GRID_SIZES = (5, 8, 10, 20, 40)
GRID_SDS = (0.08, 0.15)
GRID_BASES = (0.03, 0.30)


def design_grid(studies: int, seed: int, *, quick: bool = False) -> bool:
    """Rate-interval coverage and primary false-positive rate over the issue-38 grid."""
    sizes = (5, 10) if quick else GRID_SIZES
    print(
        f"\nDesign grid: {studies} studies per setting, unequal pairs per scenario (3-21), "
        "6 turns per arm, p(applicable) 0.7; alpha 0.05, nominal 95%"
    )
    head = (
        f"{'scenarios':>9} {'sd':>5} {'base':>5} {'true rate':>9} | {'rate cov':>8} | "
        f"{'primary FPR':>11} {'primary cov':>11} | {'s':>5}"
    )
    print(head)
    print("-" * len(head))
    worst_cov, worst_fpr = 1.0, 0.0
    for i, (s, sd, base) in enumerate(
        (s, sd, b) for s in sizes for sd in GRID_SDS for b in GRID_BASES
    ):
        t0 = time.perf_counter()
        c = calibrate_design(Design(s, sd, base, n_studies=studies, seed=seed + 7919 * (i + 1)))
        worst_cov, worst_fpr = min(worst_cov, c.cover_rate), max(worst_fpr, c.reject_primary)
        print(
            f"{s:>9} {sd:>5.2f} {base:>5.0%} {c.truth:>9.1%} | {c.cover_rate:>8.1%} | "
            f"{c.reject_primary:>11.1%} {c.cover_primary:>11.1%} | {time.perf_counter() - t0:5.1f}"
        )
    ok = worst_cov >= 0.94 and worst_fpr <= 0.055
    mc = (0.05 * 0.95 / studies) ** 0.5
    print(
        f"\nworst rate-interval coverage {worst_cov:.1%} (target >= 94%), worst primary "
        f"false-positive rate {worst_fpr:.1%} (target <= 5.5%): {'holds' if ok else 'FAILS'} "
        f"(Monte Carlo standard error {mc:.1%} with {studies} studies)"
    )
    return ok


# (name, scenarios, pairs a scenario, failure rate of the baseline arm, of the option arm)
DEGENERATE = [
    ("1% vs 3%", 6, 12, 0.01, 0.03),
    ("1% vs 3%", 10, 12, 0.01, 0.03),
    ("2% vs 2% (null)", 6, 12, 0.02, 0.02),
    ("2% vs 2% (null)", 10, 12, 0.02, 0.02),
    ("0% vs 0% (all equal)", 8, 12, 0.0, 0.0),
    ("0% vs 100% (all +100)", 6, 12, 0.0, 1.0),
    *(("30% vs 45%", s, 12, 0.30, 0.45) for s in range(3, 9)),
    *(("30% vs 30% (null)", s, 12, 0.30, 0.30) for s in (3, 6, 8)),
]
# (name, scenarios, P(scenario effect +1); else -1): skewed effects at the bounds
SKEWED = [("+100 in 90%, else -100", s, 0.9) for s in (6, 8, 10, 20)]


def degenerate_grid(studies: int, seed: int) -> bool:
    """Coverage, false-positive rate and zero-width share of the matched contrast's interval
    where the usual interval degenerates (see the module docstring)."""
    import numpy as np

    from branchpoint.analysis.stats.inference import scenario_level_test

    rng = np.random.default_rng(seed)
    print(
        f"\nDegenerate designs: {studies} studies per setting; scenario_level_test, bounds -1 to 1"
    )
    head = (f"{'setting':28} {'S':>3} | {'cover':>6} {'FPR':>6} {'zero':>6} {'none':>6} "
            f"{'width':>6} {'no spread':>9}")  # fmt: skip
    print(head)
    print("-" * len(head))
    worst = 1.0

    def run(name: str, s: int, truth: float, means: np.ndarray) -> None:
        nonlocal worst
        cover = fp = zero = none = flat = 0
        width = 0.0
        for x in means:
            r = scenario_level_test(x, np.arange(s), np.zeros(s, int), 1, bounds=(-1.0, 1.0))
            lo, hi = float(r.ci_low[0]), float(r.ci_high[0])
            flat += bool(np.ptp(x) == 0)
            if np.isnan(lo):
                none += 1
                continue
            cover += lo <= truth <= hi
            zero += hi <= lo
            fp += truth == 0 and not lo <= 0 <= hi
            width += hi - lo
        given = max(1, studies - none)
        worst = min(worst, cover / given)
        fpr = f"{fp / given:6.1%}" if truth == 0 else f"{'':>6}"
        print(f"{name:28} {s:>3} | {cover / given:6.1%} {fpr} {zero / given:6.1%} "
              f"{none / studies:6.1%} {width / given:6.3f} {flat / studies:9.1%}", flush=True)  # fmt: skip

    for name, s, pairs, pa, pb in DEGENERATE:
        a = rng.random((studies, s, pairs)) < pa
        b = rng.random((studies, s, pairs)) < pb
        run(name, s, pb - pa, (b.astype(float) - a).mean(axis=2))
    for name, s, q in SKEWED:
        run(name, s, 2 * q - 1, np.where(rng.random((studies, s)) < q, 1.0, -1.0))
    print(f"\nworst coverage {worst:.1%} (target >= 94%): {'holds' if worst >= 0.94 else 'FAILS'}")
    return worst >= 0.94


ENACT_SIZES = (5, 10, 20, 40)
ENACT_EFFECTS = (0.0, 0.10)


def enactment_grid(studies: int, seed: int, *, quick: bool = False) -> bool:
    """ITT and per-protocol intervals where enactment depends on the chatbot (module docstring),
    through the real ``matched_contrasts`` with the manipulation checks as realisation rows."""
    from branchpoint.analysis.testing.enactment import (
        MECHANISMS,
        Enactment,
        calibrate_enactment,
    )

    sizes = (5, 10) if quick else ENACT_SIZES
    e0 = Enactment(10)
    print(
        f"\nEnactment that depends on the chatbot: {studies} studies per setting, 3-21 pairs per "
        f"scenario; a firm reply (P {e0.p_firm}) lowers failure by {e0.firm_shift:.2f} and the "
        f"option arm enacts with P {e0.enact_firm} after it, {e0.enact_soft} otherwise; alpha 0.05"
    )
    head = (
        f"{'mechanism':9} {'effect':>6} {'S':>3} {'ITT truth':>9} {'PP truth':>8} | "
        f"{'ITT cover':>9} {'ITT reject':>10} {'ITT mean':>8} | {'PP cover':>8} "
        f"{'PP reject':>9} {'PP mean':>8} | {'s':>5}"
    )
    print(head + "\n" + "-" * len(head))
    worst_cov, worst_fpr = 1.0, 0.0
    for i, (mech, eff, s) in enumerate(
        (m, e, s) for m in MECHANISMS for e in ENACT_EFFECTS for s in sizes
    ):
        t0 = time.perf_counter()
        c = calibrate_enactment(
            Enactment(s, mech, eff, n_studies=studies, seed=seed + 104729 * (i + 1))
        )
        worst_cov = min(worst_cov, c.cover_itt)
        if eff == 0:
            worst_fpr = max(worst_fpr, c.reject_itt)
        print(
            f"{mech:9} {100 * eff:>+6.0f} {s:>3} {100 * c.truth_itt:>+9.2f} "
            f"{100 * c.truth_pp:>+8.2f} | {c.cover_itt:>9.1%} {c.reject_itt:>10.1%} "
            f"{100 * c.mean_itt:>+8.2f} | {c.cover_pp:>8.1%} {c.reject_pp:>9.1%} "
            f"{100 * c.mean_pp:>+8.2f} | {time.perf_counter() - t0:5.1f}",
            flush=True,
        )
    ok = worst_cov >= 0.94 and worst_fpr <= 0.055
    se_cov, se_fpr = ((p * (1 - p) / studies) ** 0.5 for p in (0.95, 0.05))
    print(
        f"\nworst ITT coverage of the ITT truth {worst_cov:.1%} (target >= 94%), worst ITT "
        f"false-positive rate {worst_fpr:.1%} (target <= 5.5%): {'holds' if ok else 'FAILS'} "
        f"(Monte Carlo standard errors {se_cov:.1%} and {se_fpr:.1%} with {studies} studies). "
        "Per protocol (PP) is scored against the ITT truth: it answers another question, on a "
        "subset the chatbot selected."
    )
    return ok


if __name__ == "__main__":
    main()
