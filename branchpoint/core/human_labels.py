"""Human labels: the labelling queue, saving a label at once, and the rows of the CSV exchange.

A label has the key of a judgment (conversation, turn, rubric, criterion) plus its annotator, so
agreement lines labels up with judges. Persona realism ratings use the same table under the
pseudo-rubric ``realism`` (criterion ``persona_realism`` on one persona turn, or
``conversation_realism`` on a whole conversation), so that they are stored, resumed, exported and
imported the same way.

Sampled queues are labelling designs (``LabelDesign``): drawn once at random, without replacement
within each stratum, and stored with their strata and inclusion probabilities. Reopening a queue
with the same settings is a lookup of the stored draw, so a labeller resumes where they left and
the judge-corrected estimators (``branchpoint.analysis.judge_correction.estimators``) know how every item was chosen. A
label made from a design's queue carries its ``design_id``; any other label (hand-picked,
imported without a design) is kept but is outside the design.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterable, Iterator
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from sqlalchemy import Select, and_, exists, func, or_, select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from branchpoint.core.domain import (
    REALISM_CONVERSATION as REALISM_CONVERSATION,  # the labels' API too
)
from branchpoint.core.domain import REALISM_LEVELS as REALISM_LEVELS
from branchpoint.core.domain import REALISM_RUBRIC as REALISM_RUBRIC
from branchpoint.core.domain import REALISM_TURN as REALISM_TURN
from branchpoint.core.records import (
    Conversation,
    HumanLabel,
    Judgment,
    LabelDesign,
    LabelDesignItem,
    Turn,
    utcnow,
)
from branchpoint.core.store import Store

CONFIDENCE_LEVELS: tuple[str, ...] = ("low", "medium", "high")

C = Conversation.__table__.c  # type: ignore[attr-defined]
T = Turn.__table__.c  # type: ignore[attr-defined]
J = Judgment.__table__.c  # type: ignore[attr-defined]
H = HumanLabel.__table__.c  # type: ignore[attr-defined]
LD = LabelDesign.__table__.c  # type: ignore[attr-defined]
LI = LabelDesignItem.__table__.c  # type: ignore[attr-defined]


class LabelItem(BaseModel):
    """One thing to label: a criterion on a chatbot turn, or the realism of a persona turn."""

    model_config = ConfigDict(frozen=True)

    conversation_id: str
    turn_index: int | None  # None: the whole conversation
    rubric_id: str
    criterion_id: str
    # the stored labelling design that drew this item; None: a hand-picked queue
    design_id: str | None = None

    @property
    def turn_id(self) -> str | None:
        return None if self.turn_index is None else f"{self.conversation_id}:{self.turn_index}"

    @property
    def kind(self) -> Literal["criterion", "realism"]:
        return "realism" if self.rubric_id == REALISM_RUBRIC else "criterion"


class LabelRow(BaseModel):
    """A label as exported and imported (the documented CSV columns, in this order)."""

    conversation_id: str
    turn_index: int | None = None
    rubric_id: str
    criterion_id: str
    annotator: str
    verdict: str | None = None  # empty: not applicable
    note: str = ""
    confidence: str | None = None
    time_spent_s: float | None = None
    blind: bool | None = None
    design_id: str | None = None  # the labelling design whose queue it came from; empty: none


LABEL_COLUMNS: tuple[str, ...] = tuple(LabelRow.model_fields)


def label_id(annotator: str, item: LabelItem | LabelRow) -> str:
    """One label per annotator and key: labelling again replaces the earlier label."""
    turn = "-" if item.turn_index is None else str(item.turn_index)
    return f"{annotator}|{item.conversation_id}|{turn}|{item.rubric_id}|{item.criterion_id}"


def _values(row: LabelRow, created_at: Any) -> dict[str, Any]:
    """The ``human_labels`` row of ``row``, as plain values (a model object per row costs more
    than storing it)."""
    return {
        "id": label_id(row.annotator, row),
        "conversation_id": row.conversation_id,
        "turn_id": None if row.turn_index is None else f"{row.conversation_id}:{row.turn_index}",
        "turn_index": row.turn_index,
        "rubric_id": row.rubric_id,
        "criterion_id": row.criterion_id,
        "annotator": row.annotator,
        "verdict": row.verdict,
        "note": row.note,
        "confidence": row.confidence,
        "time_spent_s": row.time_spent_s,
        "blind": row.blind,
        "design_id": row.design_id,
        "created_at": created_at,
    }


def _record(row: LabelRow) -> HumanLabel:
    return HumanLabel(**_values(row, utcnow()))


def save_label(store: Store, row: LabelRow) -> HumanLabel:
    """Store one label now (its own transaction), replacing this annotator's earlier one."""
    with store.session() as s:
        merged = s.merge(_record(row))
        s.commit()
        return merged


