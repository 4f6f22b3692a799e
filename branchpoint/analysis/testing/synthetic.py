"""Synthetic stores with KNOWN effects: for tests, the scale benchmark and power checks.

Nothing here talks to a model. It writes real SQLite stores (schema from ``branchpoint.core.store``) whose
verdicts are drawn from stated probabilities, so that an analysis can be checked against the truth
it should recover. Every store it writes names itself a synthetic run (``Run.name``).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import zlib
from dataclasses import dataclass, field
from itertools import combinations, product
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from branchpoint.core.domain import (
    ENACTED,
    ENACTMENT_RUBRIC,
    EXPLICIT_CUE,
    NOT_ENACTED,
    profile_key,
)
from branchpoint.core.scales import PASS_PARTIAL_FAIL, RISK_LEVELS

NOW = "2026-01-01 00:00:00.000000"

TEEN_CRITERIA: dict[str, str] = {
    "indirect_suicide_risk": "acute_harm",
    "self_harm_response": "acute_harm",
    "no_diagnosis": "medical_boundaries",
    "no_medication_advice": "medical_boundaries",
    "substance_boundaries": "medical_boundaries",
    "emotional_dependence": "relational_safety",
}
TEEN_BRANCH_POINTS: dict[str, list[str]] = {  # baseline first
    "disclosure": ["guarded", "open"],
    "help": ["accept", "decline"],
    "limit": ["accept_limit", "push_back"],
}
ED_DIMENSIONS = [
    "diet_guidance",
    "encouraging_disordered_behaviour",
    "symptom_concealment",
    "thinspiration",
    "negative_self_beliefs",
    "body_focus",
    "narrow_views",
]
ED_ATTRIBUTES: dict[str, list[str]] = {
    "race": ["white", "asian", "black"],
    "gender": ["female", "male"],
    "bmi": ["low", "high"],
}


@dataclass(frozen=True)
class Effect:
    """Per-rating failure probability raised by ``delta`` when ``branch_point == option``."""

    branch_point: str
    option: str
    criteria: tuple[str, ...]
    delta: float
    target_share: float = 1.0  # share of targets the effect applies to (the first ones)


@dataclass
class TeenDesign:
    n_scenarios: int = 40
    targets: tuple[str, ...] = tuple(f"scripted:target{i}" for i in range(10))
    conditions: tuple[str, ...] = ("none", "teen_aware")
    simulators: tuple[str, ...] = ("scripted:sim",)
    branch_points: dict[str, list[str]] = field(default_factory=lambda: dict(TEEN_BRANCH_POINTS))
    design: str = "one_at_a_time"  # or "factorial"
    replicates: int = 1
    n_exchanges: int = 8
    criteria: dict[str, str] = field(default_factory=lambda: dict(TEEN_CRITERIA))
    base_fail: float = 0.35
    condition_effect: dict[str, float] = field(default_factory=lambda: {"teen_aware": -0.15})
    simulator_effect: dict[str, float] = field(default_factory=dict)
    effects: tuple[Effect, ...] = ()
    p_applicable: float = 0.6
    p_partial: float = 0.15
    p_error: float = 0.01
    scenario_sd: float = 0.05  # scenario-level random effect on the failure probability
    reasoning: bool = False  # store reasoning text on chatbot turns
    # Share of trees (scenario x target x condition x simulator x replicate) in which a branch
    # point's trigger fires, so that its arms realise their options; 1.0 where not named. An
    # effect acts only where realised, as a chatbot that never offers help cannot be declined.
    realised_share: dict[str, float] = field(default_factory=dict)
    # Enactment decided by the chatbot (issue 44): branch point -> (P(enacted) after a firm
    # reply, after a soft one). Each tree's chatbot replies firmly before the fork with
    # probability 1/2; a firm reply lowers every failure probability of the tree by
    # ``firm_shift`` and makes the persona give in. An option arm (not the baseline) whose persona
    # gave in carries the manipulation check "not_enacted" and no effect, the others "enacted":
    # per protocol then keeps the soft trees, a subset selected by the chatbot.
    chatbot_enactment: dict[str, tuple[float, float]] = field(default_factory=dict)
    firm_shift: float = 0.10
    judge: str = "scripted:judge"
    rubric_id: str = "teen"
    run_id: str = "synthetic-teen"


def variants(branch_points: dict[str, list[str]], design: str) -> list[dict[str, str]]:
    base = {bp: opts[0] for bp, opts in branch_points.items()}
    if design == "factorial":
        return [dict(zip(branch_points, combo)) for combo in product(*branch_points.values())]
    out = [dict(base)]
    for bp, opts in branch_points.items():
        for opt in opts[1:]:
            out.append({**base, bp: opt})
    return out


def _vid(scenario: str, choices: dict[str, Any]) -> str:
    return hashlib.sha1(f"{scenario}|{json.dumps(choices, sort_keys=True)}".encode()).hexdigest()[
        :12
    ]


def teen_probabilities(d: TeenDesign, rng: np.random.Generator) -> tuple[pd.DataFrame, np.ndarray]:
    """Conversations and their per-rating failure probability for every criterion (N x K)."""
    crits = list(d.criteria)
    scen_re = rng.normal(0.0, d.scenario_sd, size=(d.n_scenarios, len(crits)))
    rows = []
    for s in range(d.n_scenarios):
        sid = f"scn{s:03d}"
        for ch in variants(d.branch_points, d.design):
            for ti, target in enumerate(d.targets):
                for cond in d.conditions:
                    for sim in d.simulators:
                        for rep in range(d.replicates):
                            rows.append((s, sid, ch, ti, target, cond, sim, rep))
    conv = pd.DataFrame(
        rows,
        columns=[
            "s",
            "scenario_id",
            "choices",
            "ti",
            "target",
            "condition",
            "simulator",
            "replicate",
        ],
    )
    conv["realised"] = _realised(conv, d, rng)
    firm = _chatbot_enactment(conv, d, rng)
    p = np.full((len(conv), len(crits)), d.base_fail) + scen_re[conv["s"].to_numpy()]
    p -= d.firm_shift * firm[:, None]
    p += conv["condition"].map(lambda c: d.condition_effect.get(c, 0.0)).to_numpy()[:, None]
    p += conv["simulator"].map(lambda c: d.simulator_effect.get(c, 0.0)).to_numpy()[:, None]
    n_targets = len(d.targets)
    for eff in d.effects:
        affected = conv["ti"].to_numpy() < int(round(eff.target_share * n_targets))
        hit = (
            conv["choices"].map(lambda ch, e=eff: ch.get(e.branch_point) == e.option).to_numpy()
            & conv["realised"].map(lambda r, e=eff: r[e.branch_point]).to_numpy(bool)
            & conv["enacted"].map(lambda r, e=eff: r.get(e.branch_point, True)).to_numpy(bool)
            & affected
        )
        for crit in eff.criteria:
            p[hit, crits.index(crit)] += eff.delta
    if (p < 0).any() or (p + d.p_partial > 1).any():
        raise ValueError("design pushes a probability outside [0, 1]; lower the effects")
    conv["variant_id"] = [_vid(sid, ch) for sid, ch in zip(conv["scenario_id"], conv["choices"])]
    conv["conversation_id"] = [
        hashlib.sha1(f"{d.run_id}|{v}|{t}|{c}|{sim}|{r}".encode()).hexdigest()[:16]
        for v, t, c, sim, r in zip(
            conv["variant_id"],
            conv["target"],
            conv["condition"],
            conv["simulator"],
            conv["replicate"],
        )
    ]
    return conv, p


def _realised(conv: pd.DataFrame, d: TeenDesign, rng: np.random.Generator) -> list[dict[str, bool]]:
    """Per conversation: branch point -> realised, drawn once per tree (all its arms alike)."""
    if not d.realised_share:  # draw nothing: the stores of a given seed stay as they were
        return [dict.fromkeys(d.branch_points, True) for _ in range(len(conv))]
    tree_cols = ["s", "ti", "condition", "simulator", "replicate"]
    trees = conv[tree_cols].drop_duplicates().reset_index(drop=True)
    draws = {bp: rng.random(len(trees)) < d.realised_share.get(bp, 1.0) for bp in d.branch_points}
    index = {tuple(k): i for i, k in enumerate(trees.itertuples(index=False, name=None))}
    rows = [index[tuple(k)] for k in conv[tree_cols].itertuples(index=False, name=None)]
    return [{bp: bool(draws[bp][i]) for bp in d.branch_points} for i in rows]


def _chatbot_enactment(conv: pd.DataFrame, d: TeenDesign, rng: np.random.Generator) -> np.ndarray:
    """Per conversation: was its tree's chatbot firm (1.0) or not; sets ``conv["enacted"]``
    (branch point -> the option arm enacted, for the points of ``d.chatbot_enactment``)."""
    conv["enacted"] = [{} for _ in range(len(conv))]
    if not d.chatbot_enactment:  # draw nothing: the stores of a given seed stay as they were
        return np.zeros(len(conv))
    tree_cols = ["s", "ti", "condition", "simulator", "replicate"]
    tree = conv.groupby(tree_cols, sort=False).ngroup().to_numpy()
    firm = (rng.random(int(tree.max()) + 1) < 0.5)[tree]
    for bp, (if_firm, if_soft) in d.chatbot_enactment.items():
        baseline = d.branch_points[bp][0]
        option = conv["choices"].map(lambda ch, bp=bp, b=baseline: ch.get(bp) not in (None, b))
        gave_in = rng.random(len(conv)) >= np.where(firm, if_firm, if_soft)
        for row, not_enacted in zip(conv["enacted"], option.to_numpy(bool) & gave_in):
            row[bp] = not not_enacted
    return firm.astype(float)


def simulate_teen_judgments(d: TeenDesign, seed: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Conversations and a per-turn judgment frame (numpy draws, seeded)."""
    rng = np.random.default_rng(seed)
    conv, p = teen_probabilities(d, rng)
    n, k, e = len(conv), len(d.criteria), d.n_exchanges
    shape = (n, e, k)
    applicable = rng.random(shape) < d.p_applicable
    u = rng.random(shape)
    pp = np.broadcast_to(p[:, None, :], shape)
    verdict = np.where(u < pp, "fail", np.where(u < pp + d.p_partial, "partial", "pass")).astype(
        object
    )
    err = rng.random(shape) < d.p_error
    verdict[err] = "error"
    verdict[~applicable & ~err] = None
    ci, ei, ki = np.indices(shape).reshape(3, -1)
    crits = np.array(list(d.criteria))
    judg = pd.DataFrame(
        {
            "conversation_id": conv["conversation_id"].to_numpy()[ci],
            "turn_index": 2 * ei + 1,
            "exchange": ei + 1,
            "criterion_id": crits[ki],
            "applicable": (applicable | err).reshape(-1),
            "verdict": verdict.reshape(-1),
        }
    )
    judg["risk_area"] = judg["criterion_id"].map(d.criteria)
    judg["score"] = judg["verdict"].map(PASS_PARTIAL_FAIL.scores)
    return conv, judg


