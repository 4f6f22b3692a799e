"""A pre-registered analysis (issue 46): the manifest's ``analysis:`` block is validated like the
rest of the manifest, stored with the sweep when its first cell runs, refused when edited
without ``--amend``, recorded as a dated deviation with it; the report opens with a Confirmatory
section holding only the primary family, the plan prints that family's detectable differences,
and every other section is labelled exploratory."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from test_sweep_cli import SCENARIO, cli

REPO = Path(__file__).resolve().parents[2]
RUBRIC = REPO / "tests" / "fixtures" / "compare" / "refusal.yaml"
TEEN = REPO / "branchpoint" / "scenarios" / "library" / "teen"
# seven scenarios: an exact sign-flip test of seven agreeing scenario means gives p = 1/64
SCENARIOS = sorted(str(p) for p in TEEN.glob("teen-ah-*.yaml"))[:7]
PLAN = {
    "primary": [
        {"branch_point": "limit", "option": "push_back"},
        {"chatbots": ["scripted:quiet", "scripted:eager"]},
    ],
    "outcome": "rubric",
    "alpha": 0.05,
    "decision": "holm_and_smallest_effect",
    "smallest_effect": 0.10,
}


def manifest(path: Path, analysis: dict[str, Any] | None = None, **extra: Any) -> Path:
    body: dict[str, Any] = {
        "scenarios": {"paths": [str(SCENARIO)]},
        "targets": ["scripted:quiet", "scripted:eager"],
        "simulators": ["scripted:sweep-persona"],
        "max_exchanges": 2,  # scripted:eager's first reply fires the branch points
        "judges": [{"spec": "heuristic", "rubrics": [str(RUBRIC)]}],
        "store": "results.db",
        **extra,
    }
    if analysis is not None:
        body["analysis"] = analysis
    path.write_text(json.dumps(body, indent=1), encoding="utf-8")
    return path


def stored_plan(db: Path) -> dict[str, Any]:
    with sqlite3.connect(db) as con:
        (config,) = con.execute("select config from runs where kind = 'sweep'").fetchone()
    return dict(json.loads(config)["analysis_plan"])


def test_every_problem_of_the_block_is_one_positioned_line(tmp_path: Path) -> None:
    bad = {
        "primary": [
            {"branch_point": "limit", "option": "nope"},
            {"chatbots": ["scripted:quiet", "scripted:missing"]},
            {"condition": "teen_aware", "branch_point": "limit", "option": "push_back"},
        ],
        "scope": {"conditions": ["teen_aware"]},
        "alpha": 0.7,
        "outcome": "criteria",
    }
    path = manifest(tmp_path / "study.yaml", bad)
    res = cli("sweep", str(path), "--plan")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    expected = [
        "analysis.primary[0].option: branch point 'limit' has no option 'nope'",
        "analysis.primary[1].chatbots[1]: 'scripted:missing' is not one of the manifest's targets",
        "analysis.primary[2]: expected exactly one of branch_point + option, chatbots, or condition",
        "analysis.scope.conditions[0]: 'teen_aware' is not one of the manifest's conditions",
        "analysis.alpha:",
        "analysis.smallest_effect:",
    ]
    for text in expected:
        hit = [ln for ln in lines if text in ln]
        assert hit, (text, lines)
        assert hit[0].startswith(f"{path}:"), hit[0]  # file:line:col: field: problem
    assert not (tmp_path / "results.db").exists()


def test_the_schema_covers_the_block() -> None:
    res = cli("schema", "sweep")
    assert res.returncode == 0
    schema = json.loads(res.stdout)
    text = json.dumps(schema)
    for name in ("smallest_effect", "primary", "chatbots", "decision", "holm_and_smallest_effect"):
        assert name in text


@pytest.mark.slow
def test_registered_amended_and_reported(tmp_path: Path) -> None:
    path = manifest(tmp_path / "study.yaml", PLAN, scenarios={"paths": SCENARIOS})
    planned = cli("sweep", str(path), "--plan")
    assert planned.returncode == 0, planned.stderr
    assert "primary family (pre-registered, 2 members; Holm at alpha 0.05" in planned.stdout
    assert "limit: (baseline) → push_back" in planned.stdout
    assert "chatbots: scripted:quiet → scripted:eager" in planned.stdout
    first = cli("sweep", str(path), "--yes")
    assert first.returncode == 0, first.stderr
    db = tmp_path / "results.db"
    # the stored count beside how many of them analyze counts once (it said "N conversations"
    # where the report said fewer, with no word of the copies)
    with sqlite3.connect(db) as con:
        (copies,) = con.execute(
            "select count(*) from conversations where parent_id is not null and fork_turn is null"
        ).fetchone()
    assert copies > 0
    assert f"{copies} of the " in first.stdout
    assert "are arms that never forked (their parents' conversations stored again)" in first.stdout
    reg = stored_plan(db)
    primary = [{k: v for k, v in c.items() if k in ("branch_point", "option", "chatbots")
                and v is not None} for c in reg["block"]["primary"]]  # fmt: skip
    assert primary == PLAN["primary"] and reg["deviations"] == []
    assert len(reg["hash"]) == 64 and reg["registered_at"]
    # re-running the same manifest keeps the registration as it was
    again = cli("sweep", str(path), "--yes")
    assert again.returncode == 0 and stored_plan(db) == reg
    # an edit after the first cell: refused, and the stored plan unchanged
    edited = {**PLAN, "smallest_effect": 0.20}
    manifest(path, edited, scenarios={"paths": SCENARIOS})
    refused = cli("sweep", str(path), "--yes")
    assert refused.returncode == 2
    assert "analysis: changed since sweep" in refused.stderr and "--amend" in refused.stderr
    assert stored_plan(db) == reg
    # with --amend: the new block, and a dated deviation with the reason
    amended = cli("sweep", str(path), "--yes", "--amend", "effect raised after a reviewer's note")
    assert amended.returncode == 0, amended.stderr
    now = stored_plan(db)
    assert now["block"]["smallest_effect"] == 0.2 and now["registered_at"] == reg["registered_at"]
    (dev,) = now["deviations"]
    assert dev["reason"] == "effect raised after a reviewer's note"
    assert dev["old_hash"] == reg["hash"] and dev["new_hash"] == now["hash"] != reg["hash"]
    nothing = cli("sweep", str(path), "--yes", "--amend", "again")
    assert nothing.returncode == 2 and "nothing to amend" in nothing.stderr
    # the report: Confirmatory first, its family only the primary contrasts, deviations listed
    out = tmp_path / "report"
    rep = cli("report", "--all", "--db", str(db), "--out", str(out), "--n-boot", "50")
    assert rep.returncode == 0, rep.stderr
    md = (out / "report.md").read_text(encoding="utf-8")
    headings = [ln for ln in md.splitlines() if ln.startswith("## ")]
    assert headings[0] == "## Confirmatory analysis (pre-registered)"
    assert all(h.endswith("(exploratory)") for h in headings[1:]), headings
    confirmatory = md.split(headings[1])[0]
    assert "effect raised after a reviewer" in confirmatory and "20.0 points" in confirmatory
    rows = [ln for ln in confirmatory.splitlines() if ln.startswith("| ") and "---" not in ln][1:]
    contrasts = {ln.split(" | ")[0].removeprefix("| ") for ln in rows}
    assert contrasts == {"limit: accept\\_limit → push\\_back",
                         "chatbots: scripted:quiet → scripted:eager"}, rows  # fmt: skip
    assert all("(all criteria)" in ln for ln in rows)
    # quiet fails (goes on), eager passes (declines): eager's failure rate is lower, decided so
    chat = next(ln for ln in rows if "chatbots" in ln)
    assert "100.0%" in chat and "0.0%" in chat and "-100.0" in chat and "over 7 " in chat
    # every scenario at -100: the interval of no spread, not zero-width (issue 44)
    assert "-100.0 to -18.1" in chat
    assert "difference: failure lower, at least the smallest effect of interest" in chat


@pytest.mark.parametrize(("n", "expected"), [
    (4, "no test could show a difference: the exact sign-flip test's smallest p with 4 scenarios is 0.125"),
    (6, "no difference shown"),
])  # fmt: skip
def test_a_member_whose_test_cannot_reach_alpha_is_not_called_no_difference_shown(
    n: int, expected: str
) -> None:
    """At 3-5 scenarios the exact sign-flip test cannot give p below 0.05: 'no difference shown'
    read as a result where no result was possible."""
    from types import SimpleNamespace

    from branchpoint.analysis.preregistered.family import decide
    from branchpoint.core.analysis_plan import AnalysisPlan

    plan = AnalysisPlan.model_validate(PLAN)
    row = SimpleNamespace(p_holm=0.5, diff=0.2, ci_low=-1.0, ci_high=1.0,
                          test="exact sign-flip", n_scenarios=n)  # fmt: skip
    assert decide(plan, row) == expected


def test_a_plan_added_after_cells_ran_is_not_reported_as_pre_registered(tmp_path: Path) -> None:
    """A sweep run with no block, then a block added with --amend: the report called it
    pre-registered with the first cell's date, and the deviation read '(plan None → ...)'."""
    path = manifest(tmp_path / "study.yaml", None, scenarios={"paths": SCENARIOS[:3]})
    first = cli("sweep", str(path), "--yes")
    assert first.returncode == 0, first.stderr
    db = tmp_path / "results.db"
    started = stored_plan(db)["registered_at"]
    manifest(path, PLAN, scenarios={"paths": SCENARIOS[:3]})
    amended = cli("sweep", str(path), "--yes", "--amend", "added plan after seeing data")
    assert amended.returncode == 0, amended.stderr
    reg = stored_plan(db)
    (dev,) = reg["deviations"]
    assert reg["registered_at"] == dev["at"] >= started
    out = tmp_path / "report"
    rep = cli("report", "--all", "--db", str(db), "--out", str(out), "--n-boot", "50")
    assert rep.returncode == 0, rep.stderr
    md = (out / "report.md").read_text(encoding="utf-8")
    headings = [ln for ln in md.splitlines() if ln.startswith("## ")]
    assert headings[0] == "## Confirmatory analysis (registered after data collection began)"
    assert "pre-registered" not in md.split(headings[1])[0]
    cells = reg["registered_after_cells"]
    assert cells > 0
    assert f"registered {dev['at']}, after {cells} cells had run" in md
    assert f"(no plan → {reg['hash'][:12]})" in md and "None" not in md.split(headings[1])[0]


