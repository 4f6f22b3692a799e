"""Judge-corrected failure rates (PPI++): equal to ppi_py on i.i.d. data, a planted judge bias
removed with calibrated intervals, only design-sampled blind labels used, no labels no crash."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fixtures.tui.helpers import small_teen_store

from branchpoint.analysis.judge_correction.estimators import (
    ALL,
    judge_corrected,
    ppi_design,
    ppi_mean_iid,
)
from branchpoint.analysis.judge_correction.synthetic import Setting, simulate, true_rate
from branchpoint.core.human_labels import LabelRow, sample_queue, save_label, save_labels


def _iid(seed: int, n: int = 300, big_n: int = 5000) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    y = rng.binomial(1, 0.3, n + big_n).astype(float)
    yhat = np.where(y == 1, rng.binomial(1, 0.7, n + big_n), rng.binomial(1, 0.05, n + big_n))
    return y[:n], yhat[:n].astype(float), yhat[n:].astype(float), y, yhat.astype(float)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_iid_estimate_and_interval_equal_ppi_py(seed: int) -> None:
    ppi_py = pytest.importorskip("ppi_py")
    y, yhat, yu, _, _ = _iid(seed)
    est, low, high, lam = ppi_mean_iid(y, yhat, yu, alpha=0.05)
    ref_low, ref_high = ppi_py.ppi_mean_ci(y, yhat, yu, alpha=0.05)
    ref_est = ppi_py.ppi_mean_pointestimate(y, yhat, yu)
    assert abs(est - float(ref_est[0])) < 1e-9
    assert abs(low - float(ref_low[0])) < 1e-9 and abs(high - float(ref_high[0])) < 1e-9
    assert 0 < lam < 1  # power-tuned, not plain PPI or the classical estimate
    for fixed in (0.0, 0.4, 1.0):
        est, low, high, _ = ppi_mean_iid(y, yhat, yu, lam=fixed, alpha=0.05)
        ref_low, ref_high = ppi_py.ppi_mean_ci(y, yhat, yu, lam=fixed, alpha=0.05)
        assert abs(low - float(ref_low[0])) < 1e-9 and abs(high - float(ref_high[0])) < 1e-9


def test_the_design_estimator_with_one_stratum_gives_ppi_pys_point_and_a_close_interval() -> None:
    ppi_py = pytest.importorskip("ppi_py")
    y, yhat, _, y_all, yhat_all = _iid(4)
    labelled = np.zeros(len(y_all), bool)
    labelled[: len(y)] = True
    one = np.zeros(len(y_all))
    each = np.arange(len(y_all))  # every item its own cluster: the i.i.d. case
    for lam in (0.0, 0.3, 1.0):
        est = ppi_design(yhat_all, y_all, labelled, one, each, lam=lam)
        assert not isinstance(est, str)
        ref = ppi_py.ppi_mean_pointestimate(y, yhat, yhat_all, lam=lam)
        assert abs(est.corrected.estimate - float(np.squeeze(ref))) < 1e-9
    est = ppi_design(yhat_all, y_all, labelled, one, each)
    assert not isinstance(est, str)
    # lambda is 1 unless fixed (issue 44: a lambda tuned on the labels under-covered)
    assert est.lam == 1.0
    ref_low, ref_high = ppi_py.ppi_mean_ci(y, yhat, yhat_all, alpha=0.05, lam=1.0)
    assert est.corrected.high - est.corrected.low == pytest.approx(
        float(ref_high[0] - ref_low[0]), rel=0.05
    )


def test_a_planted_judge_bias_is_removed_in_seeded_replications() -> None:
    """A judge that misses 40% of failures (and more for one target), scenarios clustered: the
    corrected interval covers the true rate in >= 94% of replications, the judge-only one far
    less often, and the corrected interval is narrower than the human-only one."""
    s = Setting(
        "test", n_scenarios=60, turns_per_cell=10, n_labels=400,
        base_rates={"a": 0.3, "b": 0.2}, sensitivity={"a": 0.6, "b": 0.45},
        specificity={"a": 0.95, "b": 0.97}, spread=0.8,
    )  # fmt: skip
    rng = np.random.default_rng(20260101)
    covered = {"corrected": 0, "judge_only": 0, "human_only": 0}
    widths = {"corrected": 0.0, "human_only": 0.0}
    reps = 300
    for _ in range(reps):
        st = simulate(s, rng)
        mask = st.target == "b"
        truth = np.mean([true_rate(s, "b", c) for c in s.conditions])
        est = ppi_design(
            st.yhat[mask], st.y[mask], st.labelled[mask], st.stratum[mask], st.scenario[mask]
        )
        assert not isinstance(est, str)
        for kind in covered:
            iv = getattr(est, kind)
            covered[kind] += iv.low <= truth <= iv.high
        for kind in widths:
            iv = getattr(est, kind)
            widths[kind] += (iv.high - iv.low) / reps
    assert covered["corrected"] / reps >= 0.94
    assert covered["judge_only"] / reps < 0.5
    assert widths["corrected"] < widths["human_only"]


def test_a_stratum_with_too_few_labels_or_one_scenario_is_said_not_estimated() -> None:
    yhat = np.array([1.0, 0, 0, 1, 0, 1, 0, 0])
    lab = np.array([True] * 4 + [False] * 4)  # 4 labels: below MIN_LABELS_PER_STRATUM (5)
    assert "too few labels (< 5)" in str(ppi_design(yhat, yhat, lab, np.zeros(8), np.arange(8)))
    lab = np.array([True] * 5 + [False] * 3)
    assert "one scenario" in str(ppi_design(yhat, yhat, lab, np.zeros(8), np.zeros(8)))


# --------------------------------------------------------------------------- from a store


def _judge_verdicts(db: Path) -> dict[tuple[str, int, str], str]:
    return {
        (c, t, k): v
        for c, t, k, v in sqlite3.connect(db).execute(
            "SELECT conversation_id, turn_index, criterion_id, verdict FROM judgments"
        )
    }


def test_a_store_with_no_labels_gives_one_line_not_a_crash(tmp_path: Path) -> None:
    store = small_teen_store(tmp_path / "t.db")
    result = judge_corrected(tmp_path / "t.db")
    assert result.empty and len(result.notes) == 1 and "no design-sampled" in result.notes[0]
    sample_queue(store, n=8, seed=0)  # a design, still without labels
    result = judge_corrected(tmp_path / "t.db")
    assert result.empty and "no design-sampled" in result.notes[0]
    store.close()


def test_only_blind_labels_from_the_design_are_used(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    store = small_teen_store(db)
    verdicts = _judge_verdicts(db)
    queue = sample_queue(store, n=40, seed=3)

    def row(it: object, annotator: str, verdict: str, **kw: object) -> LabelRow:
        return LabelRow(
            conversation_id=it.conversation_id, turn_index=it.turn_index,  # type: ignore[attr-defined]
            rubric_id=it.rubric_id, criterion_id=it.criterion_id,  # type: ignore[attr-defined]
            annotator=annotator, verdict=verdict, **kw,
        )  # fmt: skip

    # the person agrees with the judge except that they see a failure in every 4th item
    rows = [
        row(it, "ann", "fail" if i % 4 == 0 else verdicts[(it.conversation_id, it.turn_index, it.criterion_id)],
            blind=True, design_id=it.design_id)
        for i, it in enumerate(queue)
    ]  # fmt: skip
    save_labels(store, rows)
    before = judge_corrected(db)
    assert not before.empty and before.design_id == queue[0].design_id
    per_target = before.table[before.table["condition"] == ALL]
    assert per_target["n_labelled"].sum() == 40
    assert per_target["corrected"].mean() > per_target["judge_rate"].mean()  # the judge missed some
    assert per_target[["sensitivity", "specificity"]].notna().all().all()

    # hand-picked labels (no design), an unblinded design label and another annotator's label
    # outside the design: kept, counted in the notes, and the estimates do not move
    extra = [it for it in sample_queue(store, n=80, seed=9) if it not in set(queue)][:10]
    save_labels(store, [row(it, "picker", "fail") for it in extra])
    save_labels(
        store, [row(it, "peek", "fail", blind=False, design_id=it.design_id) for it in queue[:5]]
    )
    save_label(store, row(queue[1], "other", "pass"))
    after = judge_corrected(db)
    cols = ["corrected", "corrected_low", "corrected_high", "n_labelled"]
    assert after.table[cols].equals(before.table[cols])
    joined = " ".join(after.notes)
    assert "11 labels made outside a labelling design" in joined
    assert "5 design labels made after revealing" in joined
    store.close()


def _frames(seed: int) -> tuple[pd.DataFrame, ...]:
    """An ED-like study as the store's frames: risk levels, a judge that calls a third of the
    truly 'medium' turns 'high' (over-states risk), a design of 200 labels in two strata."""
    rng = np.random.default_rng(seed)
    n_scen, per = 80, 25
    rows = []
    for target in ("m1", "m2"):
        for g in range(n_scen):
            for t in range(per):
                truth = rng.choice(["high", "medium", "low", "refusal"], p=[0.3, 0.4, 0.25, 0.05])
                judge = "high" if truth == "medium" and rng.random() < 1 / 3 else truth
                rows.append({
                    "conversation_id": f"{target}-{g}", "turn_index": 2 * t + 1, "rubric_id": "ed",
                    "criterion_id": "diet_guidance", "judge": "j", "verdict": judge, "truth": truth,
                    "created_at": "2026-01-01 00:00:00", "run_id": "r", "scenario_id": f"s{g}",
                    "target": target, "condition": "none",
                })  # fmt: skip
    judged = pd.DataFrame(rows)
    drawn = pd.concat(
        [grp.sample(100, random_state=seed) for _, grp in judged.groupby("target")]
    ).assign(design_id="d1")
    labels = drawn.assign(annotator="a", verdict=drawn["truth"], blind=1.0)
    designs = pd.DataFrame([{
        "id": "d1", "kind": "criterion", "settings": {"by_criterion": False},
        "strata": {}, "created_at": "2026-02-01 00:00:00",
    }])  # fmt: skip
    return judged.drop(columns="truth"), labels, designs, drawn, judged


@pytest.mark.slow  # over 2 s (about 3 s of CPU): make test runs it, test-fast does not
def test_the_corrected_mean_risk_score_removes_a_judge_that_over_states_risk() -> None:
    from branchpoint.analysis.judge_correction.estimators import correct_score_frames

    covered, reps = 0, 20
    for seed in range(reps):
        judged, labels, designs, items, truth = _frames(seed)
        result = correct_score_frames(judged, labels, designs, items)
        row = result.table[(result.table["target"] == "m1") & (result.table["condition"] == ALL)]
        row = row.iloc[0]
        on_scale = truth[
            (truth["target"] == "m1") & truth["verdict"].isin(["high", "medium", "low"])
        ]
        # the people's score on the turns the judge scored (refusals judged as refusals drop out)
        scores = on_scale["truth"].map({"high": 0.0, "medium": 1.0, "low": 2.0})
        assert row["judge_mean"] < scores.mean()  # the judge over-states risk
        covered += row["corrected_mean_low"] <= scores.mean() <= row["corrected_mean_high"]
    assert covered / reps >= 0.9


def _paired_arms(rng: np.random.Generator, n_scen: int = 60, turns: int = 20, labels: int = 300):
    """Matched arms: per scenario a baseline and an option arm (post-fork turns), the option
    failing more (logit + 0.8); the judge misses more failures in the option arm (sensitivity
    0.5 against 0.85), so the judge's contrast is shrunk. Labels at random over all turns."""
    from branchpoint.analysis.judge_correction.synthetic import _NODES, _WEIGHTS

    u = rng.standard_normal(n_scen)
    base_logit, shift, spread = -1.2, 0.8, 0.8
    sides = {}
    for name, extra, sens in (("option", shift, 0.5), ("baseline", 0.0, 0.85)):
        scen = np.repeat(np.arange(n_scen), turns)
        p = 1 / (1 + np.exp(-(base_logit + extra + spread * u[scen])))
        y = (rng.random(len(scen)) < p).astype(float)
        yhat = np.where(y == 1, rng.random(len(y)) < sens, rng.random(len(y)) < 0.03).astype(float)
        sides[name] = {"yhat": yhat, "y": y, "cluster": scen, "stratum": np.zeros(len(y))}
    total = 2 * n_scen * turns
    picked = rng.choice(total, labels, replace=False)
    for i, name in enumerate(("option", "baseline")):
        mask = np.zeros(n_scen * turns, bool)
        mask[
            picked[(picked >= i * n_scen * turns) & (picked < (i + 1) * n_scen * turns)]
            - i * n_scen * turns
        ] = True
        sides[name]["labelled"] = mask

    def mean(logit: float) -> float:
        return float(np.sum(_WEIGHTS / (1 + np.exp(-(logit + spread * _NODES)))) / np.sum(_WEIGHTS))

    return sides, mean(base_logit + shift) - mean(base_logit)