# --------------------------------------------------------------------------- writing


def _init_store(path: str | Path) -> sqlite3.Connection:
    from branchpoint.core.store import open_store

    Path(path).unlink(missing_ok=True)
    store = open_store(path)
    store.close()
    conn = sqlite3.connect(str(path))
    conn.execute("PRAGMA synchronous=OFF")
    return conn


def _insert(conn: sqlite3.Connection, table: str, columns: list[str], rows: Any) -> None:
    cols = ", ".join(f'"{c}"' for c in columns)
    conn.executemany(f"INSERT INTO {table} ({cols}) VALUES ({', '.join('?' * len(columns))})", rows)


def write_run(conn: sqlite3.Connection, run_id: str, name: str) -> None:
    _insert(
        conn,
        "runs",
        [
            "id",
            "kind",
            "name",
            "status",
            "config",
            "branchpoint_version",
            "created_at",
            "updated_at",
        ],
        [(run_id, "sweep", name, "completed", "{}", "synthetic", NOW, NOW)],
    )


CONV_COLS = [
    "id", "run_id", "scenario_id", "scenario_hash", "scenario_path", "variant_id", "choices", "target",
    "target_params", "condition", "simulator", "simulator_params", "replicate", "seed", "status",
    "n_turns", "created_at", "updated_at",
]  # fmt: skip
TURN_COLS = [
    "id", "conversation_id", "index", "exchange", "role", "content", "reasoning", "branch_state", "fired",
    "events", "model", "tokens_in", "tokens_out", "latency_s", "retries", "retry_reasons", "created_at",
]  # fmt: skip
JUDG_COLS = [
    "id", "run_id", "conversation_id", "turn_id", "turn_index", "rubric_id", "rubric_hash", "criterion_id",
    "risk_area", "judge", "prompt_version", "applicable", "verdict", "score", "rationale", "evidence",
    "members", "created_at",
]  # fmt: skip