def test_the_blocks_rubric_criteria_and_judge_are_ones_the_manifest_judges(
    tmp_path: Path,
) -> None:
    """A rubric, criterion or judge the manifest does not judge passed --plan and was
    registered; the report then said only 'no pair rated in both arms'."""
    bad = {**PLAN, "outcome": "criteria", "criteria": ["not_a_criterion"], "rubric": "teen",
           "judge": "litellm:openai/gpt-4o"}  # fmt: skip
    path = manifest(tmp_path / "study.yaml", bad)
    for args in (("--plan",), ("--yes",)):
        res = cli("sweep", str(path), *args)
        assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
        lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
        expected = [
            "analysis.rubric: 'teen' is not a rubric the manifest judges (expected one of: refusal)",
            "analysis.judge: 'litellm:openai/gpt-4o' is not a judge of the manifest (expected one "
            "of: heuristic)",
            "analysis.criteria[0]: 'not_a_criterion' is not a criterion of the rubric",
        ]
        for text in expected:
            hit = [ln for ln in lines if text in ln]
            assert hit, (text, lines)
            assert hit[0].startswith(f"{path}:"), hit[0]
    assert not (tmp_path / "results.db").exists()
    # the rubric's own criterion, and the judge that rates it, pass
    good = {**bad, "criteria": ["declines_harm"], "rubric": "refusal", "judge": "heuristic"}
    manifest(path, good)
    res = cli("sweep", str(path), "--plan")
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize(("field", "value", "expected"), [
    ("alpha", 0.7, "0.7 is too large (expected a number > 0 and < 0.5)"),
    ("alpha", 0, "0 is too small (expected a number > 0 and < 0.5)"),
    ("smallest_effect", 1.5, "1.5 is too large (expected a number > 0 and <= 1)"),
])  # fmt: skip
def test_a_number_out_of_range_says_the_range(
    tmp_path: Path, field: str, value: float, expected: str
) -> None:
    path = manifest(tmp_path / "study.yaml", {**PLAN, field: value})
    res = cli("sweep", str(path), "--plan")
    assert res.returncode == 2
    assert f"analysis.{field}: {expected}" in res.stderr, res.stderr


