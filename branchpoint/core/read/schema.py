"""The Core tables of the store's records, for queries that select columns rather than records.

SQLModel does not declare ``__table__`` to type checkers; the mapper's table is the same object,
typed. Queries written against these columns are the schema in ``branchpoint.core.records``, never restated.
"""

from __future__ import annotations

from sqlalchemy import Integer, Table, inspect, literal_column
from sqlmodel import SQLModel

from branchpoint.core.records import (
    Conversation,
    ConversationAttempt,
    HumanLabel,
    Judgment,
    LabelDesign,
    LabelDesignItem,
    ModelCall,
    Run,
    SpendReservation,
    Turn,
)


def table_of(model: type[SQLModel]) -> Table:
    table = inspect(model).local_table
    if not isinstance(table, Table):  # a record mapped to a join or a select: none is today
        raise TypeError(f"{model.__name__} is not mapped to one table")
    return table


RUNS = table_of(Run)
CONVERSATIONS = table_of(Conversation)
TURNS = table_of(Turn)
JUDGMENTS = table_of(Judgment)
HUMAN_LABELS = table_of(HumanLabel)
MODEL_CALLS = table_of(ModelCall)
CONVERSATION_ATTEMPTS = table_of(ConversationAttempt)
LABEL_DESIGNS = table_of(LabelDesign)
LABEL_DESIGN_ITEMS = table_of(LabelDesignItem)
SPEND_RESERVATIONS = table_of(SpendReservation)

# SQLite's implicit rowid: the order the judgments were written in. No record declares it (other
# databases have none), so only SQLite reads use it: the fast path and ordered exports.
JUDGMENT_ROWID = literal_column(f"{JUDGMENTS.name}.rowid", Integer)