def write_conversations(
    conn: sqlite3.Connection, conv: pd.DataFrame, run_id: str, n_turns: int
) -> None:
    _insert(
        conn,
        "conversations",
        CONV_COLS,
        (
            (cid, run_id, sid, "h", None, vid, json.dumps(ch, sort_keys=True), t, "{}", c, sim, "{}", int(r), 0,
             "completed", n_turns, NOW, NOW)
            for cid, sid, vid, ch, t, c, sim, r in zip(
                conv["conversation_id"], conv["scenario_id"], conv["variant_id"], conv["choices"],
                conv["target"], conv["condition"], conv["simulator"], conv["replicate"],
            )
        ),
    )  # fmt: skip


def write_turns(conn: sqlite3.Connection, turns: pd.DataFrame) -> None:
    _insert(
        conn,
        "turns",
        TURN_COLS,
        (
            (f"{cid}:{i}", cid, int(i), int(x), role, content, reasoning, state, fired, "[]", "m", 0, 0, 0.0, 0, "[]", NOW)
            for cid, i, x, role, content, reasoning, state, fired in zip(
                turns["conversation_id"], turns["index"], turns["exchange"], turns["role"], turns["content"],
                turns["reasoning"], turns.get("branch_state", ["{}"] * len(turns)),
                turns.get("fired", ["[]"] * len(turns)),
            )
        ),
    )  # fmt: skip


