"""The store's record models: the one contract every package reads.

Data flows one way (scenarios -> simulator -> store -> judges -> store -> analysis/tui). Every
table lives in this module so that a schema change is made in one place, with a migration in
``branchpoint/core/migrations.py`` and a bump of ``SCHEMA_VERSION``.

Nothing here may hold an API key: configs are stored after ``redact()``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, Column, Index, Text
from sqlmodel import Field, SQLModel

SCHEMA_VERSION = 11
JUDGMENT_FAILURE_INDEX = "ix_judgments_conversation_verdict"
JUDGMENT_FAILING_INDEX = "ix_judgments_failing"
JUDGMENT_FAILING_COLUMNS = ("verdict", "criterion_id", "judge", "conversation_id")


def utcnow() -> datetime:
    return datetime.now(UTC)


def _json(**kw: Any) -> Any:
    return Field(default_factory=kw.pop("default_factory", dict), sa_column=Column(JSON), **kw)


def _text(default: str | None = None) -> Any:
    return Field(default=default, sa_column=Column(Text))


class SchemaInfo(SQLModel, table=True):
    __tablename__ = "schema_info"
    key: str = Field(primary_key=True)
    value: str


class Run(SQLModel, table=True):
    """One invocation of ``branchpoint run`` or one sweep."""

    __tablename__ = "runs"
    id: str = Field(primary_key=True)
    kind: str = "run"  # run | sweep
    name: str | None = None
    status: str = "running"  # running | completed | interrupted | failed
    config: dict[str, Any] = _json()  # redacted: specs, params, scenario paths, seeds
    branchpoint_version: str = ""
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    owner: str | None = (
        None  # host:pid:token of the process running it now (branchpoint/simulator/lease.py)
    )
    heartbeat_at: datetime | None = None


class Conversation(SQLModel, table=True):
    """One arm: a variant of a scenario against one target, condition and replicate."""

    __tablename__ = "conversations"
    id: str = Field(
        primary_key=True
    )  # deterministic: hash of run, variant, target, condition, replicate
    run_id: str = Field(foreign_key="runs.id", index=True)
    scenario_id: str = Field(index=True)
    scenario_hash: str
    scenario_path: str | None = None
    variant_id: str = Field(index=True)
    # Flat, for tidy tables: branch point id -> option, plus the profile and cue keys that
    # ``branchpoint.core.domain`` names (PROFILE_PREFIX, EXPLICIT_CUE).
    choices: dict[str, Any] = _json()
    target: str  # model spec string, e.g. "litellm:openai/gpt-4o-mini"
    target_params: dict[str, Any] = _json()
    condition: str = "none"  # system-prompt condition name
    simulator: str = ""
    simulator_params: dict[str, Any] = _json()
    replicate: int = 0
    seed: int = 0
    status: str = "pending"  # pending | running | completed | interrupted | failed
    stop_reason: str | None = None  # max_turns | persona_ended | target_error | simulator_error
    error: str | None = _text()
    parent_id: str | None = Field(default=None, index=True)  # conversation whose prefix this shares
    fork_turn: int | None = None  # index of the first turn this arm does not share with its parent
    n_turns: int = 0
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    # Schema 10 (issue 47): None for a designed arm; "replay" for a branch a person forked from a
    # stored conversation (``branchpoint replay``): its run is the original's replay run, its
    # ``parent_id`` the original, ``fork_turn`` the replaced persona turn. ``replay``: that
    # provenance (parent turn id and index, annotator, who wrote the message, exchanges asked).
    origin: str | None = None
    replay: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))
    # Schema 10: the conversation's language (BCP-47, the scenario's or its persona's); None on
    # conversations made before languages, which were all English.
    language: str | None = None


class Turn(SQLModel, table=True):
    """One message of a transcript, committed as soon as it is made."""

    __tablename__ = "turns"
    id: str = Field(primary_key=True)  # f"{conversation_id}:{index}"
    conversation_id: str = Field(foreign_key="conversations.id", index=True)
    index: int  # position in the transcript, from 0
    exchange: int  # 1-based; a persona message and the chatbot reply to it share it
    role: str  # user (the persona) | assistant (the target)
    content: str = _text("")
    reasoning: str | None = _text()
    stage: str | None = None
    branch_state: dict[str, Any] = _json()  # branch point id -> option in force (or None)
    fired: list[str] = _json(default_factory=list)  # branch points that fired for this turn
    events: list[str] = _json(default_factory=list)  # events observed in this (assistant) turn
    model: str = ""
    tokens_in: int = 0
    tokens_out: int = 0
    cost: float | None = None
    latency_s: float = 0.0
    finish_reason: str | None = None
    call_id: str | None = None
    retries: int = 0  # persona role-break retries
    retry_reasons: list[str] = _json(default_factory=list)
    origin_turn_id: str | None = None  # the turn this copies, when shared with a sibling arm
    # who decided ``events``: "rules", "llm", or "llm_fallback: <why the detector failed>"
    event_source: str | None = _text()
    # Schema 10 (issue 47): an adaptive persona's turn: {"tactic", "why"}; None otherwise.
    persona_plan: dict[str, Any] | None = Field(default=None, sa_column=Column(JSON))
    created_at: datetime = Field(default_factory=utcnow)


class ModelCall(SQLModel, table=True):
    """Every call made through the gateway, cached or not, failed or not."""

    __tablename__ = "model_calls"
    id: str = Field(primary_key=True)
    run_id: str | None = Field(default=None, index=True)
    conversation_id: str | None = Field(default=None, index=True)
    purpose: str  # persona | target | detector | judge
    model: str
    params: dict[str, Any] = _json()
    request_hash: str = Field(index=True)
    # The request's messages, whole: calls made before schema 5, and calls whose messages are
    # not the turns of a conversation (judges, the event detector).
    messages: list[dict[str, Any]] = _json(default_factory=list)
    # Schema 5: the messages as what is new, so that a conversation's calls grow with its turns,
    # not their square. A list of parts, in order: {"role", "content"} (a message as is),
    # {"role", "text": HASH} (a message whose content is a PromptText), and {"turns":
    # CONVERSATION_ID, "count": N, "flip": BOOL} (that conversation's turns 0..N-1, roles
    # swapped when flip: the persona's own side). None: ``messages`` holds them.
    # ``branchpoint.core.call_requests.call_messages`` rebuilds the list.
    prompt: list[dict[str, Any]] | None = Field(default=None, sa_column=Column(JSON))
    text: str = _text("")
    reasoning: str | None = _text()
    tokens_in: int = 0
    tokens_out: int = 0
    # Schema 10: the part of ``tokens_in`` a provider's prompt cache served (cache reads) and
    # the part written to it where that is billed apart (Anthropic's cache_creation), as the
    # provider reported them; ``cost`` bills them at their rates. None: a row from before.
    tokens_cached: int | None = None
    tokens_cache_write: int | None = None
    cost: float | None = None
    latency_s: float = 0.0
    finish_reason: str | None = None
    provider_request_id: str | None = None
    cached: bool = False
    attempts: int = 1
    error: str | None = _text()
    created_at: datetime = Field(default_factory=utcnow)


class SpendReservation(SQLModel, table=True):
    """A priced call's upper-bound cost, committed before the call is sent (a write-ahead intent).

    Written by the gateway only where a budget applies, one per attempt; a successful attempt's
    is deleted in the transaction that stores the call's row (``ModelCall.cost`` then holds what
    it cost), an error answer's (not billed) at once. One still here belongs to an attempt in
    flight, or to one that may have been billed with no answer stored (a timeout, a cut
    connection, a process that died after sending it), so a budget rebuilt from the store counts
    it at ``upper_usd`` for good (``branchpoint.gateway.budget.spend_of_run``). Schema 7."""

    __tablename__ = "spend_reservations"
    id: str = Field(primary_key=True)  # the call id and the attempt: CALL_ID:N
    call_id: str = Field(index=True)
    run_id: str = Field(index=True)
    target: str  # the budget scope it counts against (the conversation's target)
    upper_usd: float
    created_at: datetime = Field(default_factory=utcnow)


class PromptText(SQLModel, table=True):
    """A prompt's text stored once, by its hash: system prompts, persona templates, event rules.

    Conversations and model calls refer to these hashes, so a long system prompt costs its bytes
    once per store, not once per call. A new table needs no migration: opening an older store
    creates it."""

    __tablename__ = "prompt_texts"
    hash: str = Field(primary_key=True)  # sha256 hex of the UTF-8 text
    kind: str  # system_prompt | persona_template | event_rules | ...
    text: str = _text("")
    created_at: datetime = Field(default_factory=utcnow)


class ConversationProvenance(SQLModel, table=True):
    """What produced a conversation besides its scenario and models: the texts by their hash
    (``PromptText``) and the run's resolved config.

    A table of its own, written when the run starts (before any turn), so that the engine's write
    path stays as it is and an older store needs no migration (``create_all`` makes it)."""

    __tablename__ = "conversation_provenance"
    conversation_id: str = Field(primary_key=True)
    run_id: str = Field(index=True)
    system_prompt_hash: str | None = None  # None: the condition adds no system message
    persona_template_hash: str
    event_rules_hash: str  # the rules the event detector falls back on (or uses alone)
    detector: str  # "rules", or the LLM detector's model spec
    detector_params: dict[str, Any] = _json()
    config_hash: str  # the run's resolved config (``Run.config["config_hash"]``)
    created_at: datetime = Field(default_factory=utcnow)


class CacheEntry(SQLModel, table=True):
    """Completion cache entries of stores written by earlier versions (key = hash(model, messages,
    params, seed)).

    They are still read; new entries are the calls' own rows (``ModelCall.request_hash``)."""

    __tablename__ = "cache"
    key: str = Field(primary_key=True)
    model: str
    completion: dict[str, Any] = _json()
    created_at: datetime = Field(default_factory=utcnow)


