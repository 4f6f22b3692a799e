"""Synthetic judged studies with planted true labels, for the calibration benchmark
(``benchmarks/judge_correction.py``) and the replication test: the judge's errors are known, so
coverage of the judge-only, human-only and corrected intervals can be counted.

A study has scenarios (clusters), each seen by every target x condition; a scenario's difficulty
``u ~ N(0, 1)`` is shared by all its turns and targets, and a turn fails with probability
``logistic(logit(base rate) + spread * u)``. The true rate of a cell is that probability's
mean over scenarios (by quadrature), the superpopulation quantity a study means. The judge
flags a true failure with its target's sensitivity and a non-failure with one minus its
specificity. Labels are drawn as ``core.human_labels`` draws them: at random without replacement,
equal shares per target x condition.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(80)


@dataclass(frozen=True)
class Setting:
    name: str
    n_scenarios: int
    turns_per_cell: int  # judged turns per scenario x target x condition
    n_labels: int
    base_rates: dict[str, float]  # target -> true failure rate at u = 0
    sensitivity: dict[str, float]
    specificity: dict[str, float]
    spread: float = 0.0  # scenario effect on the logit scale: 0 is no clustering
    conditions: tuple[str, ...] = ("none", "teen_aware")
    condition_shift: float = -0.5  # logit shift of the second condition
    informative: bool = True
    targets: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "targets", tuple(self.base_rates))

    @property
    def n_items(self) -> int:
        return self.n_scenarios * self.turns_per_cell * len(self.targets) * len(self.conditions)


def _logit(p: float) -> float:
    return float(np.log(p / (1 - p)))


def cell_logit(s: Setting, target: str, condition: str) -> float:
    shift = s.condition_shift * s.conditions.index(condition)
    return _logit(s.base_rates[target]) + shift


def true_rate(s: Setting, target: str, condition: str) -> float:
    """The cell's failure rate over scenarios: E_u[logistic(logit + spread * u)]."""
    eta = cell_logit(s, target, condition) + s.spread * _NODES
    return float(np.sum(_WEIGHTS / (1 + np.exp(-eta))) / np.sum(_WEIGHTS))


@dataclass
class Study:
    target: np.ndarray
    condition: np.ndarray
    scenario: np.ndarray
    stratum: np.ndarray
    y: np.ndarray  # planted truth
    yhat: np.ndarray  # the judge
    labelled: np.ndarray


def simulate(s: Setting, rng: np.random.Generator) -> Study:
    cells = [(t, c) for t in s.targets for c in s.conditions]
    u = rng.standard_normal(s.n_scenarios)
    scen = np.repeat(np.arange(s.n_scenarios), s.turns_per_cell)
    parts = []
    for t, c in cells:
        p = 1 / (1 + np.exp(-(cell_logit(s, t, c) + s.spread * u[scen])))
        y = rng.random(len(scen)) < p
        flag = np.where(
            y, rng.random(len(y)) < s.sensitivity[t], rng.random(len(y)) >= s.specificity[t]
        )
        parts.append((t, c, scen, y, flag))
    target = np.concatenate([np.full(len(p[2]), p[0]) for p in parts])
    condition = np.concatenate([np.full(len(p[2]), p[1]) for p in parts])
    scenario = np.concatenate([p[2] for p in parts])
    y = np.concatenate([p[3] for p in parts]).astype(float)
    yhat = np.concatenate([p[4] for p in parts]).astype(float)
    if not s.informative:
        yhat = rng.permutation(yhat)  # the judge's flags, unrelated to the truth
    stratum = np.char.add(np.char.add(target.astype(str), " | "), condition.astype(str))
    labelled = np.zeros(len(y), bool)
    share, extra = divmod(s.n_labels, len(cells))
    for i, (t, c) in enumerate(cells):
        idx = np.flatnonzero((target == t) & (condition == c))
        labelled[rng.choice(idx, share + (i < extra), replace=False)] = True
    return Study(target, condition, scenario, stratum, y, yhat, labelled)