_LABEL_BATCH = 5_000  # rows per executemany: bounded memory per statement on any driver


def save_labels(store: Store, rows: Iterable[LabelRow]) -> int:
    """Store many labels in one transaction: all of them or, on an error, none; returns how many
    rows were given.

    One upsert per batch of rows (``branchpoint.core.upserts``), not an ORM merge per row (42 s
    for 100,000 rows; ``benchmarks/labels_import.py``). A later row with the key of an earlier
    one replaces it, as labelling again does."""
    from branchpoint.core.upserts import upsert

    records: dict[str, dict[str, Any]] = {}
    n, now = 0, utcnow()
    for row in rows:
        n += 1
        values = _values(row, now)
        records.pop(values["id"], None)  # the later row wins, and keeps its place
        records[values["id"]] = values
    if not records:
        return 0
    table = HumanLabel.__table__  # type: ignore[attr-defined]
    columns = [c.name for c in table.columns if c.name != "id"]
    batch = list(records.values())
    with store.engine.begin() as conn:
        stmt = upsert(conn.dialect.name, table, ["id"], columns)
        for start in range(0, len(batch), _LABEL_BATCH):
            conn.execute(stmt, batch[start : start + _LABEL_BATCH])
    return n


def iter_labels(store: Store, run_id: str | None = None) -> Iterator[LabelRow]:
    """Every label (of one run's conversations), in a stable order, for export."""
    q = select(HumanLabel.__table__).order_by(H.annotator, H.conversation_id, H.turn_index, H.id)  # type: ignore[attr-defined]
    if run_id is not None:
        q = q.where(H.conversation_id.in_(select(C.id).where(C.run_id == run_id)))
    with store.engine.connect() as conn:
        for r in conn.execute(q):
            yield LabelRow(**{k: r._mapping[k] for k in LABEL_COLUMNS})


def labelled(store: Store, annotator: str, items: list[LabelItem]) -> set[LabelItem]:
    """The items of a queue this annotator has labelled already (to resume where they left)."""
    ids = {label_id(annotator, it): it for it in items}
    done: set[LabelItem] = set()
    keys = list(ids)
    with store.engine.connect() as conn:
        for i in range(0, len(keys), 500):
            q = select(H.id).where(H.id.in_(keys[i : i + 500]))
            done.update(ids[v] for (v,) in conn.execute(q))
    return done


# --------------------------------------------------------------------------- designs

DesignKind = Literal["criterion", "realism"]
Key = tuple[str, int | None, str, str]  # conversation, turn index, rubric, criterion
STRATUM_SEP = " | "
# Draws by random rowid try this many times per wanted item before the strata still short are
# read whole (a stratum that is a small part of the store, or empty).
TRIES_PER_ITEM = 60


class DesignSettings(BaseModel):
    """What a labelling design draws from, and how many; its hash is the design's id."""

    model_config = ConfigDict(frozen=True)

    kind: DesignKind = "criterion"
    n: int
    seed: int = 0
    run_id: str | None = None
    judge: str | None = None
    rubric_id: str | None = None
    by_criterion: bool = False  # strata target x condition x criterion, not target x condition

    @property
    def id(self) -> str:
        text = json.dumps(self.model_dump(), sort_keys=True)
        return "design-" + hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def stratum_columns(self) -> tuple[str, ...]:
        if self.kind == "realism":
            return ("simulator",)
        return (
            ("target", "condition", "criterion_id")
            if self.by_criterion
            else ("target", "condition")
        )


def stratum_key(values: Iterable[object]) -> str:
    """How a stratum is written in the store: its column values joined (target | condition)."""
    return STRATUM_SEP.join("" if v is None else str(v) for v in values)