class Judgment(SQLModel, table=True):
    """One criterion rated on one chatbot turn (or a whole conversation) by one judge."""

    __tablename__ = "judgments"
    # Schema 4: counting one conversation's failures reads the first index alone, not every
    # judgment row. Schema 6: the TUI's sort by failures and its filter on a failing criterion
    # read the failing verdicts as one range of the second (on a 900 MB store with a cold page
    # cache, 2.1 s and 6.9 s through the first, 0.3 s and 0.4 s through this one).
    __table_args__ = (
        Index(JUDGMENT_FAILURE_INDEX, "conversation_id", "verdict"),
        Index(JUDGMENT_FAILING_INDEX, *JUDGMENT_FAILING_COLUMNS),
    )
    id: str = Field(primary_key=True)
    run_id: str = Field(index=True)
    conversation_id: str = Field(foreign_key="conversations.id", index=True)
    turn_id: str | None = Field(default=None, index=True)  # None: the whole conversation
    turn_index: int | None = None
    rubric_id: str
    rubric_hash: str
    criterion_id: str = Field(index=True)
    risk_area: str | None = None  # copied from the rubric so analysis needs no rubric file
    judge: str  # judge spec, "heuristic", or "panel(...)"
    prompt_version: str = ""
    applicable: bool = True
    verdict: str | None = None  # a scale level, or "error"; None when not applicable
    score: float | None = None
    rationale: str = _text("")
    evidence: list[dict[str, Any]] = _json(default_factory=list)  # [{quote, verified}]
    members: list[dict[str, Any]] = _json(default_factory=list)  # panels: each member's verdict
    raw_output: str | None = _text()
    error: str | None = _text()
    call_id: str | None = None
    created_at: datetime = Field(default_factory=utcnow)