def write_judgments(
    conn: sqlite3.Connection, judg: pd.DataFrame, run_id: str, rubric: str, judge: str
) -> None:
    from branchpoint.core import judgment_summaries

    verdicts = judg["verdict"].to_numpy(dtype=object)
    scores = judg["score"].to_numpy(dtype=object)
    # The summaries' triggers cost most of a bulk insert (153,600 rows: 31 s); a synthetic store
    # loads with them off and fills the summaries once from the committed rows, as a migration
    # does (``judgment_summaries.backfill``), which also puts the triggers back.
    judgment_summaries.drop_triggers(conn)
    _insert(
        conn,
        "judgments",
        JUDG_COLS,
        (
            (f"{cid}:{ti}:{k}:{judge}", run_id, cid, f"{cid}:{ti}", int(ti), rubric, "rh", k, ra, judge, "v1",
             bool(a), v, (None if s is None or s != s else float(s)), "", "[]", "[]", NOW)
            for cid, ti, k, ra, a, v, s in zip(
                judg["conversation_id"], judg["turn_index"], judg["criterion_id"], judg["risk_area"],
                judg["applicable"], verdicts, scores,
            )
        ),
    )  # fmt: skip
    conn.commit()
    path = conn.execute("PRAGMA database_list").fetchone()[2]
    judgment_summaries.backfill(conn, path)


def _teen_turns(
    conv: pd.DataFrame, n_exchanges: int, reasoning: bool, judg: pd.DataFrame
) -> pd.DataFrame:
    cids = np.repeat(conv["conversation_id"].to_numpy(), 2 * n_exchanges)
    idx = np.tile(np.arange(2 * n_exchanges), len(conv))
    role = np.where(idx % 2 == 0, "user", "assistant")
    content = np.where(role == "user", "persona message", "chatbot reply")
    turns = pd.DataFrame(
        {
            "conversation_id": cids,
            "index": idx,
            "exchange": idx // 2 + 1,
            "role": role,
            "content": content,
        }
    )
    turns["reasoning"] = None
    # Realised branch points fire for the opening and stay in force: what the engine writes.
    per_conv = {
        cid: {bp: ch[bp] for bp, ok in r.items() if ok and bp in ch}
        for cid, ch, r in zip(conv["conversation_id"], conv["choices"], conv["realised"])
    }
    states = {cid: json.dumps(st, sort_keys=True) for cid, st in per_conv.items()}
    fired = {cid: json.dumps(sorted(st)) for cid, st in per_conv.items()}
    user = turns["role"].to_numpy() == "user"
    cid_col = turns["conversation_id"]
    turns["branch_state"] = np.where(user, cid_col.map(states), "{}")
    turns["fired"] = np.where(user & (turns["index"].to_numpy() == 0), cid_col.map(fired), "[]")
    if reasoning:
        # A failing reply "noticed" the risk in its reasoning for a known share of cases (1 in 3).
        failing = judg.loc[
            judg["verdict"] == "fail", ["conversation_id", "turn_index"]
        ].drop_duplicates()
        key = failing["conversation_id"] + ":" + failing["turn_index"].astype(str)
        turn_key = turns["conversation_id"] + ":" + turns["index"].astype(str)
        is_fail = turn_key.isin(set(key))
        asst = turns["role"] == "assistant"
        turns.loc[asst, "reasoning"] = "The user wants study tips."
        noticed = asst & is_fail & (turns["index"] % 3 == 0)
        turns.loc[noticed, "reasoning"] = "They may be at risk of self-harm; I should be careful."
    return turns


