"""Synthetic judged studies with planted true labels, for the calibration benchmark
(``benchmarks/judge_correction.py``) and the replication test: the judge's errors are known, so
coverage of the judge-only, human-only and corrected intervals can be counted.

A study has scenarios (clusters), each seen by every target x condition; a scenario's difficulty
``u ~ N(0, 1)`` is shared by all its turns and targets, and a turn fails with probability
``logistic(logit(base rate) + spread * u)``. The true rate of a cell is that probability's
mean over scenarios (by quadrature), the superpopulation quantity a study means. The judge
flags a true failure with its target's sensitivity and a non-failure with one minus its
specificity. Labels are drawn as ``branchpoint.core.human_labels`` draws them: at random without replacement,
equal shares per target x condition.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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


# --------------------------------------------------------------------------- matched contrasts


@dataclass(frozen=True)
class ContrastSetting:
    """A teen-like study of one branch point (help: accept, the baseline, or decline) whose
    decline arm fails more by ``delta`` on every criterion after the fork, judged by a judge
    whose sensitivity differs by arm (so the judge's contrast is biased), with ``n_labels``
    design labels drawn at random, equal shares per target x condition."""

    n_scenarios: int = 30
    targets: tuple[str, ...] = ("scripted:a", "scripted:b")
    conditions: tuple[str, ...] = ("none",)  # no condition effect: each a replicate contrast
    n_exchanges: int = 6
    fork_exchange: int = 2  # the decline arm shares the first exchanges with its accept arm
    forked: bool = True  # False: independent arms, every turn compared
    delta: float = 0.2
    base_fail: float = 0.3
    sensitivity: tuple[float, float] = (0.5, 0.9)  # option arm, baseline arm
    specificity: float = 0.95
    n_labels: int = 300
    scenario_sd: float = 0.05


@dataclass
class ContrastStudy:
    """The store's frames as ``branchpoint.analysis.judge_correction.contrasts`` reads them, and the truth."""

    judgments: Any  # judgment table with choice columns and the fork tree
    judged: Any
    labels: Any
    designs: Any
    items: Any
    truth: Any  # the planted verdict of each judged item
    delta: float  # the planted option-minus-baseline difference after the fork


def contrast_study(s: ContrastSetting, rng: np.random.Generator) -> ContrastStudy:
    import pandas as pd

    from branchpoint.analysis.testing.synthetic import Effect, TeenDesign, simulate_teen_judgments

    criteria = {"c1": "area", "c2": "area"}
    d = TeenDesign(
        n_scenarios=s.n_scenarios, targets=s.targets,
        branch_points={"help": ["accept", "decline"]}, n_exchanges=s.n_exchanges,
        criteria=criteria, base_fail=s.base_fail, conditions=s.conditions, condition_effect={},
        effects=(Effect("help", "decline", tuple(criteria), s.delta),), p_error=0.0,
        scenario_sd=s.scenario_sd, run_id="r",
    )  # fmt: skip
    conv, judg = simulate_teen_judgments(d, int(rng.integers(2**31)))
    conv["arm"] = [ch["help"] for ch in conv["choices"]]
    cell = ["scenario_id", "target", "condition", "simulator", "replicate"]
    parent = conv[conv["arm"] == "accept"].set_index(cell)["conversation_id"]
    conv["parent_id"] = [
        parent[tuple(k)] if arm == "decline" and s.forked else None
        for k, arm in zip(conv[cell].itertuples(index=False, name=None), conv["arm"])
    ]
    conv["fork_turn"] = np.where(conv["parent_id"].notna(), 2.0 * s.fork_exchange, np.nan)
    jt = judg.merge(conv.drop(columns=["choices"]), on="conversation_id")
    # the judge: misses failures more often in the option arm
    sens = np.where(jt["arm"] == "decline", s.sensitivity[0], s.sensitivity[1])
    failed = (jt["verdict"] == "fail").to_numpy()
    flag = np.where(failed, rng.random(len(jt)) < sens, rng.random(len(jt)) >= s.specificity)
    judge = np.where(flag, "fail", np.where(failed, "pass", jt["verdict"].astype(object)))
    jt["truth"] = jt["verdict"]
    jt["verdict"] = np.where(jt["verdict"].isna(), None, judge)
    if s.forked:  # the shared prefix: the parent's own turns (and verdicts) copied
        own = jt.set_index(["conversation_id", "turn_index", "criterion_id"])
        pre = jt["parent_id"].notna() & (jt["turn_index"] < jt["fork_turn"])
        src = list(zip(jt.loc[pre, "parent_id"], jt.loc[pre, "turn_index"],
                       jt.loc[pre, "criterion_id"]))  # fmt: skip
        for col in ("applicable", "verdict", "truth"):
            jt.loc[pre, col] = own.loc[src, col].to_numpy()
    jt = jt.assign(
        run_id="r", rubric_id="teen", rubric_hash="h", judge="scripted:judge",
        prompt_version="v1", scenario_path=None, created_at="2026-01-01 00:00:00",
        **{"choice:help": jt["arm"]},
    )  # fmt: skip
    rated = jt["applicable"].astype(bool) & jt["verdict"].notna()
    judged = jt[rated].reset_index(drop=True)
    key = ["conversation_id", "turn_index", "rubric_id", "criterion_id"]
    n_strata = len(s.targets) * len(s.conditions)
    drawn = pd.concat(
        [
            grp.sample(min(len(grp), s.n_labels // n_strata), random_state=rng)
            for _, grp in judged.groupby(["target", "condition"])
        ]
    ).assign(design_id="d1")
    labels = drawn[key].assign(
        annotator="ann", verdict=drawn["truth"].to_numpy(), blind=1.0, design_id="d1"
    )
    designs = pd.DataFrame([{
        "id": "d1", "kind": "criterion", "settings": {"by_criterion": False}, "strata": {},
        "created_at": "2026-02-01 00:00:00",
    }])  # fmt: skip
    judged_cols = [*key, "judge", "verdict", "created_at", "run_id", "scenario_id", "target",
                   "condition"]  # fmt: skip
    table = jt.drop(columns=["truth", "arm", "s", "ti", "realised", "exchange", "score"])
    return ContrastStudy(
        table, judged[judged_cols], labels, designs, drawn[[*key, "design_id"]],
        judged[[*key, "truth"]], s.delta,
    )  # fmt: skip