class HumanLabel(SQLModel, table=True):
    """A person's verdict on the same key as a judgment; the only thing the TUI writes."""

    __tablename__ = "human_labels"
    id: str = Field(primary_key=True)
    conversation_id: str = Field(foreign_key="conversations.id", index=True)
    turn_id: str | None = None
    turn_index: int | None = None
    rubric_id: str
    criterion_id: str
    annotator: str
    verdict: str | None = None  # None: not applicable
    note: str = _text("")
    created_at: datetime = Field(default_factory=utcnow)
    # Schema 3: what agreement studies report next to the verdict. None on labels that predate it
    # or were imported without it.
    time_spent_s: float | None = None
    blind: bool | None = None  # the judge's verdict, the target and the arm were hidden
    confidence: str | None = None  # low | medium | high
    # Schema 7: the labelling design (``LabelDesign``) whose drawn item this label answers, set
    # only when it was made from that design's queue. None: outside any design (hand-picked,
    # imported without one, or made before designs were stored); kept, never used by the
    # judge-corrected estimators.
    design_id: str | None = None


class LabelDesign(SQLModel, table=True):
    """A labelling queue as drawn: its settings, its strata and their sizes, so that the items'
    inclusion probabilities are known and a reopened queue is a lookup, not a new draw.

    Items are drawn at random without replacement within each stratum (target x condition, x
    criterion when asked; the simulator for realism). A new table: ``create_all`` makes it."""

    __tablename__ = "label_designs"
    id: str = Field(
        primary_key=True
    )  # hash of kind and settings (branchpoint.core.human_labels.design_id)
    kind: str  # criterion | realism
    settings: dict[str, Any] = _json()  # run_id, judge, rubric_id, by_criterion, n, seed
    # stratum key -> {"population": N_h, "drawn": n_h}; inclusion probability n_h / N_h. N_h is
    # None until counted (one pass over the judgments, not while a labeller waits)
    strata: dict[str, Any] = _json()
    created_at: datetime = Field(default_factory=utcnow)  # when the draw began


