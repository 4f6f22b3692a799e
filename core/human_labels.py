"""Human labels: the labelling queue, saving a label at once, and the rows of the CSV exchange.

A label has the key of a judgment (conversation, turn, rubric, criterion) plus its annotator, so
agreement lines labels up with judges. Persona realism ratings use the same table under the
pseudo-rubric ``realism`` (criterion ``persona_realism`` on one persona turn, or
``conversation_realism`` on a whole conversation), so that they are stored, resumed, exported and
imported the same way.

Queues are deterministic: the same store, sample settings and seed give the same queue, so a
labeller resumes by rebuilding it and skipping what they have already labelled.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from typing import Literal

from pydantic import BaseModel, ConfigDict
from sqlalchemy import func, select

from core.records import Conversation, HumanLabel, Judgment, Turn, utcnow
from core.store import Store

REALISM_RUBRIC = "realism"
REALISM_TURN = "persona_realism"
REALISM_CONVERSATION = "conversation_realism"
REALISM_LEVELS: tuple[str, ...] = ("very", "mostly", "mixed", "not")
CONFIDENCE_LEVELS: tuple[str, ...] = ("low", "medium", "high")

C = Conversation.__table__.c  # type: ignore[attr-defined]
T = Turn.__table__.c  # type: ignore[attr-defined]
J = Judgment.__table__.c  # type: ignore[attr-defined]
H = HumanLabel.__table__.c  # type: ignore[attr-defined]


class LabelItem(BaseModel):
    """One thing to label: a criterion on a chatbot turn, or the realism of a persona turn."""

    model_config = ConfigDict(frozen=True)

    conversation_id: str
    turn_index: int | None  # None: the whole conversation
    rubric_id: str
    criterion_id: str

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


LABEL_COLUMNS: tuple[str, ...] = tuple(LabelRow.model_fields)


def label_id(annotator: str, item: LabelItem) -> str:
    """One label per annotator and key: labelling again replaces the earlier label."""
    turn = "-" if item.turn_index is None else str(item.turn_index)
    return f"{annotator}|{item.conversation_id}|{turn}|{item.rubric_id}|{item.criterion_id}"


def _record(row: LabelRow) -> HumanLabel:
    item = LabelItem(
        conversation_id=row.conversation_id,
        turn_index=row.turn_index,
        rubric_id=row.rubric_id,
        criterion_id=row.criterion_id,
    )
    return HumanLabel(
        id=label_id(row.annotator, item),
        conversation_id=row.conversation_id,
        turn_id=item.turn_id,
        turn_index=row.turn_index,
        rubric_id=row.rubric_id,
        criterion_id=row.criterion_id,
        annotator=row.annotator,
        verdict=row.verdict,
        note=row.note,
        confidence=row.confidence,
        time_spent_s=row.time_spent_s,
        blind=row.blind,
        created_at=utcnow(),
    )


def save_label(store: Store, row: LabelRow) -> HumanLabel:
    """Store one label now (its own transaction), replacing this annotator's earlier one."""
    with store.session() as s:
        merged = s.merge(_record(row))
        s.commit()
        return merged


def save_labels(store: Store, rows: Iterable[LabelRow]) -> int:
    """Store many labels in one transaction: all of them or, on an error, none."""
    n = 0
    with store.session() as s:
        for row in rows:
            s.merge(_record(row))
            n += 1
        s.commit()
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


# --------------------------------------------------------------------------- queues


def _applicable(run_id: str | None, judge: str | None, rubric_id: str | None) -> list[object]:
    where: list[object] = [
        J.applicable.is_(True),
        J.verdict.is_not(None),
        J.verdict != "error",
        J.turn_index.is_not(None),
    ]
    if run_id is not None:
        where.append(J.run_id == run_id)
    if judge is not None:
        where.append(J.judge == judge)
    if rubric_id is not None:
        where.append(J.rubric_id == rubric_id)
    return where


def sample_queue(
    store: Store,
    *,
    n: int,
    seed: int = 0,
    run_id: str | None = None,
    judge: str | None = None,
    rubric_id: str | None = None,
) -> list[LabelItem]:
    """A seeded sample of chatbot turns x applicable criteria, stratified by criterion and by the
    judge's verdict (equal shares, so rare failures are labelled as often as common passes).

    Strata are counted with one grouped query and each draw is one indexed ``OFFSET`` fetch, so the
    judgments table is never loaded.
    """
    where = _applicable(run_id, judge, rubric_id)
    strata_q = (
        select(J.rubric_id, J.criterion_id, J.verdict, func.count())
        .where(*where)  # type: ignore[arg-type]
        .group_by(J.rubric_id, J.criterion_id, J.verdict)
        .order_by(J.rubric_id, J.criterion_id, J.verdict)
    )
    rng = random.Random(seed)
    items: list[LabelItem] = []
    seen: set[LabelItem] = set()
    with store.engine.connect() as conn:
        strata = list(conn.execute(strata_q))
        if not strata:
            return []
        share, extra = divmod(n, len(strata))
        for i, (rubric, crit, verdict, count) in enumerate(strata):
            k = min(count, share + (1 if i < extra else 0))
            for offset in sorted(rng.sample(range(count), k)):
                q = (
                    select(J.conversation_id, J.turn_index)
                    .where(
                        *where,  # type: ignore[arg-type]
                        J.rubric_id == rubric,
                        J.criterion_id == crit,
                        J.verdict == verdict,
                    )
                    .order_by(J.id)
                    .offset(offset)
                    .limit(1)
                )
                row = conn.execute(q).one()
                item = LabelItem(
                    conversation_id=row.conversation_id,
                    turn_index=row.turn_index,
                    rubric_id=rubric,
                    criterion_id=crit,
                )
                if item not in seen:  # two judges may rate the same key
                    seen.add(item)
                    items.append(item)
    rng.shuffle(items)  # strata interleaved, so a labeller cannot guess the verdict from order
    return items


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


def realism_queue(
    store: Store, *, n: int, seed: int = 0, run_id: str | None = None
) -> list[LabelItem]:
    """A seeded sample of persona turns, stratified by the simulator that wrote them (equal
    shares), to be rated for realism without knowing the simulator."""
    base = [T.role == "user"]
    if run_id is not None:
        base.append(C.run_id == run_id)
    joined = Turn.__table__.join(Conversation.__table__, T.conversation_id == C.id)  # type: ignore[attr-defined]
    strata_q = (
        select(C.simulator, func.count())
        .select_from(joined)
        .where(*base)
        .group_by(C.simulator)
        .order_by(C.simulator)
    )
    rng = random.Random(seed)
    items: list[LabelItem] = []
    with store.engine.connect() as conn:
        strata = list(conn.execute(strata_q))
        if not strata:
            return []
        share, extra = divmod(n, len(strata))
        for i, (simulator, count) in enumerate(strata):
            k = min(count, share + (1 if i < extra else 0))
            for offset in sorted(rng.sample(range(count), k)):
                q = (
                    select(T.conversation_id, T["index"])
                    .select_from(joined)
                    .where(*base, C.simulator == simulator)
                    .order_by(T.id)
                    .offset(offset)
                    .limit(1)
                )
                cid, index = conn.execute(q).one()
                items.append(
                    LabelItem(
                        conversation_id=cid,
                        turn_index=index,
                        rubric_id=REALISM_RUBRIC,
                        criterion_id=REALISM_TURN,
                    )
                )
    rng.shuffle(items)
    return items