def _own_turn(fork_turn: Any, turn_index: Any) -> bool:
    """The turn is its arm's own, not a copy of its parent's: the unit of analysis
    (``branchpoint.core.read.units``). An arm copies turns ``[0, fork_turn)`` from its parent,
    every turn when it never forked (``fork_turn`` None)."""
    return fork_turn is not None and turn_index is not None and turn_index >= fork_turn


def _eligible(settings: DesignSettings) -> list[Any]:
    """A judged turn belongs to a criterion design's population: the criterion applied and the
    judge gave a level (not ``error``), within the design's run, judge and rubric, on a turn its
    arm produced. A turn that several arms carry is one item, drawn from the arm that produced
    it, so every item is equally likely (the rate tables count it once too)."""
    own = or_(
        C.parent_id.is_(None),
        and_(C.fork_turn.is_not(None), J.turn_index >= C.fork_turn),
    )
    where: list[Any] = [
        J.applicable.is_(True),
        J.verdict.is_not(None),
        J.verdict != "error",
        J.turn_index.is_not(None),
        # a primary-key lookup per row (an IN over a correlated subquery scanned them all)
        exists().where(C.id == J.conversation_id, own),
    ]
    if settings.run_id is not None:
        where.append(J.run_id == settings.run_id)
    if settings.judge is not None:
        where.append(J.judge == settings.judge)
    if settings.rubric_id is not None:
        where.append(J.rubric_id == settings.rubric_id)
    return where


def _keys_select(settings: DesignSettings, before: Any = None) -> Select[Any]:
    """Every item of the population once (two judges may rate one key), with its stratum columns;
    ``before``: only what was written by then."""
    if settings.kind == "realism":
        where = [T.role == "user", T.origin_turn_id.is_(None)]  # a copied turn is no item
        if before is not None:
            where.append(T.created_at <= before)
        if settings.run_id is not None:
            where.append(C.run_id == settings.run_id)
        return (
            select(
                T.conversation_id,
                T["index"].label("turn_index"),
                C.simulator,
            )
            .select_from(Turn.__table__.join(Conversation.__table__, T.conversation_id == C.id))  # type: ignore[attr-defined]
            .where(*where)
        )
    eligible = _eligible(settings)
    if before is not None:
        eligible.append(J.created_at <= before)
    keys = (
        select(J.conversation_id, J.turn_index, J.rubric_id, J.criterion_id)
        .where(*eligible)
        .distinct()
        .subquery()
    )
    return select(
        keys.c.conversation_id,
        keys.c.turn_index,
        keys.c.rubric_id,
        keys.c.criterion_id,
        C.target,
        C.condition,
    ).join_from(keys, Conversation.__table__, C.id == keys.c.conversation_id)  # type: ignore[attr-defined]


def _row_key(settings: DesignSettings, row: Any) -> tuple[Key, str]:
    m = row._mapping
    if settings.kind == "realism":
        key: Key = (m["conversation_id"], m["turn_index"], REALISM_RUBRIC, REALISM_TURN)
    else:
        key = (m["conversation_id"], m["turn_index"], m["rubric_id"], m["criterion_id"])
    values = {**m, "criterion_id": key[3]}
    return key, stratum_key(values[c] for c in settings.stratum_columns)


def _population(conn: Connection, settings: DesignSettings, before: Any = None) -> dict[str, int]:
    """Stratum -> number of items in it (``before``: only judgments, or turns, made by then):
    one grouped query over every judgment, so it is run when counts are asked for
    (``design_population``), not when a queue opens."""
    keys = _keys_select(settings, before).subquery()
    cols = [keys.c[c] for c in settings.stratum_columns]
    q = select(*cols, func.count()).group_by(*cols).order_by(*cols)
    return {stratum_key(r[:-1]): int(r[-1]) for r in conn.execute(q)}


def _strata(conn: Connection, settings: DesignSettings) -> list[str]:
    """The strata a design draws from, from the conversations (and the judgments' criterion
    index): no pass over the judgments."""
    cols = {"simulator": C.simulator, "target": C.target, "condition": C.condition}
    base = [cols[c] for c in settings.stratum_columns if c in cols]
    q = select(*base).distinct().order_by(*base)
    if settings.run_id is not None:
        q = q.where(C.run_id == settings.run_id)
    found = [tuple(r) for r in conn.execute(q)]
    if "criterion_id" in settings.stratum_columns:
        cq = select(J.criterion_id).distinct().order_by(J.criterion_id)
        if settings.rubric_id is not None:
            cq = cq.where(J.rubric_id == settings.rubric_id)
        criteria = [c for (c,) in conn.execute(cq)]
        found = [(*r, c) for r in found for c in criteria]
    return [stratum_key(r) for r in found]