class LabelDesignItem(SQLModel, table=True):
    """One drawn item of a ``LabelDesign``, in queue order, with its stratum and inclusion
    probability."""

    __tablename__ = "label_design_items"
    __table_args__ = (Index("ix_label_design_items_key", "conversation_id", "turn_index"),)
    design_id: str = Field(primary_key=True)
    position: int = Field(primary_key=True)
    conversation_id: str
    turn_index: int | None = None
    rubric_id: str
    criterion_id: str
    stratum: str
    # drawn / stratum size; None until the strata are counted (branchpoint.core.human_labels.design_population)
    inclusion_probability: float | None = None


class ConversationAttempt(SQLModel, table=True):
    """How an earlier attempt at a conversation ended, kept when ``--retry-failed`` reruns it.

    The conversation row is set back to ``interrupted`` so the engine continues it from its last
    stored turn; this row keeps what it said before (status, stop reason, error) so that the
    failure stays on record and analysis can leave retried conversations out. A new table needs
    no migration: opening an older store creates it."""

    __tablename__ = "conversation_attempts"
    conversation_id: str = Field(primary_key=True)
    attempt: int = Field(primary_key=True)  # 1-based: the attempt that ended as recorded here
    run_id: str = Field(index=True)
    previous_status: str  # failed
    stop_reason: str | None = None
    error: str | None = _text()
    turns_kept: int = 0  # the stored turns the retry continues from
    created_at: datetime = Field(default_factory=utcnow)


class TreeLease(SQLModel, table=True):
    """A conversation tree of a sweep run by Ray workers: which worker holds it, and since when.

    Workers claim a pending tree (or one whose holder stopped heartbeating) with ``SELECT ... FOR
    UPDATE SKIP LOCKED`` (``branchpoint/simulator/tree_lease.py``); the tree's turns live in ``turns`` as
    always, so a tree taken over resumes from its last stored turn. A new table: ``create_all``
    makes it, no migration."""

    __tablename__ = "tree_leases"
    run_id: str = Field(primary_key=True)
    tree_id: str = Field(primary_key=True)  # branchpoint.simulator.tree_lease.tree_id(spec)
    owner: str | None = None  # host:pid:token of the worker holding it now
    heartbeat_at: datetime | None = None
    status: str = "pending"  # pending | running | done | failed
    attempts: int = 0  # claims so far; above 1, a worker took it over (or it was re-run)
    error: str | None = _text()
    updated_at: datetime = Field(default_factory=utcnow)


class JudgeBatch(SQLModel, table=True):
    """One submission of judge calls to a provider's batch API (``branchpoint judge --batch``).

    Written before the batch is created (``submitting``, with the token sent as the batch's
    metadata) and again as soon as the provider names it (``submitted``, with ``batch_id``), so
    that a judge killed while the batch is pending polls the same batch when run again instead
    of paying for a second one. ``done`` once every result is stored. A new table: ``create_all``
    makes it, no migration."""

    __tablename__ = "judge_batches"
    id: str = Field(primary_key=True)  # the submission token (hex), also in the batch's metadata
    batch_id: str | None = Field(default=None, index=True)  # the provider's, once it answered
    judge: str = Field(index=True)  # the judge's name (its model spec)
    prompt_version: str
    rubric_hash: str
    api_base: str  # redacted: where the batch lives
    status: str = "submitting"  # submitting | submitted | done | abandoned
    # custom_id -> [conversation_id, turn_id or None] of the unit each request judges
    requests: dict[str, Any] = _json()
    error: str | None = _text()
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
