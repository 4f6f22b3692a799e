"""Time to the first failure, one row per conversation: the exchange of its first failing
verdict, or the exchange it was last seen at and why it ended there (censored).

Outcomes: each criterion on its own, and ``ANY`` (the first failure on any criterion of the
rubric). A verdict of ``partial`` is not a failure; an ``error`` verdict is no verdict (the turn
may or may not have failed), so a conversation whose only "failure" is an error is censored like
one without. Judges and rubrics are kept apart (one row per conversation x rubric x judge x
outcome).

Censoring, by how the conversation ended (``Conversation.stop_reason``): the last exchange was
reached (``max_turns``), the persona ended the conversation, the target failed to answer, the
persona model failed, or a budget stopped the sweep. Each is censoring: the chatbot did not fail
up to that exchange and was not watched after it. A conversation still running is censored at
the last exchange judged.

The fork: a conversation's exchanges are all of its transcript, the prefix it shares with its
parent arm included. A failure before the fork is therefore a failure of every arm that carries
the turn, at the same exchange: the arms had one conversation up to there. Per-arm curves count
each arm's conversation; per-target curves leave out arms that never forked (their parent's
transcript stored again, one conversation).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from branchpoint.analysis.chatbots.arms import arm_labels
from branchpoint.analysis.tables.judgments import choice_columns

if TYPE_CHECKING:
    from collections.abc import Sequence

    from branchpoint.core.read.source import StoreRef

ANY = "(any criterion)"
FAILED = "failed"
ENDINGS = {
    "max_turns": "censored: last exchange reached",
    "persona_ended": "censored: persona ended the conversation",
    "target_error": "censored: target error",
    "simulator_error": "censored: persona model error",
    "stopped_by_budget": "censored: budget stop",
}
STILL_OPEN = "censored: not finished (last exchange judged)"
KEYS = ["conversation_id", "rubric_id", "judge"]
CONVERSATION_COLS = ["run_id", "scenario_id", "variant_id", "target", "condition", "simulator",
                     "replicate"]  # fmt: skip


def _censoring(endings: pd.DataFrame | None, cids: pd.Series) -> np.ndarray:
    """Each conversation's censoring reason from its ``stop_reason`` (a completed conversation
    that recorded none ran to its last exchange)."""
    if endings is None or endings.empty:
        return np.full(len(cids), ENDINGS["max_turns"], dtype=object)
    e = endings.drop_duplicates("conversation_id").set_index("conversation_id")
    ids = cids.astype(str)
    reason = ids.map(e["stop_reason"]).astype(object) if "stop_reason" in e else None
    known = reason.map(ENDINGS).astype(object) if reason is not None else None
    completed = (
        (ids.map(e["conversation_status"]).astype(object) == "completed").to_numpy()
        if "conversation_status" in e
        else np.zeros(len(ids), bool)
    )
    out = np.where(completed, ENDINGS["max_turns"], STILL_OPEN).astype(object)
    if known is not None:
        has = known.notna().to_numpy()
        out[has] = known.to_numpy()[has]
    return out


def with_endings(
    judgments: pd.DataFrame, store_or_db: StoreRef, runs: Sequence[str] | None = None
) -> pd.DataFrame:
    """``judgments`` with each conversation's ``stop_reason`` from the store."""
    from branchpoint.core.read import conversation_endings

    ends = conversation_endings(store_or_db, runs)[["conversation_id", "stop_reason"]]
    base = judgments.drop(columns=[c for c in ("stop_reason",) if c in judgments.columns])
    return base.merge(ends, on="conversation_id", how="left")


def first_failures(
    judgments: pd.DataFrame, endings: pd.DataFrame | None = None, *, criteria: bool = True
) -> pd.DataFrame:
    """One row per conversation x rubric x judge x outcome (``ANY`` and, with ``criteria``, each
    criterion): ``time`` (exchanges), ``event`` (1: failed at ``time``), ``ending`` (``FAILED``
    or a censoring reason), ``n_exchanges`` (the last exchange judged), with the conversation's
    design columns and ``arm``. ``endings``: ``branchpoint.core.read.conversation_endings`` (or a
    ``stop_reason`` column of ``judgments``, ``with_endings``)."""
    if endings is None:
        cols = [c for c in ("stop_reason", "conversation_status") if c in judgments.columns]
        endings = judgments[["conversation_id", *cols]].drop_duplicates("conversation_id")
        endings = endings.assign(conversation_id=endings["conversation_id"].astype(str))
    # Only the columns used below are carried: a judgment table's other columns (rationales,
    # ids) would be copied by every selection for nothing.
    used = [*KEYS, "criterion_id", "exchange", "verdict", "applicable", *CONVERSATION_COLS,
            *choice_columns(judgments)]  # fmt: skip
    j = judgments.loc[judgments["exchange"].notna().to_numpy(),
                      list(dict.fromkeys(c for c in used if c in judgments.columns))]  # fmt: skip
    # Only rubrics rated pass / partial / fail have a failing verdict (the ED risk levels do not).
    ppf = j["verdict"].isin(["pass", "partial", "fail"])
    # A conversation a judge rated nothing in (every verdict an error, or not applicable) was
    # not observed by that judge: no row, rather than a conversation censored with no failure.
    rated = (j["applicable"].astype(bool) & ppf).to_numpy()
    keys = [j[k].astype(str) for k in KEYS]
    seen = pd.Series(rated, index=j.index).groupby(keys, sort=False, dropna=False).transform("any")
    j = j[seen.to_numpy()]
    if j.empty:
        return pd.DataFrame()
    exchange = pd.to_numeric(j["exchange"]).to_numpy(float)
    v = j["verdict"].astype(object)
    failed = j["applicable"].astype(bool).to_numpy() & (v == "fail").to_numpy()
    work = j[[*KEYS, "criterion_id"]].astype(str)
    work["exchange"] = exchange
    work["fail_at"] = np.where(failed, exchange, np.inf)
    last = work.groupby(KEYS, sort=False)["exchange"].max().rename("n_exchanges")
    outcomes = [work.assign(outcome=ANY)]
    if criteria:
        outcomes.append(work.assign(outcome=work["criterion_id"]))
    both = pd.concat(outcomes, ignore_index=True)
    first = both.groupby([*KEYS, "outcome"], sort=False)["fail_at"].min().reset_index()
    first = first.merge(last.reset_index(), on=KEYS, how="left")
    first["event"] = np.isfinite(first["fail_at"]).astype(np.int64)
    first["time"] = np.where(first["event"] == 1, first["fail_at"], first["n_exchanges"])
    first["ending"] = np.where(first["event"] == 1, FAILED,
                               _censoring(endings, first["conversation_id"]))  # fmt: skip
    design = j[["conversation_id", *[c for c in CONVERSATION_COLS if c in j.columns],
                *choice_columns(j)]].drop_duplicates("conversation_id")  # fmt: skip
    design = design.assign(conversation_id=design["conversation_id"].astype(str))
    design["arm"] = arm_labels(design).to_numpy()
    out = first.drop(columns=["fail_at"]).merge(design, on="conversation_id", how="left")
    front = ["conversation_id", *[c for c in CONVERSATION_COLS if c in out.columns], "arm",
             "rubric_id", "judge", "outcome", "time", "event", "ending", "n_exchanges"]  # fmt: skip
    return out[front + [c for c in out.columns if c not in front]]