def _allocation(strata: list[str], n: int) -> dict[str, int]:
    """Equal shares per stratum (each target x condition gets as many labels), the remainder to
    the first strata in order. A stratum holding fewer items gives all it has."""
    share, extra = divmod(n, len(strata)) if strata else (0, 0)
    return {s: share + (1 if i < extra else 0) for i, s in enumerate(strata)}


class _RowidSampler:
    """Uniform draws of population items by random SQLite rowid: a rowid that does not exist,
    a row outside the population or a stratum already full is drawn again, and a key that
    ``m`` rows share (two judges) is kept with probability 1/m, so every item of a stratum is
    equally likely. Each try is a primary-key lookup: nothing is sorted or scanned."""

    def __init__(self, conn: Connection, settings: DesignSettings) -> None:
        self.conn, self.settings = conn, settings
        self.table = "turns" if settings.kind == "realism" else "judgments"
        lo, hi = conn.exec_driver_sql(f"SELECT min(rowid), max(rowid) FROM {self.table}").one()
        self.lo, self.hi = lo, hi
        # rows sharing a key (two judges): plain SQL, so each try costs no statement compilation
        where = [
            "applicable",
            "verdict IS NOT NULL",
            "verdict != 'error'",
            "conversation_id = ?",
            "turn_index = ?",
            "rubric_id = ?",
            "criterion_id = ?",
        ]
        for column in ("run_id", "judge", "rubric_id"):
            value = getattr(settings, column)
            if value is not None:
                where.append(f"{column} = '{str(value).replace(chr(39), chr(39) * 2)}'")
        self.shared_sql = f"SELECT count(*) FROM judgments WHERE {' AND '.join(where)}"
        self.strata_of: dict[str, tuple[Any, ...]] = {}

    def _conversation(self, cid: str) -> tuple[Any, ...]:
        if cid not in self.strata_of:
            row = self.conn.exec_driver_sql(
                "SELECT run_id, target, condition, simulator, parent_id, fork_turn "
                "FROM conversations WHERE id = ?",
                (cid,),
            ).one()
            self.strata_of[cid] = tuple(row)
        return self.strata_of[cid]

    def draw(self, rng: random.Random) -> tuple[Key, str] | None:
        if self.lo is None:
            return None
        s = self.settings
        rowid = rng.randint(self.lo, self.hi)
        if s.kind == "realism":
            row = self.conn.exec_driver_sql(
                'SELECT conversation_id, "index", role, origin_turn_id FROM turns WHERE rowid = ?',
                (rowid,),
            ).first()
            if row is None or row[2] != "user" or row[3]:  # a copied turn is no item
                return None
            run, _, _, simulator, _, _ = self._conversation(row[0])
            if s.run_id is not None and run != s.run_id:
                return None
            return (row[0], row[1], REALISM_RUBRIC, REALISM_TURN), stratum_key([simulator])
        row = self.conn.exec_driver_sql(
            "SELECT conversation_id, turn_index, rubric_id, criterion_id, run_id, judge, "
            "applicable, verdict FROM judgments WHERE rowid = ?",
            (rowid,),
        ).first()
        if row is None:
            return None
        cid, turn, rubric, crit, run, judge, applicable, verdict = row
        if not applicable or verdict is None or verdict == "error" or turn is None:
            return None
        if (s.run_id is not None and run != s.run_id) or (s.judge is not None and judge != s.judge):
            return None
        if s.rubric_id is not None and rubric != s.rubric_id:
            return None
        _, target, condition, _, parent, fork_turn = self._conversation(cid)
        if parent and not _own_turn(fork_turn, turn):  # a copy: drawn from the arm it copies
            return None
        values = {"target": target, "condition": condition, "criterion_id": crit}
        stratum = stratum_key(values[c] for c in s.stratum_columns)
        key: Key = (cid, turn, rubric, crit)
        shared = self.conn.exec_driver_sql(self.shared_sql, (cid, turn, rubric, crit)).scalar_one()
        if shared > 1 and rng.random() >= 1 / shared:
            return None
        return key, stratum