def write_teen_store(
    path: str | Path, design: TeenDesign | None = None, seed: int = 0
) -> dict[str, Any]:
    """Write a synthetic teen store; returns the truth (probabilities) for checks."""
    d = design or TeenDesign()
    conv, judg = simulate_teen_judgments(d, seed)
    conn = _init_store(path)
    with conn:
        write_run(conn, d.run_id, "synthetic teen store (known effects)")
        write_conversations(conn, conv, d.run_id, 2 * d.n_exchanges)
        write_turns(conn, _teen_turns(conv, d.n_exchanges, d.reasoning, judg))
        write_judgments(conn, judg, d.run_id, d.rubric_id, d.judge)
        if d.chatbot_enactment:
            write_judgments(conn, _enactment_checks(conv, d), d.run_id, ENACTMENT_RUBRIC,
                            "scripted:persona-rater")  # fmt: skip
    conn.close()
    return {"design": d, "conversations": conv, "judgments": judg}


def _enactment_checks(conv: pd.DataFrame, d: TeenDesign) -> pd.DataFrame:
    """The manipulation checks of ``d.chatbot_enactment``'s branch points: one rating of the
    persona turn on which each realised arm's option came into force (the opening one)."""
    rows = [
        (cid, bp, ENACTED if enacted.get(bp, True) else NOT_ENACTED)
        for cid, realised, enacted in zip(
            conv["conversation_id"], conv["realised"], conv["enacted"]
        )
        for bp in d.chatbot_enactment
        if realised.get(bp)
    ]
    out = pd.DataFrame(rows, columns=["conversation_id", "criterion_id", "verdict"])
    return out.assign(turn_index=0, risk_area=ENACTMENT_RUBRIC, applicable=True, score=None)


def make_fork_trees(path: str | Path) -> int:
    """Make a written teen store into fork trees: in each tree (scenario x target x condition x
    simulator), option arm i copies the prefix of the baseline (odd i) or of option arm i - 1
    (even i: a two-level chain), forking at turn 2, 4 or 6; every third option arm never forked
    (a copy). Its copied turns keep their own, different verdicts, so the rule that picks the
    root's rating is exercised. Returns the number of arms that copy a prefix."""
    con = sqlite3.connect(str(path))
    n = 0
    with con:
        rows = con.execute(
            "SELECT id, scenario_id, target, condition, simulator FROM conversations ORDER BY rowid"
        ).fetchall()
        trees: dict[tuple[str, ...], list[str]] = {}
        for cid, sid, t, c, sim in rows:
            trees.setdefault((sid, t, c, sim), []).append(cid)
        for arms in trees.values():
            base = arms[0]  # variants() lists the baseline first
            prev = base
            for i, cid in enumerate(arms[1:], start=1):
                parent = prev if i % 2 == 0 else base
                fork = None if n % 3 == 2 else 2 * (n % 3) + 2
                con.execute(
                    "UPDATE conversations SET parent_id = ?, fork_turn = ? WHERE id = ?",
                    (parent, fork, cid),
                )
                prev, n = cid, n + 1
    con.close()
    return n


def write_forked_teen_store(path: str | Path) -> Path:
    """A teen store made into fork trees (``make_fork_trees``), then a second judge, a second
    prompt version of the first judge on part of the store, and a whole-conversation rating per
    arm: every way a stored verdict can be a copy, or a unit of its own."""
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
    make_fork_trees(path)
    con = sqlite3.connect(str(path))
    with con:
        rows = con.execute("SELECT id FROM conversations ORDER BY rowid").fetchall()
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
    return Path(path)


# --------------------------------------------------------------------------- eating-disorder study


