"""Invariants that hold for any store (issue 44, Build 5), over seeded random synthetic stores.

Every figure that ``analyze --format json`` writes (rates, contrasts, ED, reasoning, realisation,
the judge-corrected rates and contrasts), the labelling design's frame, the conversation-level
export and the unit export (one row per unit of analysis) is compared between a store and a
transformed copy of it:

* adding arms that never fork (the parent's transcript stored again, verdicts copied) changes
  nothing: a copied turn is one observation everywhere;
* adding a second judge (all errors, or verdicts of its own) changes nothing of the first;
* relabelling targets permutes rows and changes no figure;
* swapping a contrast's arms flips its sign;
* no 95% interval from sampled data has zero width;
* each count the report states equals the count in the table it describes.
"""

from __future__ import annotations

import json
import math
import random
import re
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from branchpoint.analysis.export import export_level, read_export
from branchpoint.analysis.judge_correction.contrasts import judge_corrected_contrasts
from branchpoint.analysis.judge_correction.estimators import judge_corrected
from branchpoint.analysis.pipeline import run_analysis
from branchpoint.analysis.report.sections import ratings_sentence
from branchpoint.analysis.tables.judgments import distinct_conversation_counts
from branchpoint.analysis.testing.synthetic import (
    Effect,
    TeenDesign,
    add_error_judge,
    add_second_judge,
    add_unforked_arms,
    write_teen_store,
)
from branchpoint.core import read
from branchpoint.core.human_labels import LabelRow, design_population, sample_queue, save_labels
from branchpoint.core.store import open_store
from branchpoint.tui.commands.analysis_cmds import analysis_json

pytestmark = pytest.mark.slow  # each store runs the whole analysis a few times

SEEDS = (11,)  # one random store a run keeps the file near a minute; change to explore
JUDGE = "scripted:judge"
ERR_JUDGE = "broken:judge"


def _design(seed: int) -> TeenDesign:
    """A random small design: scenarios, targets, conditions, turns, error rate and effects."""
    rng = random.Random(seed)
    return TeenDesign(
        n_scenarios=rng.randint(4, 7),
        targets=tuple(f"scripted:t{i}" for i in range(rng.randint(1, 2))),
        conditions=("none", "teen_aware")[: rng.randint(1, 2)],
        n_exchanges=rng.randint(2, 4),
        p_error=rng.choice([0.0, 0.05]),
        p_applicable=rng.uniform(0.5, 0.9),
        reasoning=True,
        effects=(Effect("limit", "push_back", ("no_diagnosis",), rng.uniform(0.0, 0.3)),),
    )


def _labelled_store(
    path: Path, seed: int, n: int = 40, flip_every: int = 5, design: TeenDesign | None = None
) -> Path:
    """A store with a labelling design and people's labels on it (the judge's verdict, flipped
    for one item in ``flip_every``; 0: never), so that the judge-corrected figures exist."""
    write_teen_store(path, design or _design(seed), seed=seed)
    store = open_store(path)
    queue = sample_queue(store, n=n, seed=seed)
    verdicts = {
        (c, t, r, k): v
        for c, t, r, k, v in sqlite3.connect(path).execute(
            "SELECT conversation_id, turn_index, rubric_id, criterion_id, verdict FROM judgments"
        )
    }
    flip = {"fail": "pass", "pass": "fail", "partial": "fail"}
    rows = []
    for i, it in enumerate(queue):
        v = verdicts[(it.conversation_id, it.turn_index, it.rubric_id, it.criterion_id)]
        rows.append(
            LabelRow(
                conversation_id=it.conversation_id,
                turn_index=it.turn_index,
                rubric_id=it.rubric_id,
                criterion_id=it.criterion_id,
                annotator="person",
                verdict=flip.get(v, v) if flip_every and i % flip_every == 0 else v,
                blind=True,
                design_id=it.design_id,
            )  # fmt: skip
        )
    save_labels(store, rows)
    design_population(store, queue[0].design_id or "")  # the frame, as it was when drawn
    store.close()
    return path


