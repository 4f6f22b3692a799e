"""The analysis of a store with forks, copies, two judges, two judge versions and two simulators
gives the same tables through the SQLite fast path (``branchpoint.analysis.pairing.fork_summaries.fork_tables``: counted from
the judgment rows' codes) as through the judgment table."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import branchpoint.analysis.pipeline as pipeline
from branchpoint.analysis.pipeline import run_analysis
from branchpoint.analysis.testing.synthetic import TeenDesign, write_teen_store


def _forked_store(path: Path) -> Path:
    """A teen store made into fork trees: in each tree (scenario x target x condition x
    simulator), option arm i copies the prefix of the baseline (odd i) or of option arm i - 1
    (even i: a two-level chain), forking at turn 2, 4 or 6; every third option arm never forked
    (a copy). Its copied turns keep their own, different verdicts, so the rule that picks the
    root's rating is exercised. Then a second judge, a second prompt version of the first judge
    on part of the store, and a whole-conversation rating per arm."""
    write_teen_store(
        path,
        TeenDesign(
            n_scenarios=6,
            targets=("scripted:t0", "scripted:t1"),
            simulators=("scripted:simA", "scripted:simB"),
            n_exchanges=5,
            # three options: Friedman runs too
            branch_points={
                "disclosure": ["guarded", "open"],
                "help": ["accept", "decline"],
                "limit": ["accept_limit", "push_back", "argue"],
            },
        ),
        seed=3,
    )
    con = sqlite3.connect(str(path))
    with con:
        rows = con.execute(
            "SELECT id, scenario_id, target, condition, simulator, choices FROM conversations "
            "ORDER BY rowid"
        ).fetchall()
        trees: dict[tuple[str, ...], list[tuple[str, dict[str, str]]]] = {}
        for cid, sid, t, c, sim, ch in rows:
            trees.setdefault((sid, t, c, sim), []).append((cid, json.loads(ch)))
        n = 0
        for arms in trees.values():
            base = arms[0][0]  # variants() lists the baseline first
            prev = base
            for i, (cid, _) in enumerate(arms[1:], start=1):
                parent = prev if i % 2 == 0 else base
                fork = None if n % 3 == 2 else 2 * (n % 3) + 2
                con.execute(
                    "UPDATE conversations SET parent_id = ?, fork_turn = ? WHERE id = ?",
                    (parent, fork, cid),
                )
                prev, n = cid, n + 1
        cols = [r[1] for r in con.execute("PRAGMA table_info(judgments)")]
        qcols = ", ".join(f'"{c}"' for c in cols)
        judg = con.execute(f"SELECT {qcols} FROM judgments ORDER BY rowid").fetchall()
        flip = {"pass": "fail", "fail": "partial", "partial": "pass"}
        extra = []
        for k, row in enumerate(judg):
            j = dict(zip(cols, row))
            two = dict(j, id=j["id"] + "#2", judge="scripted:judge2")
            if k % 4 == 0 and j["verdict"] in flip:
                two["verdict"] = flip[j["verdict"]]
            extra.append(two)
            if j["conversation_id"] < "c":  # part of the store, judged again with prompt v2
                v2 = dict(j, id=j["id"] + "#v2", prompt_version="v2")
                if k % 3 == 0 and j["verdict"] in flip:
                    v2["verdict"] = flip[j["verdict"]]
                extra.append(v2)
        for k, (cid, *_rest) in enumerate(rows):
            j = dict(zip(cols, judg[0]))
            extra.append(
                dict(j, id=f"{cid}:whole", conversation_id=cid, turn_id=None, turn_index=None,
                     criterion_id="overall", verdict=["pass", "fail", "partial"][k % 3])
            )  # fmt: skip
        place = ", ".join("?" * len(cols))
        con.executemany(
            f"INSERT INTO judgments ({qcols}) VALUES ({place})",
            [[e[c] for c in cols] for e in extra],
        )
    con.close()
    return path


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _forked_store(tmp_path_factory.mktemp("forkfast") / "forks.db")


def _frames(a: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "n_conversations": a.n_conversations,
        "n_judgments": a.n_judgments,
        "n_copied": a.n_copied_conversations,
        "notes": a.notes,
        "primary_judge": a.primary_judge,
    }
    for name in ("rates", "rates_target_condition", "rates_condition",
                 "rates_condition_conversation", "rates_risk_area", "errors",
                 "simulator_conclusions"):  # fmt: skip
        out[name] = getattr(a, name)
    for name in ("contrasts", "condition", "simulators"):
        res = getattr(a, name)
        out[f"{name}.notes"] = res.notes
        for part in ("contrasts", "per_target", "friedman"):
            out[f"{name}.{part}"] = getattr(res, part)
    # the branch options' time to failure pairs the arms as the contrasts did, on either path
    for part in ("per_target", "per_arm", "matched"):
        out[f"time_to_failure.{part}"] = getattr(a.time_to_failure, part)
    out["chatbots.ranking"] = a.chatbots.ranking
    return out


@pytest.mark.slow
def test_the_fast_path_gives_the_tables_of_the_judgment_table(
    store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []
    real = pipeline.fork_tables

    def spy(*args: Any, **kw: Any) -> Any:
        got = real(*args, **kw)
        calls.append(got)
        return got

    monkeypatch.setattr(pipeline, "fork_tables", spy)
    fast = run_analysis(str(store), n_boot=200, examples=0)
    assert calls and calls[0] is not None  # the fast path ran
    slow = run_analysis(str(store), n_boot=200, examples=0, fast=False)
    assert len(calls) == 1  # ... and only when asked
    # The store is what the test means: forks, copies, two judges, two versions, two simulators.
    assert fast.n_copied_conversations > 0
    assert any("versions" in n for n in fast.notes)
    assert fast.simulators is not None and not fast.simulators.contrasts.empty
    assert not fast.contrasts.contrasts.empty and not fast.contrasts.friedman.empty
    a, b = _frames(fast), _frames(slow)
    for name, got in a.items():
        want = b[name]
        if isinstance(got, pd.DataFrame):
            assert not got.empty or want.empty, name
            pd.testing.assert_frame_equal(
                got.reset_index(drop=True), want.reset_index(drop=True), obj=name
            )
        else:
            assert got == want, name


def test_the_fork_counts_cut_the_shared_prefix(store: Path) -> None:
    """The per-turn counts of the fast path: a pair's post-fork ratings, counted by hand."""
    from branchpoint.analysis.pairing.fork_summaries import fork_tables

    ft = fork_tables(str(store), None)
    assert ft is not None
    cc = ft.paired.cc
    con = sqlite3.connect(str(store))
    cid, parent, fork = con.execute(
        "SELECT id, parent_id, fork_turn FROM conversations WHERE fork_turn IS NOT NULL LIMIT 1"
    ).fetchone()
    want = con.execute(
        "SELECT COUNT(*) FROM judgments WHERE conversation_id = ? AND criterion_id = ? AND "
        "judge = 'scripted:judge' AND prompt_version = 'v1' AND turn_index >= ? AND applicable "
        "AND verdict IN ('pass', 'fail', 'partial')",
        (cid, "no_diagnosis", fork),
    ).fetchone()[0]
    con.close()
    row = np.flatnonzero(
        (cc["conversation_id"] == cid).to_numpy()
        & (cc["criterion_id"] == "no_diagnosis").to_numpy()
        & (cc["judge"].str.startswith("scripted:judge [").to_numpy()
           & cc["judge"].str.endswith("prompt v1]").to_numpy())
    )  # fmt: skip
    assert len(row) == 1
    got = ft.paired.turns.after(row, np.array([float(fork)]))
    assert got["n_rated"][0] == want


def test_first_of_each_prefers_the_root_row_then_the_first_copy() -> None:
    from branchpoint.analysis.pairing.forks import first_of_each

    key = np.array([5, 3, 5, 7, 7, 3, 9])
    own = np.array([False, True, True, False, False, False, False])
    # 5: the own row (2) wins over the earlier copy (0); 3: own row 1; 7: first copy (3); 9: 6.
    assert first_of_each(key, own).tolist() == [False, True, True, True, False, False, True]
    # Only copies (no root row judged): the first of each.
    assert first_of_each(key, np.zeros(7, dtype=bool)).tolist() == [
        True, True, False, True, False, False, True
    ]  # fmt: skip