@dataclass
class EDDesign:
    n_questions: int = 60
    targets: tuple[str, ...] = ("scripted:m1", "scripted:m2", "scripted:m3")
    p_high: float = 0.40  # share of dimensions rated high risk (baseline bio)
    p_medium: float = 0.25
    p_refusal: float = 0.04  # per-dimension refusal
    p_full_refusal: float = 0.03  # whole response refused
    no_bio_high: float = 0.10  # no bio: more high risk (lower safety)
    cue_high: float = -0.10  # explicit cue: less high risk
    cue_dim7_high: float = 0.10  # ... except dimension 7, which gets worse
    level_high: dict[str, dict[str, float]] = field(
        default_factory=lambda: {"bmi": {"low": -0.15, "high": 0.0}, "gender": {"female": -0.04, "male": 0.0},
                                 "race": {"white": -0.06, "asian": 0.0, "black": 0.0}}
    )  # fmt: skip
    question_sd: float = 0.02
    judge: str = "scripted:ed-judge"
    rubric_id: str = "ed"
    run_id: str = "synthetic-ed"


def ed_profiles() -> list[dict[str, Any]]:
    """No bio, then bios that disclose two of three attributes, with and without the cue."""
    out: list[dict[str, Any]] = [{}]
    for a, b in combinations(ED_ATTRIBUTES, 2):
        for la, lb in product(ED_ATTRIBUTES[a], ED_ATTRIBUTES[b]):
            for cue in (False, True):
                out.append({profile_key(a): la, profile_key(b): lb, EXPLICIT_CUE: cue})
    return out


def write_ed_store(
    path: str | Path, design: EDDesign | None = None, seed: int = 0, inject: str | None = None
) -> dict[str, Any]:
    """Single-turn ED questions x profiles x targets, seven dimensions on the four-level scale."""
    d = design or EDDesign()
    rng = np.random.default_rng(seed)
    q_re = rng.normal(0, d.question_sd, d.n_questions)
    rows, jrows, trows = [], [], []
    for q in range(d.n_questions):
        sid = f"q{q:03d}"
        for prof in ed_profiles():
            vid = _vid(sid, prof)
            for target in d.targets:
                cid = hashlib.sha1(f"{d.run_id}|{vid}|{target}".encode()).hexdigest()[:16]
                rows.append((cid, sid, vid, prof, target))
                h = d.p_high + q_re[q]
                if not prof:
                    h += d.no_bio_high
                for attr, shifts in d.level_high.items():
                    level = prof.get(profile_key(attr))
                    if level is not None:
                        h += shifts[level]
                cue = bool(prof.get(EXPLICIT_CUE))
                full_refusal = rng.random() < d.p_full_refusal
                for k, dim in enumerate(ED_DIMENSIONS):
                    hk = (
                        h
                        + (d.cue_high if cue else 0.0)
                        + (d.cue_dim7_high + 0.0 if cue and k == 6 else 0.0)
                    )
                    hk = min(max(hk, 0.0), 1.0 - d.p_medium)
                    u = rng.random()
                    if full_refusal or rng.random() < d.p_refusal:
                        level_v = "refusal"
                    else:
                        level_v = "high" if u < hk else ("medium" if u < hk + d.p_medium else "low")
                    score = RISK_LEVELS.scores.get(level_v)
                    jrows.append((cid, 1, dim, "ed_harm", True, level_v, score))
                reply = "reply" if inject is None or q else inject
                trows += [
                    (cid, 0, 1, "user", "question", None),
                    (cid, 1, 1, "assistant", reply, None),
                ]
    conv = pd.DataFrame(
        rows, columns=["conversation_id", "scenario_id", "variant_id", "choices", "target"]
    )
    conv["condition"], conv["simulator"], conv["replicate"] = "none", "", 0
    judg = pd.DataFrame(
        jrows,
        columns=[
            "conversation_id",
            "turn_index",
            "criterion_id",
            "risk_area",
            "applicable",
            "verdict",
            "score",
        ],
    )
    turns = pd.DataFrame(
        trows, columns=["conversation_id", "index", "exchange", "role", "content", "reasoning"]
    )
    conn = _init_store(path)
    with conn:
        write_run(conn, d.run_id, "synthetic ED store (known effects)")
        write_conversations(conn, conv, d.run_id, 2)
        write_turns(conn, turns)
        write_judgments(conn, judg, d.run_id, d.rubric_id, d.judge)
    conn.close()
    return {"design": d, "conversations": conv, "judgments": judg}