@pytest.fixture(scope="module", params=SEEDS, ids=lambda s: f"seed{s}")
def base(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _labelled_store(tmp_path_factory.mktemp("inv") / "base.db", request.param)


@pytest.fixture(scope="module")
def base_figures(base: Path) -> dict[str, Any]:
    """The base store's figures, computed once for every test of the module."""
    return _figures(base)


def _copy(src: Path, name: str) -> Path:
    """A copy through SQLite's backup API: a file copy would miss what is still in the WAL."""
    out = src.parent / name
    with sqlite3.connect(src) as a, sqlite3.connect(out) as b:
        a.backup(b)
    return out


def _figures(path: Path, baselines: dict[str, str] | None = None) -> dict[str, Any]:
    """Every number analyze --format json gives (notes aside), with the conversation-level and
    unit exports and the labelling designs' frames."""
    a = run_analysis(path, n_boot=0, examples=0, baselines=baselines)
    corrected = judge_corrected(path)
    contrasts = judge_corrected_contrasts(path, baselines=baselines)
    out: dict[str, Any] = json.loads(analysis_json(a, corrected, contrasts))
    out["_analysis"] = a
    out["export_conversation"] = distinct_conversation_counts(path)
    unit = path.with_name(f"{path.stem}-unit.parquet")
    export_level(path, "unit", unit, "parquet")
    out["export_unit"] = read_export(unit)
    store = open_store(path)
    out["designs"] = {d: design_population(store, d) for d in read.label_design_rows(path)["id"]}
    store.close()
    return out


FRAMES = ("rates", "rates_target_condition", "rates_condition", "rates_condition_conversation",
          "rates_risk_area", "realisation", "reasoning")  # fmt: skip


def _frame(records: Any, sort: list[str] | None = None) -> pd.DataFrame:
    f = pd.DataFrame(records or [])
    if f.empty:
        return f
    keys = sort or [c for c in f.columns if f[c].dtype == object]
    keys = [k for k in keys if k in f.columns]
    return f.sort_values(keys).reset_index(drop=True) if keys else f


def _same_frame(x: Any, y: Any, what: str, common: bool = False) -> None:
    """``common``: on the columns both have (a second judge adds a ``judge`` column)."""
    fx, fy = _frame(x), _frame(y)
    if common:
        cols = [c for c in fx.columns if c in fy.columns]
        fx, fy = _frame(fx[cols].to_dict("records")), _frame(fy[cols].to_dict("records"))
    pd.testing.assert_frame_equal(fx, fy, check_dtype=False, obj=what)


ADDED = ("unfired", "again")  # the branch points add_unforked_arms adds (they never fire)


def _original(records: Any) -> Any:
    """Rows of the store's own branch points (an added arm brings a branch point that never
    fired: its own realisation row, 0 of N fired)."""
    return [r for r in records or [] if r.get("branch_point") not in ADDED]


def _same(x: dict[str, Any], y: dict[str, Any], copies: int = 1) -> None:
    for key in ("n_conversations", "n_ratings", "n_reasoning_replies"):
        assert x[key] == y[key], key
    for key in FRAMES:
        _same_frame(_original(x[key]), _original(y[key]), key)
    for fam in ("contrasts", "condition"):
        if x[fam] is None:
            assert y[fam] is None
            continue
        for part in ("contrasts", "per_target", "target_share"):
            _same_frame(x[fam][part], y[fam][part], f"{fam}.{part}")
    for part in ("rates", "contrasts"):
        _same_frame(
            x["judge_corrected"][part],
            y["judge_corrected"][part],
            f"corrected {part}: {y['judge_corrected']['notes']}",
        )
    for part in ("by_model", "branches", "conditions"):
        _same_frame((x["ed"] or {}).get(part), (y["ed"] or {}).get(part), f"ed.{part}")
    keys = ["conversation_id", "rubric_id", "criterion_id", "judge"]
    ex, ey = x["export_conversation"], y["export_conversation"]
    cols = ["n_rated", "n_fail", "n_partial", "n_error"]
    pd.testing.assert_frame_equal(
        ex.sort_values(keys)[cols].reset_index(drop=True),
        ey.sort_values(keys)[cols].reset_index(drop=True),
        obj="export --level conversation",
    )
    assert x["designs"] == y["designs"]
    _same_units(x["export_unit"], y["export_unit"], copies)
    tx, ty = x["time_to_failure"], y["time_to_failure"]
    assert tx["absent"] is None and tx["n_conversations"] == ty["n_conversations"]
    assert tx["per_target"] and tx["matched"] and x["chatbots"]["ranking"]
    for part in ("per_target", "matched"):  # per arm: an added arm is an arm of its own
        _same_frame(tx[part], ty[part], f"time_to_failure.{part}")
    _same_frame(x["chatbots"]["ranking"], y["chatbots"]["ranking"], "chatbots.ranking")


def _same_units(x: pd.DataFrame, y: pd.DataFrame, copies: int = 1) -> None:
    """The same units of analysis, row for row: the verdicts, the arm that produced each turn and
    its conversation; only how many arms carry a unit may differ (``copies`` times as many)."""
    x, y = (f.sort_values("judgment_id").reset_index(drop=True) for f in (x, y))
    cols = [c for c in x.columns if c not in ("arms", "n_arms")]
    assert len(x) == len(y) > 0
    pd.testing.assert_frame_equal(x[cols], y[cols], check_dtype=False, obj="export --level unit")
    assert (y["n_arms"] == copies * x["n_arms"]).all()


def test_adding_arms_that_never_fork_changes_no_figure(
    base: Path, base_figures: dict[str, Any]
) -> None:
    before = base_figures
    more = _copy(base, "unforked.db")
    assert add_unforked_arms(more) > 0
    after = _figures(more)
    assert after["n_copied_conversations"] > 0
    _same(before, after, copies=2)  # each unit is carried by its arm and the arm's copy


def test_copying_prefixes_into_more_arms_twice_changes_no_figure(
    base: Path, base_figures: dict[str, Any]
) -> None:
    """Copies of copies: each turn still resolves to the arm that produced it."""
    before = base_figures
    more = _copy(base, "twice.db")
    add_unforked_arms(more, key="unfired")
    add_unforked_arms(more, key="again")
    _same(before, _figures(more), copies=4)


def _judge_only(f: dict[str, Any]) -> dict[str, Any]:
    out = dict(f)
    for key in FRAMES:
        recs = [r for r in (f[key] or []) if r.get("judge", JUDGE) == JUDGE]
        out[key] = recs
    for fam in ("contrasts", "condition"):
        if f[fam] is not None:
            out[fam] = {
                part: [r for r in f[fam][part] if r.get("judge", JUDGE) == JUDGE]
                for part in ("contrasts", "per_target", "target_share")
            }
    jc = f["judge_corrected"]
    out["judge_corrected"] = {
        part: [r for r in jc[part] if r.get("judge", JUDGE) == JUDGE]
        for part in ("rates", "contrasts")
    }
    ex = f["export_conversation"]
    out["export_conversation"] = ex[ex["judge"] == JUDGE]
    units = f["export_unit"]
    out["export_unit"] = units[units["judge"] == JUDGE]
    return out


@pytest.mark.parametrize("second", ["all errors", "verdicts of its own"])
def test_a_second_judge_changes_nothing_of_the_first(
    base: Path, base_figures: dict[str, Any], second: str
) -> None:
    """Two judges are two measurements of the same replies: each judge's figures, intervals and
    Holm-adjusted p values are its own, whether the second's verdicts are all errors or its own.
    Holm ran over both judges' rows at once (a second judge that mostly agrees doubled the
    family of the first)."""
    more = _copy(base, "secondjudge.db")
    if second == "all errors":
        assert add_error_judge(more, ERR_JUDGE) > 0
    else:
        assert add_second_judge(more, "scripted:judge2", flip_every=4) > 0
    before, after = _judge_only(base_figures), _judge_only(_figures(more))
    for fam in ("contrasts", "condition"):
        if before[fam] is None:
            continue
        for part in ("contrasts", "per_target", "target_share"):
            _same_frame(before[fam][part], after[fam][part], f"{fam}.{part}", common=True)
    for key in FRAMES:
        if key == "reasoning" and second == "all errors":
            continue  # a reply whose only other verdict is an error stays known
        _same_frame(before[key], after[key], key, common=True)
    for part in ("rates", "contrasts"):
        _same_frame(before["judge_corrected"][part], after["judge_corrected"][part],
                    f"corrected {part}", common=True)  # fmt: skip
    _same_units(before["export_unit"], after["export_unit"])
    for part in ("per_target", "matched"):
        first = [r for r in after["time_to_failure"][part] if r.get("judge", JUDGE) == JUDGE]
        _same_frame(before["time_to_failure"][part], first, f"time_to_failure.{part}", common=True)
    ranked = [r for r in after["chatbots"]["ranking"] if r.get("judge", JUDGE) == JUDGE]
    _same_frame(before["chatbots"]["ranking"], ranked, "chatbots.ranking", common=True)


def test_relabelling_targets_permutes_rows(base: Path, base_figures: dict[str, Any]) -> None:
    before = base_figures
    more = _copy(base, "relabel.db")
    conn = sqlite3.connect(more)
    targets = [t for (t,) in conn.execute("SELECT DISTINCT target FROM conversations")]
    new = {t: f"renamed:{i}" for i, t in enumerate(reversed(targets))}
    with conn:
        for t, n in new.items():
            conn.execute("UPDATE conversations SET target = ? WHERE target = ?", (n, t))
    conn.close()
    after = _figures(more)
    for key in ("rates", "rates_target_condition"):
        b = _frame(before[key]).assign(target=lambda f: f["target"].map(new))
        a = _frame(after[key])
        keys = [c for c in ("target", "condition", "criterion_id", "risk_area", "judge") if c in a]
        pd.testing.assert_frame_equal(
            b.sort_values(keys).reset_index(drop=True),
            a.sort_values(keys).reset_index(drop=True),
            check_dtype=False,
            obj=key,
        )
    assert before["n_ratings"] == after["n_ratings"]
    units = before["export_unit"].assign(target=lambda f: f["target"].map(new))
    _same_units(units, after["export_unit"])


def test_swapping_a_contrasts_arms_flips_its_sign(base: Path) -> None:
    ab = _frame(_figures(base, {"limit": "accept_limit"})["contrasts"]["contrasts"])
    ba = _frame(_figures(base, {"limit": "push_back"})["contrasts"]["contrasts"])
    ab = ab[ab["branch_point"] == "limit"].sort_values(["criterion_id", "condition"])
    ba = ba[ba["branch_point"] == "limit"].sort_values(["criterion_id", "condition"])
    assert len(ab) == len(ba) > 0
    np.testing.assert_allclose(ba["diff"].to_numpy(float), -ab["diff"].to_numpy(float), atol=1e-9)
    np.testing.assert_allclose(
        ba["diff_itt"].to_numpy(float), -ab["diff_itt"].to_numpy(float), atol=1e-9
    )


def _intervals(f: dict[str, Any]) -> list[tuple[str, float, float, float]]:
    """(where, n, low, high) of every 95% interval from sampled data in the JSON."""
    out = []

    def scan(where: str, records: Any, n_col: str) -> None:
        for r in records or []:
            for lo, hi in (("ci_low", "ci_high"), ("ci_low_itt", "ci_high_itt")):
                if r.get(lo) is None or r.get(hi) is None:
                    continue
                out.append((where, float(r.get(n_col) or 0), float(r[lo]), float(r[hi])))

    for key in ("rates", "rates_target_condition", "rates_condition"):
        scan(key, f[key], "n_rated")
    for fam in ("contrasts", "condition"):
        if f[fam] is not None:
            scan(fam, f[fam]["contrasts"], "n_pairs")
    ttf = f["time_to_failure"]
    scan("time_to_failure.matched", ttf.get("matched"), "n_pairs")
    # the median's interval (null where the band never gets to one half)
    for part in ("per_target", "per_arm"):
        for r in ttf.get(part) or []:
            if r.get("median_ci_low") is not None and r.get("median_ci_high") is not None:
                out.append((part, float(r["n"]), r["median_ci_low"], r["median_ci_high"]))
    return [x for x in out if x[1] > 0]


def test_no_interval_from_sampled_data_has_zero_width(base_figures: dict[str, Any]) -> None:
    found = _intervals(base_figures)
    assert {"time_to_failure.matched", "per_target"} <= {x[0] for x in found}
    zero = [x for x in found if not x[3] > x[2]]
    assert not zero, zero[:5]
    every = _every_interval({k: v for k, v in base_figures.items() if not k.startswith("_")})
    assert not [x for x in every if not x[2] > x[1]]  # any key's low / high, anywhere


def test_no_interval_has_zero_width_when_every_rating_agrees(tmp_path: Path) -> None:
    d = TeenDesign(
        n_scenarios=6, targets=("scripted:t0",), conditions=("none", "teen_aware"),
        n_exchanges=2, base_fail=0.0, p_partial=0.0, p_error=0.0, scenario_sd=0.0,
        condition_effect={},
    )  # fmt: skip
    write_teen_store(tmp_path / "flat.db", d, seed=3)
    a = run_analysis(tmp_path / "flat.db", n_boot=0, examples=0)
    f = json.loads(analysis_json(a))
    zero = [x for x in _intervals(f) if not x[3] > x[2]]
    assert not zero, zero[:5]


def _every_interval(obj: Any, where: str = "") -> list[tuple[str, float, float]]:
    """(where, low, high) of every interval anywhere in the JSON: each key ending in ``low`` with
    its ``high`` partner (ci_low / ci_high, judge_low / judge_high, kappa_ci_low / ...). Rank sets
    are whole ranks, left out (a rank every pairwise test separates is one rank)."""
    out: list[tuple[str, float, float]] = []
    if isinstance(obj, dict):
        for key, lo in obj.items():
            if not key.endswith("low") and "_low_" not in key or key.startswith("rank"):
                continue
            partner = key[: -len("low")] + "high" if key.endswith("low") else None
            hi = obj.get(partner or key.replace("_low_", "_high_"))
            ok = isinstance(lo, (int, float)) and isinstance(hi, (int, float))
            if ok and not (math.isnan(lo) or math.isnan(hi)):
                out.append((f"{where}.{key}", float(lo), float(hi)))
        for key, value in obj.items():
            out += _every_interval(value, f"{where}.{key}")
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            out += _every_interval(value, f"{where}[{i}]")
    return out


def test_no_interval_anywhere_has_zero_width_when_every_rating_and_label_agrees(
    tmp_path: Path,
) -> None:
    """Every interval of analyze --format json, the corrected tables and agreement included, on
    a store where the labels all agree with the judge and a second judge agrees with the first:
    the judge's sensitivity read "100.0% (100.0% to 100.0%)" and kappa "1.0 to 1.0"."""
    d = TeenDesign(n_scenarios=8, targets=("scripted:t0",), conditions=("none",),
                   n_exchanges=3, p_error=0.0, reasoning=True)  # fmt: skip
    db = _labelled_store(tmp_path / "agree.db", seed=4, n=80, flip_every=0, design=d)
    assert add_second_judge(db, "scripted:judge2", flip_every=10**9) > 0
    a = run_analysis(db, n_boot=200, examples=0)
    f = json.loads(analysis_json(a, judge_corrected(db), judge_corrected_contrasts(db)))
    found = _every_interval(f)
    assert any("sensitivity_low" in w for w, _, _ in found), "no corrected table to check"
    pairs = f["agreement"]["pairs"]  # declined where the resamples have no spread, saying why
    assert pairs and all(
        r["interval"].startswith("none") for r in pairs if r["kappa_ci_low"] is None
    )
    zero = [x for x in found if not x[2] > x[1]]
    assert not zero, zero[:8]


def test_each_count_the_report_states_equals_its_table(
    base: Path, base_figures: dict[str, Any]
) -> None:
    f = base_figures
    a = f["_analysis"]
    sentence = ratings_sentence(a)
    assert sentence.startswith(f"{a.n_conversations} conversations")
    r = pd.DataFrame(f["rates_condition"])
    for judge, n, e in re.findall(
        r"judge (\S+): (\d+) applicable ratings, (\d+) error verdicts", sentence
    ):
        rows = r[r["judge"] == judge] if "judge" in r else r
        assert int(n) == int(rows["n_rated"].sum()) and int(e) == int(rows["n_error"].sum())
    # the rates tables, the conversation export and the judged items count the same ratings
    export = f["export_conversation"]
    ppf = export[export["rubric_id"] == "teen"]
    assert int(ppf["n_rated"].sum()) == int(pd.DataFrame(f["rates"])["n_rated"].sum())
    items = read.judged_items(base)
    assert len(items) == int(pd.DataFrame(f["rates"])["n_rated"].sum())
    u = f["export_unit"]
    rated = u["applicable"].fillna(False).astype(bool) & ~u["verdict"].isin([None, "error"])
    assert int(rated[u["rubric_id"] == "teen"].sum()) == len(items)
    # "N pairs never forked" and "n of m assigned" name counts of pairs, not of rows
    for note in f["contrasts"]["notes"] if f["contrasts"] else []:
        m = re.search(r"(\d+) pairs never forked", note)
        if m:
            assert int(m.group(1)) <= max(
                (c.get("n_assigned_pairs") or 0) for c in f["contrasts"]["contrasts"]
            )