def _draw(
    conn: Connection, settings: DesignSettings, want: dict[str, int]
) -> list[tuple[Key, str]]:
    """Each stratum's share drawn at random without replacement, seeded."""
    rng = random.Random(settings.seed)
    drawn: dict[Key, str] = {}
    short = {s: k for s, k in want.items() if k > 0}
    if conn.dialect.name == "sqlite" and short and TRIES_PER_ITEM > 0:
        sampler = _RowidSampler(conn, settings)
        for _ in range(TRIES_PER_ITEM * sum(short.values()) + 1000):
            if not short:
                break
            got = sampler.draw(rng)
            if got is None or got[1] not in short or got[0] in drawn:
                continue
            drawn[got[0]] = got[1]
            short[got[1]] -= 1
            if short[got[1]] == 0:
                del short[got[1]]
    if short:  # strata too rare for random rowids (or another database): read them whole
        keys = _keys_select(settings).subquery()
        cols = [keys.c[c] for c in settings.stratum_columns]
        for stratum in sorted(short):
            values = stratum.split(STRATUM_SEP)
            q = select(keys).where(*(c == v for c, v in zip(cols, values)))
            q = q.order_by(*keys.c)  # a stable order for the seeded sample
            rest = [
                kv for kv in (_row_key(settings, r) for r in conn.execute(q)) if kv[0] not in drawn
            ]
            for key, st in rng.sample(rest, min(short[stratum], len(rest))):
                drawn[key] = st
    out = list(drawn.items())
    rng.shuffle(out)  # strata interleaved, so a labeller cannot guess the stratum from order
    return out


def _stored(conn: Connection, design: str) -> list[LabelItem] | None:
    if conn.execute(select(LD.id).where(LD.id == design)).first() is None:
        return None
    q = (
        select(LI.conversation_id, LI.turn_index, LI.rubric_id, LI.criterion_id)
        .where(LI.design_id == design)
        .order_by(LI.position)
    )
    return [
        LabelItem(conversation_id=c, turn_index=t, rubric_id=r, criterion_id=k, design_id=design)
        for c, t, r, k in conn.execute(q)
    ]


def design_queue(store: Store, settings: DesignSettings) -> list[LabelItem]:
    """The queue of a labelling design: the stored draw when these settings were drawn before
    (one indexed lookup), else a new seeded draw, stored before it is returned.

    The draw itself reads no more than it keeps: the strata come from the conversations, items
    from random rowids. The strata's sizes, hence each item's inclusion probability (drawn / size),
    are counted by ``design_population`` over what existed when the draw began (one pass over the
    judgments: seconds on a large store, so not while a labeller waits)."""
    design = settings.id
    with store.engine.connect() as conn:
        items = _stored(conn, design)
        if items is not None:
            return items
        started = utcnow()
        want = _allocation(_strata(conn, settings), settings.n)
        drawn = _draw(conn, settings, want)
    got: dict[str, int] = {}
    for _, stratum in drawn:
        got[stratum] = got.get(stratum, 0) + 1
    strata = {s: {"population": None, "drawn": got.get(s, 0)} for s in want}
    rows = [
        {
            "design_id": design,
            "position": i,
            "conversation_id": key[0],
            "turn_index": key[1],
            "rubric_id": key[2],
            "criterion_id": key[3],
            "stratum": stratum,
            "inclusion_probability": None,
        }
        for i, (key, stratum) in enumerate(drawn)
    ]
    try:
        with store.engine.begin() as conn:
            conn.execute(
                LabelDesign.__table__.insert(),  # type: ignore[attr-defined]
                [
                    {
                        "id": design,
                        "kind": settings.kind,
                        "settings": settings.model_dump(),
                        "strata": strata,
                        "created_at": started,
                    }
                ],
            )
            if rows:
                conn.execute(LabelDesignItem.__table__.insert(), rows)  # type: ignore[attr-defined]
    except IntegrityError:  # another labeller drew the same design a moment ago: theirs stands
        with store.engine.connect() as conn:
            if _stored(conn, design) is None:
                raise
    with store.engine.connect() as conn:
        return _stored(conn, design) or []


def designs_of(store: Store) -> list[str]:
    """The ids of every stored labelling design."""
    with store.engine.connect() as conn:
        return [d for (d,) in conn.execute(select(LD.id).order_by(LD.created_at))]