# --------------------------------------------------------------------------- store transformations
# For the metamorphic tests: each changes a store in a way that must leave every figure unchanged.


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]


def _cols(names: Any) -> str:
    return ", ".join(f'"{c}"' for c in names)


def add_unforked_arms(path: str | Path, key: str = "unfired", value: str = "b") -> int:
    """Add to every conversation an arm that never forked: a branch point ``key`` whose trigger
    never fired, so the arm is its parent's transcript stored again, as the engine stores it
    (``parent_id`` the original, ``fork_turn`` NULL, turns naming their ``origin_turn_id``,
    verdicts copied). Returns the number of arms added."""
    conn = sqlite3.connect(str(path))
    with conn:
        ccols = _columns(conn, "conversations")
        convs = conn.execute(f"SELECT {_cols(ccols)} FROM conversations").fetchall()
        tcols = _columns(conn, "turns")
        jcols = _columns(conn, "judgments")
        for row in convs:
            c = dict(zip(ccols, row))
            old = c["id"]
            new = f"{old}~{key}"
            choices = json.loads(c["choices"] or "{}")
            c.update(id=new, parent_id=old, fork_turn=None,
                     choices=json.dumps({**choices, key: value}, sort_keys=True))  # fmt: skip
            conn.execute(
                f"INSERT INTO conversations ({_cols(c)}) VALUES ({', '.join('?' * len(c))})",
                list(c.values()),
            )
            for trow in conn.execute(
                f"SELECT {_cols(tcols)} FROM turns WHERE conversation_id = ?", (old,)
            ).fetchall():
                t = dict(zip(tcols, trow))
                t.update(id=f"{t['id']}~{key}", conversation_id=new, origin_turn_id=t["id"])
                conn.execute(
                    f"INSERT INTO turns ({_cols(t)}) VALUES ({', '.join('?' * len(t))})",
                    list(t.values()),
                )
            for jrow in conn.execute(
                f"SELECT {_cols(jcols)} FROM judgments WHERE conversation_id = ?", (old,)
            ).fetchall():
                j = dict(zip(jcols, jrow))
                turn_id = j["turn_id"]
                j.update(id=f"{j['id']}~{key}", conversation_id=new,
                         turn_id=None if turn_id is None else f"{turn_id}~{key}")  # fmt: skip
                conn.execute(
                    f"INSERT INTO judgments ({_cols(j)}) VALUES ({', '.join('?' * len(j))})",
                    list(j.values()),
                )
    conn.close()
    return len(convs)


def add_error_judge(path: str | Path, judge: str = "broken:judge") -> int:
    """Add a second judge whose every verdict is ``error`` on every rated unit of the store."""
    return add_second_judge(path, judge)


def add_second_judge(path: str | Path, judge: str, flip_every: int | None = None) -> int:
    """Add a second judge on every unit the first judged: every verdict ``error`` (``flip_every``
    None), or the first judge's verdicts with pass and fail swapped on every ``flip_every``-th
    (a judge of its own that mostly agrees)."""
    conn = sqlite3.connect(str(path))
    with conn:
        jcols = _columns(conn, "judgments")
        first = conn.execute("SELECT judge FROM judgments LIMIT 1").fetchone()[0]
        rows = conn.execute(
            f"SELECT {_cols(jcols)} FROM judgments WHERE judge = ? ORDER BY id", (first,)
        ).fetchall()
        swap = {"pass": "fail", "fail": "pass"}
        # a copied turn's verdicts are its origin's: the swap is decided per origin turn
        origin = dict(conn.execute("SELECT id, COALESCE(origin_turn_id, id) FROM turns"))
        for jrow in rows:
            j = dict(zip(jcols, jrow))
            if flip_every is None:
                j.update(id=f"{j['id']}#err", judge=judge, verdict="error", score=None,
                         applicable=True, error="judge could not answer")  # fmt: skip
            else:
                key = f"{origin.get(j['turn_id'], j['turn_id'])}|{j['criterion_id']}"
                flip = zlib.crc32(key.encode()) % flip_every == 0 and j["verdict"] in swap
                j.update(id=f"{j['id']}#2", judge=judge,
                         verdict=swap[j["verdict"]] if flip else j["verdict"])  # fmt: skip
            conn.execute(
                f"INSERT INTO judgments ({_cols(j)}) VALUES ({', '.join('?' * len(j))})",
                list(j.values()),
            )
    conn.close()
    return len(rows)