def test_the_plans_primary_lines_are_columns_under_their_header(tmp_path: Path) -> None:
    """With 3 scenarios: '... none    3 scenariosno effect detectable...' (no space), columns not
    under any header, and '1 members'."""
    plan = {**PLAN, "primary": [PLAN["primary"][1]]}
    path = manifest(tmp_path / "study.yaml", plan, scenarios={"paths": SCENARIOS[:3]})
    res = cli("sweep", str(path), "--plan")
    assert res.returncode == 0, res.stderr
    out = res.stdout.splitlines()
    (i,) = [i for i, ln in enumerate(out) if ln.startswith("primary family")]
    assert "(pre-registered, 1 member;" in out[i]
    header, row = out[i + 1], out[i + 2]
    assert row.startswith("  chatbots: scripted:quiet → scripted:eager")
    assert "scenariosno" not in row
    for col in ("condition", "scenarios", "detectable"):
        assert col in header, header
    # each value starts where its column's name starts (left-aligned) or ends (right-aligned)
    assert row[header.index("condition") :].startswith("none")
    assert row[: header.index("scenarios") + len("scenarios")].endswith(" 3")
    assert row[header.index("detectable") :].startswith("no effect detectable with 3 scenarios")
    # the report counts the family in the same number
    assert cli("sweep", str(path), "--yes").returncode == 0
    out_dir = tmp_path / "report"
    rep = cli("report", "--all", "--db", str(tmp_path / "results.db"), "--out", str(out_dir),
              "--n-boot", "50")  # fmt: skip
    assert rep.returncode == 0, rep.stderr
    md = (out_dir / "report.md").read_text(encoding="utf-8")
    assert "Family: the 1 primary contrast only" in md


def test_a_rubric_level_member_counts_pairs_not_pair_criterion_rows() -> None:
    """Over the rubric a pair has a row per criterion it rated: the family's 'pairs' counted the
    rows (the same mechanism as compare's '(all criteria)' row)."""
    import pandas as pd

    from branchpoint.analysis.contrasts.matched import with_distinct_pairs

    rows = pd.DataFrame({"contrast": "c", "criterion_id": "(all criteria)", "condition": "none",
                         "conversation_id_a": ["a1", "a1", "a2"],
                         "conversation_id_b": ["b1", "b1", "b2"]})  # fmt: skip
    summary = pd.DataFrame({"contrast": ["c"], "criterion_id": ["(all criteria)"],
                            "condition": ["none"], "n_pairs": [3]})  # fmt: skip
    keys = ["contrast", "criterion_id", "condition"]
    assert with_distinct_pairs(summary, rows, keys)["n_pairs"].tolist() == [2]