def design_population(store: Store, design: str) -> dict[str, dict[str, Any]]:
    """Count each stratum of a stored design as it was when drawn (judgments, or persona turns,
    made before the draw began), store the counts and every item's inclusion probability
    (drawn / stratum size), and return the strata. Counted once: later calls read them."""
    with store.engine.connect() as conn:
        row = conn.execute(
            select(LD.settings, LD.strata, LD.created_at).where(LD.id == design)
        ).one()
        strata: dict[str, dict[str, Any]] = dict(row.strata)
        if all(v.get("population") is not None for v in strata.values()):
            return strata
        counts = _population(conn, DesignSettings(**row.settings), row.created_at)
    for stratum, size in counts.items():
        entry = strata.setdefault(stratum, {"drawn": 0})
        entry["population"] = size
    for entry in strata.values():
        entry.setdefault("population", 0)
        if entry["population"] is None:
            entry["population"] = 0
    with store.engine.begin() as conn:
        conn.execute(LabelDesign.__table__.update().where(LD.id == design).values(strata=strata))  # type: ignore[attr-defined]
        for stratum, entry in strata.items():
            if entry["drawn"] and entry["population"]:
                conn.execute(
                    LabelDesignItem.__table__.update()  # type: ignore[attr-defined]
                    .where(LI.design_id == design, LI.stratum == stratum)
                    .values(inclusion_probability=entry["drawn"] / entry["population"])
                )
    return strata


def sample_queue(
    store: Store,
    *,
    n: int,
    seed: int = 0,
    run_id: str | None = None,
    judge: str | None = None,
    rubric_id: str | None = None,
    by_criterion: bool = False,
) -> list[LabelItem]:
    """A labelling design of ``n`` judged turns x criteria: drawn at random without replacement
    within each target x condition (x criterion with ``by_criterion``), equal shares per stratum,
    seeded, stored (``design_queue``)."""
    settings = DesignSettings(
        kind="criterion", n=n, seed=seed, run_id=run_id, judge=judge, rubric_id=rubric_id,
        by_criterion=by_criterion,
    )  # fmt: skip
    return design_queue(store, settings)


def realism_queue(
    store: Store, *, n: int, seed: int = 0, run_id: str | None = None
) -> list[LabelItem]:
    """A design of ``n`` persona turns, equal shares per simulator, to be rated for realism
    without knowing the simulator; stored and resumed like ``sample_queue``."""
    return design_queue(store, DesignSettings(kind="realism", n=n, seed=seed, run_id=run_id))


def drawn_items(store: Store, designs: Iterable[str]) -> set[tuple[str, str, int | None, str, str]]:
    """(design_id, conversation_id, turn_index, rubric_id, criterion_id) of every item these
    designs drew: what an imported label's design_id is checked against."""
    ids = list(designs)
    if not ids:
        return set()
    q = select(LI.design_id, LI.conversation_id, LI.turn_index, LI.rubric_id, LI.criterion_id)
    with store.engine.connect() as conn:
        return {tuple(r) for r in conn.execute(q.where(LI.design_id.in_(ids)))}


def design_settings(store: Store, design: str) -> DesignSettings | None:
    with store.engine.connect() as conn:
        row = conn.execute(select(LD.settings).where(LD.id == design)).first()
    return None if row is None else DesignSettings(**row[0])


def conversation_queue(store: Store, conversation_ids: list[str]) -> list[LabelItem]:
    """Every chatbot turn of these conversations x the criteria some judge found applicable."""
    q = (
        select(J.conversation_id, J.turn_index, J.rubric_id, J.criterion_id)
        .distinct()
        .where(J.conversation_id.in_(conversation_ids), J.applicable.is_(True))
        .where(J.turn_index.is_not(None))
        .order_by(J.conversation_id, J.turn_index, J.rubric_id, J.criterion_id)
    )
    with store.engine.connect() as conn:
        rows = list(conn.execute(q))
    order = {cid: i for i, cid in enumerate(conversation_ids)}
    items = [
        LabelItem(conversation_id=c, turn_index=t, rubric_id=r, criterion_id=k)
        for c, t, r, k in rows
    ]
    return sorted(items, key=lambda it: (order[it.conversation_id], it.turn_index or 0))
