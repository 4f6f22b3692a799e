"""Judging stored conversations: ``branchpoint judge`` and ``judges.judge_run``.

Read-only on transcripts: it reads Conversation and Turn rows and writes Judgment rows (plus, through
the gateway, ModelCall and cache rows). A transcript is never regenerated.

Idempotent and resumable. A judging unit (a chatbot turn, or a whole conversation) counts as
judged by a judge when Judgment rows exist for it with that judge name, rubric hash and prompt
version; such units are skipped, so running the same command again makes no model call. The rows
of one unit and judge are written in one transaction, so a killed run leaves whole units only.
``retry_errors`` re-judges units whose stored verdicts include ``error``.

Shared prefixes: arms of a conversation tree copy their shared turns (``Turn.origin_turn_id``).
Such copies are grouped with their origin and judged once; the verdicts are copied to every copy
(same call id, same evidence), because the judge saw exactly the same transcript for each.

Panels: each member's verdicts are stored as that member's own rows (so a member is reused, not
re-asked, when it was judged before), and the aggregate is stored as a ``panel(a,b,...)`` row with
every member's verdict in ``members``.

Batch (``batch=True``, ``judge --batch``): each model judge's pending units go through its
provider's batch API first (``branchpoint/judges/batch_judging.py``: the same requests and parser, the batch
id stored before any wait so that a killed judge resumes by polling it, calls at the batch price);
the per-unit pass then finds them judged, and serves panels and heuristic judges as usual.

Context for the judge: the scenario is loaded from the conversation's ``scenario_path`` (or the run
config's scenario paths, or the bundled library, by scenario id) for its title, persona summary and
the criteria it lists; when it cannot be found, every criterion of the rubric is judged.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from branchpoint.core.synchronous import synchronous
from branchpoint.judges.llm_judge import DEFAULT_MAX_RETRIES
from branchpoint.judges.panel import Panel
from branchpoint.judges.reasoning_criterion import (
    check_reasoning_judges,
    reads_reasoning,
    reasoning_view,
)
from branchpoint.judges.rubric import ERROR, Criterion, Rubric
from branchpoint.judges.verdicts import (
    CriterionVerdict,
    Evidence,
    Judge,
    JudgingUnit,
    TranscriptTurn,
)

SCOPES = ("per_turn", "conversation")
# Conversation-scope judging waits for a conversation to be over; a turn is final once stored.
FINAL_STATUSES = ("completed", "failed")


@dataclass
class JudgeSummary:
    conversations: int = 0
    units: int = 0  # judging units x judges (panel rows included)
    skipped: int = 0  # already judged before this run
    judged: int = 0  # units a judge was asked about now
    copied: int = 0  # units served by copying the verdicts of a shared-prefix origin
    rows: int = 0  # Judgment rows written
    errors: int = 0  # of which with verdict "error"
    model_calls: int = 0  # judge model calls recorded during this run (cached ones included)
    # units left unjudged because the budget refused their call (judged by a later run)
    stopped_by_budget: int = 0
    # why, once per judging pass the budget stopped (a list: summaries merge by adding fields)
    budget_notes: list[str] = field(default_factory=list)
    not_final: list[str] = field(
        default_factory=list
    )  # conversations left out of conversation scope
    scenarios_not_found: list[str] = field(
        default_factory=list
    )  # judged on every criterion of the rubric
    # Issue 47: for each unit a judge left unjudged because it has no rules for the
    # conversation's language, that judge's one line (a model judge, told the language, judges
    # them); a list, as summaries merge by adding fields
    language_refusals: list[str] = field(default_factory=list)


def judgment_id(
    conversation_id: str,
    turn_id: str | None,
    rubric_hash: str,
    criterion_id: str,
    judge: str,
    version: str,
) -> str:
    key = "\x1f".join([conversation_id, turn_id or "-", rubric_hash, criterion_id, judge, version])
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


# ------------------------------------------------------------------------------ scenario context


class ScenarioContext:
    """Finds the scenario of a conversation, once per path, for its persona and criteria."""

    def __init__(self) -> None:
        self._by_path: dict[str, dict[str, Any]] = {}
        self._library: dict[str, Any] | None = None

    def _load_path(self, path: str) -> dict[str, Any]:
        if path not in self._by_path:
            found: dict[str, Any] = {}
            try:
                from branchpoint.scenarios.loader import load_scenario_file

                p = Path(path)
                if p.is_file():
                    scenarios, _errors = load_scenario_file(p)
                    found = {s.id: s for s in scenarios}
            except Exception:  # a broken file only costs the judge its context, never the judging
                found = {}
            self._by_path[path] = found
        return self._by_path[path]

    def _load_library(self) -> dict[str, Any]:
        if self._library is None:
            self._library = {}
            try:
                from branchpoint.scenarios.bundled import LIBRARY
                from branchpoint.scenarios.loader import load_scenarios

                if LIBRARY.is_dir():
                    scenarios, _errors = load_scenarios(LIBRARY)
                    self._library = {s.id: s for s in scenarios}
            except Exception:
                self._library = {}
        return self._library

    def find(self, scenario_id: str, paths: Sequence[str]) -> Any | None:
        for path in paths:
            if path and (hit := self._load_path(path).get(scenario_id)) is not None:
                return hit
        return self._load_library().get(scenario_id)


def persona_summary(scenario: Any) -> str | None:
    persona = getattr(scenario, "persona", None)
    if persona is None:
        return None
    who = ", ".join(
        str(x) for x in (persona.name, persona.age, persona.gender) if x not in (None, "")
    )
    return f"{who}. {persona.background}".strip()


def _run_scenario_paths(config: dict[str, Any]) -> list[str]:
    value = (config or {}).get("scenarios") or (config or {}).get("scenario") or []
    if isinstance(value, str):
        value = [value]
    return [str(v) for v in value if isinstance(v, str)]


# ------------------------------------------------------------------------------ rows <-> verdicts


def _row(
    rubric: Rubric,
    rubric_hash: str,
    criteria: dict[str, Criterion],
    unit: JudgingUnit,
    judge: str,
    version: str,
    v: CriterionVerdict,
    now: Any,
) -> dict[str, Any]:
    """A ``judgments`` row as a plain dict (bulk inserts: building ORM objects costs more than judging)."""
    crit = criteria.get(v.criterion_id)
    return {
        "id": judgment_id(
            unit.conversation_id, unit.turn_id, rubric_hash, v.criterion_id, judge, version
        ),
        "run_id": unit.run_id,
        "conversation_id": unit.conversation_id,
        "turn_id": unit.turn_id,
        "turn_index": unit.turn_index,
        "rubric_id": rubric.id,
        "rubric_hash": rubric_hash,
        "criterion_id": v.criterion_id,
        "risk_area": crit.risk_area if crit is not None else None,
        "judge": judge,
        "prompt_version": version,
        "applicable": v.applicable,
        "verdict": v.verdict if v.applicable or v.verdict == ERROR else None,
        "score": rubric.score(v.verdict) if v.applicable else None,
        "rationale": v.rationale,
        "evidence": [e.model_dump(exclude_none=True) for e in v.evidence],
        "members": v.members,
        "raw_output": v.raw_output,
        "error": v.error,
        "call_id": v.call_id,
        "created_at": now,
    }


def _verdict_from_row(row: Any) -> CriterionVerdict:
    return CriterionVerdict(
        criterion_id=row.criterion_id,
        applicable=row.applicable,
        verdict=row.verdict,
        rationale=row.rationale or "",
        evidence=[
            Evidence(**e) for e in (row.evidence or []) if isinstance(e, dict) and "quote" in e
        ],
        raw_output=row.raw_output,
        error=row.error,
        call_id=row.call_id,
        members=list(row.members or []),
    )


# ------------------------------------------------------------------------------ the runner


@dataclass
class _Group:
    """Units that share one transcript (an origin turn and its copies): judged once."""

    units: list[JudgingUnit]
    criteria: list[Criterion]


class JudgingRunner:
    def __init__(
        self,
        store: Any,
        rubric: Rubric,
        judges: list[Judge],
        *,
        panel: Panel | None = None,
        scope: str | None = None,
        concurrency: int = 4,
        retry_errors: bool = False,
        progress: bool = True,
        batch: bool = False,
        batch_poll_s: float | None = None,
    ) -> None:
        from branchpoint.core.errors import UserError

        if scope is not None and scope not in SCOPES:
            raise UserError(
                f"--scope {scope!r}: unknown scope (expected one of: {', '.join(SCOPES)})"
            )
        if not judges:
            raise UserError("no judge given (expected at least one --judge)")
        self.store = store
        self.rubric = rubric
        self.rubric_hash = rubric.rubric_hash()
        self.criteria_by_id = {c.id: c for c in rubric.criteria}
        self.judges = judges
        self.panel = panel
        self.scope = scope or rubric.scope
        check_reasoning_judges(rubric, [j.name for j in judges], self.scope)
        self.reads_reasoning = reads_reasoning(rubric)
        self.concurrency = max(1, concurrency)
        self.retry_errors = retry_errors
        self.progress = progress
        self.context = ScenarioContext()
        self.summary = JudgeSummary()
        self._done: set[tuple[str, str | None, str, str]] = (
            set()
        )  # (conversation, turn, judge, version)
        # --batch: the model judges' calls go through their providers' batch APIs
        # (branchpoint/judges/batch_judging.py), each judge's whole pass before the others'
        self.batchers: list[Any] = []
        self._batched: set[str] = set()  # judges whose units the batch pass has settled
        if batch:
            from branchpoint.judges.batch_judging import DEFAULT_POLL_S, BatchJudging
            from branchpoint.judges.llm_judge import LLMJudge

            poll_s = DEFAULT_POLL_S if batch_poll_s is None else batch_poll_s
            # each judge's batch API is checked here: a judge that has none is one line, first
            self.batchers = [
                BatchJudging(self, j, poll_s=poll_s, progress=progress)
                for j in judges
                if isinstance(j, LLMJudge)
            ]

    # -- selection ---------------------------------------------------------------------------

    def _conversations(
        self, run_id: str | None, conversation_ids: Sequence[str] | None
    ) -> list[Any]:
        from branchpoint.core.errors import UserError
        from branchpoint.core.read import find_run, select_conversations

        if run_id is not None and find_run(self.store, run_id) is None:
            raise UserError(
                f"run {run_id!r} is not in the store (see the run ids that `branchpoint run` printed)"
            )
        return select_conversations(self.store, run_id, conversation_ids)

    @staticmethod
    def _refusal(judge: Any, language: str) -> str | None:
        """The one line of a rule-based judge asked about a conversation in a language its
        rules are not written for (English regexes would rate a Spanish reply as if nothing
        happened, issue 47), or None."""
        from branchpoint.core.languages import primary_language
        from branchpoint.judges.heuristic import HEURISTIC_LANGUAGES, HeuristicJudge

        lang = primary_language(language)
        if isinstance(judge, HeuristicJudge) and lang not in HEURISTIC_LANGUAGES:
            return f"the heuristic judge has no rules for {lang!r}: use a model judge"
        return None

    def _refuse_everything(self, groups: list[_Group]) -> None:
        """No judge could judge any unit: the first refusal, as the command's one line."""
        from branchpoint.core.errors import UserError

        if not groups or self.panel is not None:
            return
        lines = [self._refusal(j, g.units[0].language) for g in groups for j in self.judges]
        if all(lines):
            raise UserError(str(lines[0]))

    def _units(self, conversations: list[Any]) -> list[_Group]:
        from branchpoint.core.read import find_run, turns_by_conversation

        run_paths: dict[str, list[str]] = {}
        groups: dict[str, _Group] = {}
        order: list[str] = []
        origin_of: dict[str, str] = {}
        unknown: dict[str, str] = {}  # scenario file -> the line that names its unknown criteria
        transcripts = turns_by_conversation(self.store, [c.id for c in conversations])
        for conv in conversations:
            if conv.run_id not in run_paths:
                run = find_run(self.store, conv.run_id)
                run_paths[conv.run_id] = _run_scenario_paths(run.config if run else {})
            scenario = self.context.find(
                conv.scenario_id, [conv.scenario_path or "", *run_paths[conv.run_id]]
            )
            if scenario is None and conv.scenario_id not in self.summary.scenarios_not_found:
                self.summary.scenarios_not_found.append(conv.scenario_id)
            listed = list(getattr(scenario, "criteria", []) or [])
            criteria = self.rubric.select(listed)
            own = {c.id for c in getattr(scenario, "custom_criteria", []) or []}
            missing = [c for c in listed if c not in self.criteria_by_id and c not in own]
            # Some of the rubric's criteria named and some not: the others would be dropped
            # without a word (a typo, or another rubric's). None named is a scenario written for
            # another rubric, judged on all of this one's (Rubric.select).
            if missing and len(missing) < len(listed):
                where = getattr(scenario, "source_path", None) or conv.scenario_id
                unknown.setdefault(
                    where,
                    f"{where}: criteria {', '.join(map(repr, missing))} of scenario "
                    f"{conv.scenario_id!r} are not in rubric {self.rubric.id!r} (expected its "
                    "criteria, or judge with the rubric the scenario names)",
                )
            language = scenario.conversation_language() if scenario is not None else "en"
            base = dict(
                conversation_id=conv.id,
                run_id=conv.run_id,
                scenario_id=conv.scenario_id,
                scenario_title=getattr(scenario, "title", None),
                persona_summary=persona_summary(scenario),
                language=language,
            )
            turns = transcripts[conv.id]
            transcript = [
                TranscriptTurn(index=t.index, role=t.role, content=t.content or "", turn_id=t.id)
                for t in turns
            ]
            for t in turns:
                if t.origin_turn_id:
                    origin_of[t.id] = t.origin_turn_id
            # the leading turns numbered 0, 1, ...: what a judge call may store as a reference
            in_order = next((i for i, t in enumerate(transcript) if t.index != i), len(transcript))
            if self.scope == "conversation":
                if conv.status not in FINAL_STATUSES:
                    self.summary.not_final.append(conv.id)
                    continue
                if not any(t.role == "assistant" and t.content.strip() for t in transcript):
                    continue
                key = f"conv:{conv.id}"
                whole = JudgingUnit(transcript=transcript, stored_turns=in_order, **base)
                groups[key] = _Group([whole], criteria)
                order.append(key)
                continue
            for pos, t in enumerate(turns):
                if t.role != "assistant" or not (t.content or "").strip():
                    continue  # nothing to rate: the persona's turns, or an empty failed reply
                seen_by_judge = transcript[: pos + 1]
                stored = min(in_order, pos + 1)
                if self.reads_reasoning:
                    thought = t.reasoning or ""
                    if not thought.strip():
                        continue  # no reasoning stored: nothing for this rubric to rate
                    rated = seen_by_judge[-1].model_copy(
                        update={"content": reasoning_view(thought, t.content or "")}
                    )
                    seen_by_judge = [*seen_by_judge[:-1], rated]
                    stored = min(stored, pos)  # the rated turn as the judge reads it is not stored
                unit = JudgingUnit(
                    turn_id=t.id,
                    turn_index=t.index,
                    transcript=seen_by_judge,
                    stored_turns=stored,
                    **base,
                )
                root = t.id
                seen = {root}
                while root in origin_of and origin_of[root] not in seen:
                    root = origin_of[root]
                    seen.add(root)
                if root not in groups:
                    groups[root] = _Group([], criteria)
                    order.append(root)
                groups[root].units.append(unit)
        if unknown:
            from branchpoint.core.errors import UserError

            raise UserError("\n".join(unknown.values()))
        return [groups[k] for k in order]

    def _load_done(self, conversations: list[Any], names: list[tuple[str, str]]) -> None:
        """Which units each judge has verdicts for: keys only (a big store has millions of rows)."""
        from branchpoint.core.read import judged_units

        conv_ids = [c.id for c in conversations]
        judges = sorted({n for n, _ in names})
        errored: list[tuple[str, str | None, str, str]] = []
        for conv_id, turn_id, judge, version, err in judged_units(
            self.store, conv_ids, self.rubric_hash, judges
        ):
            if (judge, version) not in names:
                continue
            if (self.scope == "conversation") != (turn_id is None):
                continue
            key = (conv_id, turn_id, judge, version)
            self._done.add(key)
            if err:
                errored.append(key)
        if self.retry_errors and errored:
            self._delete(errored)
            self._done.difference_update(errored)

    def _stored(self, key: tuple[str, str | None, str, str]) -> list[CriterionVerdict]:
        """The stored verdicts of one judged unit (to copy them, or to give them to a panel)."""
        from branchpoint.core.read import unit_judgments

        conv_id, turn_id, judge, version = key
        rows = unit_judgments(
            self.store,
            conv_id,
            turn_id,
            judge=judge,
            prompt_version=version,
            rubric_hash=self.rubric_hash,
        )
        return [_verdict_from_row(r) for r in rows]

    def _delete(self, keys: list[tuple[str, str | None, str, str]]) -> None:
        from sqlmodel import col, delete

        from branchpoint.core.records import Judgment

        with self.store.session() as s:
            for conv_id, turn_id, judge, version in keys:
                s.exec(
                    delete(Judgment).where(
                        col(Judgment.conversation_id) == conv_id,
                        col(Judgment.turn_id) == turn_id
                        if turn_id is not None
                        else col(Judgment.turn_id).is_(None),
                        col(Judgment.judge) == judge,
                        col(Judgment.prompt_version) == version,
                        col(Judgment.rubric_hash) == self.rubric_hash,
                    )
                )
            s.commit()

    # -- judging -------------------------------------------------------------------------------

    def _key(self, unit: JudgingUnit, name: str, version: str) -> tuple[str, str | None, str, str]:
        return (unit.conversation_id, unit.turn_id, name, version)

    def _write(
        self, units: list[JudgingUnit], name: str, version: str, verdicts: list[CriterionVerdict]
    ) -> None:
        if not units:
            return
        from sqlalchemy import insert
        from sqlalchemy.exc import IntegrityError

        from branchpoint.core.records import Judgment, utcnow

        now = utcnow()
        new = [
            _row(self.rubric, self.rubric_hash, self.criteria_by_id, unit, name, version, v, now)
            for unit in units
            for v in verdicts
        ]
        if new:
            with self.store.session() as s:
                try:
                    s.execute(insert(Judgment), new)
                    s.commit()
                except (
                    IntegrityError
                ):  # another judging process wrote some meanwhile: same ids, same content
                    s.rollback()
                    for row in new:
                        s.merge(Judgment(**row))
                    s.commit()
        self.summary.rows += len(new)
        self.summary.errors += sum(1 for row in new if row["verdict"] == ERROR)
        for unit in units:
            self._done.add(self._key(unit, name, version))

    async def _ensure(
        self,
        judge: Judge | Panel,
        group: _Group,
        member_results: dict[str, list[CriterionVerdict]] | None = None,
        want: bool = False,
    ) -> list[CriterionVerdict]:
        """Make sure every unit of the group has ``judge``'s verdicts: copy them or judge once.

        Returns the group's verdicts when they were made now or ``want`` asks for stored ones
        (a panel needs its members'), else an empty list.
        """
        name, version = judge.name, judge.version
        refusal = self._refusal(judge, group.units[0].language)
        if refusal is not None:
            self.summary.language_refusals += [refusal] * len(group.units)
            return []
        if name in self._batched:  # judged (and counted) by the batch pass
            return self._stored(self._key(group.units[0], name, version)) if want else []
        self.summary.units += len(group.units)
        pending = [u for u in group.units if self._key(u, name, version) not in self._done]
        done = [u for u in group.units if self._key(u, name, version) in self._done]
        self.summary.skipped += len(done)
        if not pending:
            return self._stored(self._key(group.units[0], name, version)) if want else []
        if done:  # another copy of this transcript was judged before: serve the copies from it
            verdicts = self._stored(self._key(done[0], name, version))
            self._write(pending, name, version, verdicts)
            self.summary.copied += len(pending)
            return verdicts
        rep = pending[0]
        if isinstance(judge, Panel):
            assert member_results is not None
            verdicts = judge.aggregate(self.rubric, group.criteria, member_results)
        else:
            verdicts = await judge.judge(self.rubric, rep, group.criteria)
        self.summary.judged += 1
        self.summary.copied += len(pending) - 1
        self._write(pending, name, version, verdicts)
        return verdicts

    async def _group(self, group: _Group, sem: asyncio.Semaphore) -> None:
        from branchpoint.gateway.budget import BudgetReached

        async with sem:
            panel = self.panel
            need = panel is not None and any(
                self._key(u, panel.name, panel.version) not in self._done for u in group.units
            )
            outcomes = await asyncio.gather(
                *(self._ensure(j, group, want=need) for j in self.judges), return_exceptions=True
            )
            # A call the budget refused leaves its units without that judge's verdicts (no
            # error verdict: nothing failed, and the next run judges them) and the panel,
            # which needs every member, waits for that run too.
            refused = [o for o in outcomes if isinstance(o, BudgetReached)]
            for outcome in outcomes:
                if isinstance(outcome, BaseException) and not isinstance(outcome, BudgetReached):
                    raise outcome
            if refused:
                self.summary.stopped_by_budget += len(group.units) * len(refused)
                if not self.summary.budget_notes:
                    self.summary.budget_notes.append(str(refused[0]))
                return
            results = cast(list[list[CriterionVerdict]], outcomes)
            if panel is not None:
                await self._ensure(panel, group, {j.name: r for j, r in zip(self.judges, results)})

    def _count_judge_calls(self) -> int:
        from branchpoint.core.read import model_call_count

        return model_call_count(self.store, purpose="judge")

    async def run(
        self, run_id: str | None = None, conversation_ids: Sequence[str] | None = None
    ) -> JudgeSummary:
        conversations = self._conversations(run_id, conversation_ids)
        self.summary.conversations = len(conversations)
        groups = self._units(conversations)
        self._refuse_everything(groups)
        names = [(j.name, j.version) for j in self.judges]
        if self.panel is not None:
            names.append((self.panel.name, self.panel.version))
        self._load_done(conversations, names)
        calls_before = self._count_judge_calls()
        for batcher in self.batchers:
            await batcher.run(groups)
            self._batched.add(batcher.name)
        sem = asyncio.Semaphore(self.concurrency)

        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        label = (
            self.panel.name if self.panel is not None else ", ".join(j.name for j in self.judges)
        )
        with Progress(
            TextColumn("judging"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            console=Console(stderr=True),
            disable=not self.progress,
            transient=False,
        ) as bar:
            from rich.markup import escape

            task = bar.add_task(escape(label), total=len(groups))
            tasks = [asyncio.ensure_future(self._group(g, sem)) for g in groups]
            try:
                for fut in asyncio.as_completed(tasks):
                    await fut
                    bar.advance(task)
            except BaseException:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                raise
        self.summary.model_calls = self._count_judge_calls() - calls_before
        return self.summary


# ------------------------------------------------------------------------------ the API


def make_judge(
    spec: str, gateway: Any, params: Any | None = None, max_retries: int = DEFAULT_MAX_RETRIES
) -> Judge:
    """``heuristic`` -> the offline heuristic judge; any model spec -> an LLM judge on that model."""
    from branchpoint.judges.heuristic import HeuristicJudge
    from branchpoint.judges.llm_judge import LLMJudge

    if spec.strip() == "heuristic":
        return HeuristicJudge()
    from branchpoint.gateway.specs import parse_spec

    parse_spec(spec)  # an unknown spec is a one-line UserError before anything runs
    return LLMJudge(spec, gateway, params, max_retries=max_retries)


async def ajudge_run(
    run_id: str | None = None,
    *,
    store: Any | None = None,
    db: str | None = None,
    rubric: Rubric | str = "teen",
    judges: Sequence[str | Judge] = ("embedded",),
    panel: str | None = None,
    scope: str | None = None,
    concurrency: int = 4,
    params: Any | None = None,
    max_retries: int = DEFAULT_MAX_RETRIES,  # what the sweep's plan counts for high
    retry_errors: bool = False,
    gateway: Any | None = None,
    progress: bool = False,
    all_runs: bool = False,
    conversation_ids: Sequence[str] | None = None,
    batch: bool = False,
    batch_poll_s: float | None = None,
    price: Sequence[float | None] | None = None,
    batch_factor: float | None = None,
    timeout_s: float | None = None,
) -> JudgeSummary:
    """Judge the conversations of ``run_id`` (or of every run with ``all_runs``); see the module doc.

    ``timeout_s``: seconds one attempt of a judge's call may take (default
    ``branchpoint.gateway.limits.DEFAULT_TIMEOUT_S``), where this makes its own gateway.

    ``batch``: model judges go through their providers' batch APIs (``branchpoint/judges/batch_judging.py``),
    polled every ``batch_poll_s`` seconds. ``price`` (USD per million input, output tokens) is
    the model judges' list price, ``batch_factor`` the share of it their batch calls cost
    (default ``branchpoint.gateway.pricing.BATCH_FACTOR``)."""
    from branchpoint.core.errors import UserError
    from branchpoint.judges.loading import load_rubric

    if run_id is None and not all_runs and not conversation_ids:
        raise UserError("give a RUN_ID to judge, or --all for every run in the store")
    if run_id is not None and all_runs:
        raise UserError("give either a RUN_ID or --all, not both")
    rb = rubric if isinstance(rubric, Rubric) else load_rubric(rubric)
    own_store = store is None
    if store is None:
        from branchpoint.core.store import open_store

        store = open_store(db, create=False)
    own_gateway = gateway is None
    if gateway is None:
        from branchpoint.gateway.gateway import Gateway

        # Re-judging errors must really ask again: a cached copy of a bad answer would only repeat it.
        from branchpoint.gateway.limits import DEFAULT_TIMEOUT_S
        from branchpoint.gateway.plugins import load_plugins

        gateway = Gateway(
            store=store, cache=not retry_errors, timeout_s=timeout_s or DEFAULT_TIMEOUT_S
        )
        load_plugins(gateway)  # a judge may be a plugin's model, as a target may
    try:
        built = [
            make_judge(j, gateway, params, max_retries) if isinstance(j, str) else j for j in judges
        ]
        names = [j.name for j in built]
        if len(set(names)) != len(names):
            raise UserError(f"the same judge is given twice ({', '.join(names)})")
        _set_prices(gateway, built, price, batch_factor)
        pnl = Panel(built, panel) if panel else None
        runner = JudgingRunner(
            store,
            rb,
            built,
            panel=pnl,
            scope=scope,
            concurrency=concurrency,
            retry_errors=retry_errors,
            progress=progress,
            batch=batch,
            batch_poll_s=batch_poll_s,
        )
        return await runner.run(run_id, conversation_ids)
    finally:
        if own_gateway:
            await gateway.aclose()
        if own_store:
            store.close()


def _set_prices(
    gateway: Any,
    judges: Sequence[Judge],
    price: Sequence[float | None] | None,
    batch_factor: float | None,
) -> None:
    """The model judges' price and batch factor, where given, on the gateway that prices calls."""
    from branchpoint.core.errors import UserError
    from branchpoint.gateway.pricing import price_of
    from branchpoint.gateway.specs import parse_spec
    from branchpoint.judges.llm_judge import LLMJudge

    if batch_factor is not None and not 0 < batch_factor <= 1:
        raise UserError(f"--batch-factor {batch_factor:g}: expected a share in (0, 1]")
    for judge in judges:
        if not isinstance(judge, LLMJudge):
            continue
        spec = parse_spec(judge.spec).raw  # the form the gateway looks prices up by
        if price is not None:
            found = price_of(spec, price)
            assert found is not None  # a given price always prices
            gateway.prices[spec] = found
        if batch_factor is not None:
            gateway.batch_factors[spec] = batch_factor


judge_run = synchronous(
    ajudge_run, "Synchronous :func:`ajudge_run` (for the command line, ``make demo`` and scripts)."
)