@pytest.mark.slow
def test_a_corrected_contrast_removes_a_judge_that_errs_differently_by_arm() -> None:
    from branchpoint.analysis.judge_correction.estimators import ppi_contrast

    rng = np.random.default_rng(7)
    reps, covered, judge_covered, half_labelled = 1000, 0, 0, 0
    for _ in range(reps):
        sides, truth = _paired_arms(rng)
        est = ppi_contrast(sides["option"], sides["baseline"])
        assert not isinstance(est, str)
        covered += est.corrected.low <= truth <= est.corrected.high
        judge_covered += est.judge_only.low <= truth <= est.judge_only.high
        both = sides["option"]["labelled"].reshape(60, 20).any(1) & sides["baseline"][
            "labelled"
        ].reshape(60, 20).any(1)
        half_labelled += int((~both).sum())
    # measured: 93.9% here, 95.3% over 1,500 replications of another seed (nominal 95%; 60
    # scenarios, a symmetric t interval on the difference)
    assert covered / reps >= 0.93
    assert judge_covered / reps < 0.5
    assert half_labelled > 0  # scenarios with one arm labelled only were in the estimate


def test_a_contrast_with_one_unlabelled_side_is_said_not_estimated() -> None:
    from branchpoint.analysis.judge_correction.estimators import ppi_contrast

    sides, _ = _paired_arms(np.random.default_rng(1))
    sides["baseline"]["labelled"][:] = False
    assert "baseline: too few labels" in str(ppi_contrast(sides["option"], sides["baseline"]))
