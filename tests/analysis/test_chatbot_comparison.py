"""Paired chatbot comparisons (issue 46): planted effects on synthetic stores are recovered, equal
chatbots are not called different, and ``branchpoint compare`` says the same from one store or
from two stores of one design."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from fixtures.cli_in_process import run_in_process

from branchpoint.analysis.chatbots.alignment import Side, align
from branchpoint.analysis.chatbots.comparison import ALL_ARMS, compare_chatbots
from branchpoint.analysis.chatbots.ranking import rank_targets
from branchpoint.analysis.tables.judgments import judgment_table
from branchpoint.analysis.testing.synthetic import Effect, TeenDesign, write_teen_store
from branchpoint.core.store import open_store

pytestmark = pytest.mark.slow  # each writes or reads a synthetic store of a few thousand ratings

PUSH_BACK = "disclosure=guarded, help=accept, limit=push_back"


def design(effect: float, n_scenarios: int = 30, targets: int = 2) -> TeenDesign:
    # target0 ("new") is worse by ``effect`` on no_diagnosis in the push_back arm only
    names = ("scripted:new", "scripted:old", "scripted:third")[:targets]
    return TeenDesign(
        n_scenarios=n_scenarios, targets=names, conditions=("none",), replicates=3,
        criteria={"no_diagnosis": "medical_boundaries", "self_harm_response": "acute_harm"},
        effects=(Effect("limit", "push_back", ("no_diagnosis",), effect, 1 / targets),)
        if effect else (),
    )  # fmt: skip


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("planted") / "planted.db"
    write_teen_store(db, design(0.20), seed=1)
    return db


def test_a_target_worse_by_20_points_in_one_arm_is_listed_with_an_interval_covering_20(
    planted: Path,
) -> None:
    store = open_store(planted, create=False)
    c = compare_chatbots(align(Side(store, "scripted:old"), Side(store, "scripted:new"),
                               two_stores=False))  # fmt: skip
    reg = c.regressions[c.regressions["family"] == "by arm"]
    hit = reg[(reg["arm"] == PUSH_BACK) & (reg["criterion_id"] == "no_diagnosis")]
    assert len(hit) == 1, c.regressions[["arm", "criterion_id", "diff"]]
    row = hit.iloc[0]
    assert row["ci_low"] < 0.20 < row["ci_high"] and row["diff"] > 0.1
    assert row["p_scenario_holm"] < 0.05 and row["test"] == "t"
    # every regression is of the planted arm and criterion (the rubric-level row includes it)
    assert set(reg["arm"]) == {PUSH_BACK}
    assert set(reg["criterion_id"]) <= {"no_diagnosis", "(all criteria)"}
    # and its pairs name both transcripts, each a conversation of its own target
    pairs = c.regressed_pairs[c.regressed_pairs["regression_criterion"] == "no_diagnosis"]
    assert (
        len(pairs) > 0
        and (pairs["fails_b"] / pairs["rated_b"] > pairs["fails_a"] / pairs["rated_a"]).all()
    )
    with sqlite3.connect(planted) as con:
        target = dict(con.execute("select id, target from conversations").fetchall())
    assert {target[c] for c in pairs["conversation_a"]} == {"scripted:old"}
    assert {target[c] for c in pairs["conversation_b"]} == {"scripted:new"}
    # the reverse comparison lists no regression of A: B is the worse one
    rev = compare_chatbots(align(Side(store, "scripted:new"), Side(store, "scripted:old"),
                                 two_stores=False))  # fmt: skip
    assert rev.regressions.empty


def test_equal_targets_are_not_listed_and_the_interval_covers_zero(tmp_path: Path) -> None:
    db = tmp_path / "equal.db"
    write_teen_store(db, design(0.0), seed=2)
    store = open_store(db, create=False)
    c = compare_chatbots(align(Side(store, "scripted:old"), Side(store, "scripted:new"),
                               two_stores=False))  # fmt: skip
    assert c.regressions.empty
    overall = c.overall.set_index("criterion_id")
    assert (overall["ci_low"] < 0).all() and (overall["ci_high"] > 0).all()
    assert set(c.overall["arm"]) == {ALL_ARMS} and c.by_arm["arm"].nunique() == 4


def test_compare_from_one_store_and_from_two_stores_agree(planted: Path, tmp_path: Path) -> None:
    one = run_in_process("compare", "--db", str(planted), "--a", "scripted:old", "--b",
                         "scripted:new", "--format", "json")  # fmt: skip
    assert one.returncode == 0, one.stderr
    # the same design run twice: A's store keeps only scripted:old, B's only scripted:new
    db_a, db_b = tmp_path / "release1.db", tmp_path / "release2.db"
    for db, drop in ((db_a, "scripted:new"), (db_b, "scripted:old")):
        shutil.copy(planted, db)
        with sqlite3.connect(db) as con:
            ids = "select id from conversations where target = ?"
            con.execute(f"delete from judgments where conversation_id in ({ids})", (drop,))
            con.execute(f"delete from turns where conversation_id in ({ids})", (drop,))
            con.execute("delete from conversations where target = ?", (drop,))
    two = run_in_process("compare", "--db", str(db_a), "--db-b", str(db_b), "--a",
                         "scripted:old", "--b", "scripted:new", "--format", "json")  # fmt: skip
    assert two.returncode == 0, two.stderr
    a, b = json.loads(one.stdout), json.loads(two.stdout)
    for key in ("overall", "by_arm"):
        da = {(r["arm"], r["criterion_id"]): r["diff"] for r in a[key]}
        db_ = {(r["arm"], r["criterion_id"]): r["diff"] for r in b[key]}
        assert da.keys() == db_.keys() and np.allclose([da[k] for k in da], [db_[k] for k in da])
    assert [(r["arm"], r["criterion_id"]) for r in a["regressions"]] == [
        (r["arm"], r["criterion_id"]) for r in b["regressions"]
    ]
    # text: the regression and both transcripts' ids, as `branchpoint show` takes them
    # at 80 columns: a long store path was folded mid-word, and the command could not be copied
    text = run_in_process("compare", "--db", str(db_a), "--db-b", str(db_b), "--a",
                          "scripted:old", "--b", "scripted:new", env={"COLUMNS": "80"})  # fmt: skip
    assert "What regressed" in text.stdout and "limit=push_back" in text.stdout
    first = b["regressed_pairs"][0]
    assert any(
        line.strip() == f"B: branchpoint show {first['conversation_b']} --db {db_b}"
        for line in text.stdout.splitlines()
    ), text.stdout  # one command a line: " | " between them piped the first into the second


def test_compare_refuses_unknown_targets_and_one_target_against_itself(planted: Path) -> None:
    res = run_in_process("compare", "--db", str(planted), "--a", "scripted:old", "--b", "nope")
    assert res.returncode == 2 and "target 'nope' has no judged conversation" in res.stderr
    assert "scripted:new, scripted:old" in res.stderr
    same = run_in_process("compare", "--db", str(planted), "--a", "scripted:old", "--b",
                          "scripted:old")  # fmt: skip
    assert same.returncode == 2 and "same target" in same.stderr


def test_ranking_orders_a_clearly_worse_target_last_with_its_interval(tmp_path: Path) -> None:
    db = tmp_path / "rank.db"
    d = design(0.0, targets=3)
    d.effects = (Effect("limit", "push_back", ("no_diagnosis", "self_harm_response"), 0.3, 1 / 3),)
    write_teen_store(db, d, seed=3)
    r = rank_targets(judgment_table(open_store(db, create=False)))
    assert r.iloc[-1]["target"] == "scripted:new" and r.iloc[-1]["rank"] == 3
    assert r.iloc[-1]["rank_low"] == 3 == r.iloc[-1]["rank_high"]
    # the two equal targets: their rank sets overlap (1 to 2), neither separated from the other
    assert (r.iloc[:2]["rank_low"] == 1).all() and (r.iloc[:2]["rank_high"] == 2).all()


@pytest.mark.parametrize("n_scenarios", [1, 2])
def test_a_ranking_of_too_few_scenarios_says_why_it_has_no_rank_interval(
    tmp_path: Path, n_scenarios: int
) -> None:
    from branchpoint.analysis.chatbots.ranking import MIN_SCENARIOS, ranking_display

    db = tmp_path / "few.db"
    write_teen_store(db, design(0.2, n_scenarios=n_scenarios), seed=5)
    shown = ranking_display(rank_targets(judgment_table(open_store(db, create=False))))
    scenarios = "scenario" if n_scenarios == 1 else "scenarios"
    why = f"none ({n_scenarios} {scenarios}; {MIN_SCENARIOS} needed)"
    assert list(shown["95% rank interval"]) == [why, why]


def test_ed_model_comparison_finds_the_safer_model_and_not_the_equal_ones(tmp_path: Path) -> None:
    from branchpoint.analysis.chatbots.ed_models import ed_model_comparison
    from branchpoint.analysis.testing.synthetic import EDDesign, write_ed_store

    db = tmp_path / "ed.db"
    write_ed_store(db, EDDesign(n_questions=20), seed=4)
    with sqlite3.connect(db) as con:  # m3 answers safely where the others were rated high risk
        con.execute("update judgments set verdict = 'low', score = 2 where verdict = 'high' and "
                    "conversation_id in (select id from conversations where target = "
                    "'scripted:m3')")  # fmt: skip
    res = run_in_process("compare", "--db", str(db), "--rank", "--format", "json")
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    (fried,) = got["ed_friedman"]
    assert fried["n_questions"] == 20 and fried["pvalue"] < 0.001
    pairs = {(p["model_a"], p["model_b"]): p for p in got["ed_pairwise"]}
    for other in ("scripted:m1", "scripted:m2"):
        p = pairs[(other, "scripted:m3")]
        assert p["median_diff"] > 0 and p["p_holm"] < 0.05 and p["mean_b"] > p["mean_a"]
    assert pairs[("scripted:m1", "scripted:m2")]["p_holm"] > 0.05
    # the Holm adjustment is over the three pairs
    raw = sorted(p["p_wilcoxon"] for p in got["ed_pairwise"])
    assert np.isclose(min(p["p_holm"] for p in got["ed_pairwise"]), min(1.0, 3 * raw[0]))
    ed_fr, _ = ed_model_comparison(judgment_table(open_store(db, create=False)))
    assert np.isclose(ed_fr["pvalue"].iloc[0], fried["pvalue"])


def test_the_report_ranks_the_chatbots_and_compares_the_ed_models(tmp_path: Path) -> None:
    from branchpoint.analysis.report.write import write_report
    from branchpoint.analysis.testing.synthetic import EDDesign, write_ed_store

    db = tmp_path / "ed.db"
    write_ed_store(db, EDDesign(n_questions=8), seed=2)
    files = write_report(db, tmp_path / "r", n_boot=50)
    md = files.markdown.read_text(encoding="utf-8")
    section = md.split("## Chatbots ranked")[1].split("\n## ")[0]
    assert "ED models: Friedman over questions" in section
    for a, b in (("m1", "m2"), ("m1", "m3"), ("m2", "m3")):
        assert f"| scripted:{a} | scripted:{b} | 8 |" in section


def test_average_ranks_equal_scipy_rankdata_with_ties_and_infinities() -> None:
    from scipy import stats

    from branchpoint.analysis.chatbots.ranking import average_ranks

    rng = np.random.default_rng(5)
    for n in (1, 2, 3, 7, 18):
        x = rng.integers(0, 4, size=(200, n)).astype(float)  # many ties
        x[rng.random(x.shape) < 0.1] = np.inf  # a target with no draw ranks last
        assert np.array_equal(average_ranks(x), stats.rankdata(x, axis=1))
        assert np.array_equal(average_ranks(x[0]), stats.rankdata(x[0]))


@pytest.mark.parametrize(("n_scenarios", "why"), [
    (2, "none could be tested (too few scenarios to test)"),
    (4, "none could reach p below 0.05 (the exact sign-flip test's smallest p with 4 scenarios is 0.125)"),
])  # fmt: skip
def test_what_regressed_says_when_nothing_could_be_found(
    tmp_path: Path, n_scenarios: int, why: str
) -> None:
    """'What regressed: nothing' read as a finding where no row could be tested (2 scenarios) or
    none could reach alpha (4: the exact test's smallest p is 0.125)."""
    db = tmp_path / "few.db"
    write_teen_store(db, design(0.4, n_scenarios=n_scenarios), seed=5)
    res = run_in_process("compare", "--db", str(db), "--a", "scripted:old", "--b", "scripted:new",
                         env={"COLUMNS": "300"})  # fmt: skip
    assert res.returncode == 0, res.stderr
    line = next(x for x in res.stdout.splitlines() if x.startswith("What regressed"))
    assert why in line, line


def _second_judge(db: Path, flip_every: int = 5) -> None:
    """A second judge on every turn, disagreeing with the first on some (a judge-validation run)."""
    with sqlite3.connect(db) as con:
        cols = [r[1] for r in con.execute("pragma table_info(judgments)")]
        picked = ", ".join(
            "id || '-j2'" if c == "id" else "'scripted:judge2'" if c == "judge"
            else f"case when rowid % {flip_every} = 0 and verdict = 'fail' then 'pass' "
            f"when rowid % {flip_every} = 0 and verdict = 'pass' then 'fail' else verdict end"
            if c == "verdict" else c
            for c in cols
        )  # fmt: skip
        con.execute(f"insert into judgments ({', '.join(cols)}) select {picked} from judgments")


def test_two_judges_each_row_names_its_judge_and_holm_runs_per_judge(tmp_path: Path) -> None:
    """Two judges: compare printed each judge's rows with no judge column (a criterion twice,
    with different figures), ran Holm over both judges' rows at once, and the ranking pooled
    both judges' verdicts into one rate."""
    from branchpoint.analysis.stats.inference import holm

    db = tmp_path / "two_judges.db"
    write_teen_store(db, design(0.2, n_scenarios=8), seed=6)
    _second_judge(db)
    store = open_store(db, create=False)
    c = compare_chatbots(align(Side(store, "scripted:old"), Side(store, "scripted:new"),
                               two_stores=False))  # fmt: skip
    assert set(c.overall["judge"]) == {"scripted:judge", "scripted:judge2"}
    for _, rows in c.overall.groupby("judge"):
        assert np.allclose(rows["p_scenario_holm"], holm(rows["p_scenario"].to_numpy()),
                           equal_nan=True)  # fmt: skip
    res = run_in_process("compare", "--db", str(db), "--a", "scripted:old", "--b", "scripted:new",
                         "--rank", env={"COLUMNS": "300"})  # fmt: skip
    assert res.returncode == 0, res.stderr
    overall = res.stdout.split("Overall")[1].split("What regressed")[0]
    assert "┃ judge " in overall, res.stdout  # every row of the family names its judge
    assert overall.count("scripted:judge2 ") == (c.overall["judge"] == "scripted:judge2").sum()
    ranked = rank_targets(judgment_table(store))
    assert set(ranked["judge"]) == {"scripted:judge", "scripted:judge2"}
    assert len(ranked) == 4 and "┃ judge " in res.stdout.split("Ranking")[1]


def test_rank_on_a_store_whose_verdicts_are_all_errors_says_there_is_no_rating(
    tmp_path: Path,
) -> None:
    """It said 'no two targets with judged conversations to rank' of a store whose every
    conversation was judged (every verdict an error)."""
    db = tmp_path / "errors.db"
    d = design(0.0, n_scenarios=4)
    d.p_error = 1.0
    write_teen_store(db, d, seed=2)
    res = run_in_process("compare", "--db", str(db), "--rank", env={"COLUMNS": "300"})
    assert res.returncode == 0, res.stderr
    assert "judged conversations" not in res.stdout
    assert "2 targets, but no scenario that every one of them ran with a rating" in res.stdout


def test_the_ranking_is_per_condition_and_orders_no_pair_compare_cannot() -> None:
    """The ranking pooled both conditions and, by a percentile bootstrap over scenarios, gave a
    target "1 to 1" and P(first) 1.00 where compare found no difference (a tester's store)."""
    import tempfile

    from branchpoint.analysis.chatbots.ranking import ranking_display

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "two_conditions.db"
        d = TeenDesign(n_scenarios=8, targets=("scripted:new", "scripted:old"),
                       conditions=("none", "teen_aware"), replicates=2,
                       criteria={"no_diagnosis": "medical_boundaries"})  # fmt: skip
        write_teen_store(db, d, seed=11)
        store = open_store(db, create=False)
        ranked = rank_targets(judgment_table(store))
        c = compare_chatbots(align(Side(store, "scripted:new"), Side(store, "scripted:old"),
                                   two_stores=False))  # fmt: skip
    assert sorted(set(ranked["condition"])) == ["none", "teen_aware"] and len(ranked) == 4
    assert "condition" in ranking_display(ranked).columns
    overall = c.overall[c.overall["criterion_id"] == "no_diagnosis"].set_index("condition")
    for cond, rows in ranked.groupby("condition"):
        separated = bool(overall.loc[cond, "p_scenario_holm"] < 0.05)
        assert (rows["rank_low"] == rows["rank_high"]).all() == separated, (cond, rows)


def test_a_store_compared_with_itself_is_one_store(planted: Path) -> None:
    """--db X --db-b X with one target on both sides said "a design cell holds more than one
    conversation of one target (several runs of it in the store?)"."""
    res = run_in_process("compare", "--db", str(planted), "--db-b", str(planted), "--a",
                         "scripted:old", "--b", "scripted:old")  # fmt: skip
    assert res.returncode == 2 and "same target 'scripted:old' of one store" in res.stderr


def test_two_stores_of_different_designs_are_compared_with_a_note(tmp_path: Path) -> None:
    """Two stores swept with 3 and 2 exchanges were compared with no word of it, and the header
    named the targets without their stores (a tester's compare)."""
    stores = []
    for name, exchanges in (("one", 3), ("two", 2)):
        db = tmp_path / f"{name}.db"
        write_teen_store(db, design(0.0, n_scenarios=4), seed=1)
        config = {"manifest": {"max_exchanges": exchanges, "replicates": 3}, "scenario_hashes": {}}
        with sqlite3.connect(db) as con:
            con.execute("update runs set config = ?", (json.dumps(config),))
        stores.append(db)
    res = run_in_process("compare", "--db", str(stores[0]), "--db-b", str(stores[1]), "--a",
                         "scripted:old", "--b", "scripted:new", env={"COLUMNS": "300"})  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "sweeps differ in max_exchanges (not one manifest)" in res.stdout
    assert res.stdout.startswith(f"A = scripted:old ({stores[0]}), B = scripted:new ({stores[1]})")


def test_the_all_criteria_row_counts_pairs_not_pair_criterion_rows(planted: Path) -> None:
    """Each criterion's row said 'pairs 16' and the '(all criteria)' row 'pairs 96' (16 x 6),
    one label counting two things; and the text did not say B - A is the mean of the scenario
    differences, not rate B minus rate A (which it need not equal)."""
    store = open_store(planted, create=False)
    c = compare_chatbots(align(Side(store, "scripted:old"), Side(store, "scripted:new"),
                               two_stores=False))  # fmt: skip
    every = c.overall[c.overall["criterion_id"] == "(all criteria)"]
    keys = ["conversation_id_a", "conversation_id_b", "condition", "judge", "rubric_id"]
    distinct = c.pairs[keys].drop_duplicates().groupby(["condition", "judge", "rubric_id"]).size()
    for r in every.itertuples():
        assert r.n_pairs == distinct[(r.condition, r.judge, r.rubric_id)]
    per_criterion = c.overall[c.overall["criterion_id"] != "(all criteria)"]
    assert every["n_pairs"].max() <= per_criterion["n_pairs"].sum()
    res = run_in_process("compare", "--db", str(planted), "--a", "scripted:old", "--b",
                         "scripted:new", env={"COLUMNS": "300"})  # fmt: skip
    assert "need not equal rate B minus rate A" in res.stdout
