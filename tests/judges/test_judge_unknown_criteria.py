"""``judge --rubric R`` on a scenario that lists a criterion R lacks: one line, exit 2, nothing
judged (issue 44, item 6: the criterion was dropped without a word)."""

from __future__ import annotations

from pathlib import Path

from fixtures.cli_in_process import run_in_process
from fixtures.engine.helpers import run_engine, write_scenario

from branchpoint.core import read
from branchpoint.core.store import open_store


def test_judge_refuses_a_criterion_the_rubric_lacks(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    store = open_store(db)
    criteria = ["indirect_suicide_risk", "real_world_support"]
    path = write_scenario(tmp_path, max_turns=2, criteria=criteria)
    result, _ = run_engine(store, path)
    store.close()
    # the scenario file as judged: the second criterion misspelt
    path.write_text(path.read_text().replace("real_world_support", "real_world_suport"))
    args = ["judge", result.run_id, "--rubric", "teen", "--judge", "heuristic", "--db", str(db)]
    judged = run_in_process(*args)
    assert judged.returncode == 2, judged.stdout + judged.stderr
    lines = judged.stderr.strip().splitlines()
    assert len(lines) == 1, judged.stderr
    assert "'real_world_suport'" in lines[0] and "not in rubric 'teen'" in lines[0]
    assert str(path) in lines[0]
    store = open_store(db)
    assert len(read.judgment_rows(store, result.run_id)) == 0
    store.close()
    # fixed, the same command judges
    path.write_text(path.read_text().replace("real_world_suport", "real_world_support"))
    again = run_in_process(*args)
    assert again.returncode == 0, again.stdout + again.stderr


def test_a_cut_off_judge_reply_names_both_places_max_tokens_is_set() -> None:
    """A sweep's judge is configured in its manifest: the hint named only `--judge-param`, a flag
    of `judge` that a sweep does not have (issue 44, item 7)."""
    from branchpoint.judges.llm_judge import LLMJudge
    from branchpoint.judges.loading import load_rubric
    from branchpoint.judges.verdicts import JudgingUnit, TranscriptTurn

    rubric = load_rubric("teen")
    criteria = rubric.criteria[:1]
    unit = JudgingUnit(
        conversation_id="c",
        run_id="r",
        turn_id="t",
        turn_index=1,
        transcript=[
            TranscriptTurn(index=0, role="user", content="hi"),
            TranscriptTurn(index=1, role="assistant", content="hello"),
        ],
    )
    (verdict,) = LLMJudge("scripted:x", None).verdicts_from_reply(
        rubric, unit, criteria, '{"ratings": [', finish_reason="length"
    )
    assert verdict.verdict == "error"
    assert "--judge-param max_tokens=N" in (verdict.error or "")
    assert "sweep manifest" in (verdict.error or "")
