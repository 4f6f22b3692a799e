"""The model gateway: every model call of branchpoint goes through ``Gateway.complete``.

    gw = Gateway(store=store)                       # records a ModelCall row for every call
    completion, call_id = await gw.complete("litellm:openai/gpt-4o-mini", messages,
                                            GenParams(temperature=0, seed=1), purpose="target")
    await gw.aclose()

It routes a spec to its provider (created on first use and shared), holds per-provider concurrency
and requests-per-minute limits, retries retryable failures with exponential backoff and jitter
(honouring Retry-After), serves seeded or greedy calls from a content-addressed cache, and records
each call (cached, failed or not) with its secrets removed. It raises ModelError after retries.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import bindparam, delete, insert

from branchpoint.core.errors import UserError
from branchpoint.core.prompt_texts import text_hash
from branchpoint.core.records import ModelCall, PromptText, SpendReservation, utcnow
from branchpoint.core.redaction import redact, redact_text
from branchpoint.gateway.cache import CompletionCache, cacheable, request_hash
from branchpoint.gateway.call_ids import new_call_id
from branchpoint.gateway.call_layout import SHORT, CallLayout, ComposedMessage, TranscriptRef
from branchpoint.gateway.completion import Completion, GenParams, Message, ModelError
from branchpoint.gateway.limits import (
    DEFAULT_TIMEOUT_S,
    CallLimiter,
    LimiterFactory,
    LimiterState,
    Outcome,
    ProviderLimits,
    local_limiter,
)
from branchpoint.gateway.pricing import Tokens
from branchpoint.gateway.providers.base import Provider
from branchpoint.gateway.providers.registry import provider_kind
from branchpoint.gateway.specs import Spec, parse_spec
from branchpoint.gateway.structured import call_record
from branchpoint.gateway.thinking import split_reasoning

if TYPE_CHECKING:
    from branchpoint.core.store import Store
    from branchpoint.gateway.budget import Budget, Reservation
    from branchpoint.gateway.pricing import Price

_MODEL_CALLS = ModelCall.__table__  # type: ignore[attr-defined]
_PROMPT_TEXTS = PromptText.__table__  # type: ignore[attr-defined]
_INSERT_MODEL_CALL = insert(_MODEL_CALLS)
_RESERVATIONS = SpendReservation.__table__  # type: ignore[attr-defined]
_INSERT_RESERVATION = insert(_RESERVATIONS)
_SETTLE_RESERVATION = delete(_RESERVATIONS).where(_RESERVATIONS.c.id == bindparam("reservation_id"))


@dataclass
class _Ledger:
    """One call's place in the budget's ledger: its id and run, and, once an attempt succeeded,
    that attempt's reservation (in memory) and reservation row (in the store). The row is deleted
    in the call row's transaction; memory settles only once that transaction has committed, so
    memory never holds less than the store (``docs/operations/ledger-and-store.md``)."""

    call_id: str
    run_id: str | None
    reservation: Reservation | None = None
    row: str | None = None


__all__ = ["Gateway", "ProviderLimits", "redact"]

# the output tokens a budget reserves for a call without max_tokens
UPPER_OUTPUT_TOKENS = 4096


class Gateway:
    """One async entry point to every model; see the module docstring.

    ``limits`` maps a spec (``litellm:openai/gpt-4o``), a limit key (``litellm:openai``,
    ``oai:http://host/v1``) or a prefix (``litellm``, ``hf``) to ProviderLimits; the most specific
    match applies. ``max_attempts`` bounds tries per call; ``timeout_s`` bounds one attempt.
    """

    def __init__(
        self,
        store: Store | None = None,
        cache: bool = True,
        limits: Mapping[str, ProviderLimits | Mapping[str, Any]] | None = None,
        *,
        max_attempts: int = 4,
        backoff_s: float = 0.5,
        max_backoff_s: float = 60.0,
        timeout_s: float | None = DEFAULT_TIMEOUT_S,
        write_behind: bool = False,
        default_concurrency: int | None = None,
        limiter_factory: LimiterFactory | None = None,
        budget: Budget | None = None,
        prices: Mapping[str, Price] | None = None,
    ) -> None:
        self.store = store
        # how a provider key's limiter is made: in process by default, a Ray actor's client
        # when workers share one provider's limits
        self.limiter_factory: LimiterFactory = limiter_factory or local_limiter
        # budget: every attempt reserves its upper-bound cost at ``prices`` (spec -> USD per
        # token) before it is sent and settles its actual cost after (branchpoint/gateway/budget.py); with a
        # store, a priced attempt of a run is not sent before its reservation row is committed
        self.budget = budget
        self.prices: dict[str, Price] = dict(prices or {})
        # spec -> the share of its price that its calls through a batch API cost (default
        # pricing.BATCH_FACTOR)
        self.batch_factors: dict[str, float] = {}
        # write_behind: ModelCall rows (also the cache's entries) go to the store's writer thread
        # (a run drains it before it finishes); otherwise each is committed before the call returns.
        self.writer = None
        if write_behind and store is not None:
            from branchpoint.gateway.write_behind import shared_writer

            self.writer = shared_writer(store)
        self.cache = CompletionCache(store, self.writer) if cache else None
        # calls in flight for providers that do not bring their own limit (a local model's batch)
        self.default_concurrency = default_concurrency
        self.limits = {
            k: v if isinstance(v, ProviderLimits) else ProviderLimits(**v)
            for k, v in (limits or {}).items()
        }
        self.max_attempts = max(1, max_attempts)
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.timeout_s = timeout_s
        self._registered: dict[str, Provider] = {}
        self._providers: dict[str, Provider] = {}  # by prefix, or prefix:model (one_per_model)
        self._limiters: dict[str, CallLimiter] = {}
        self._inflight: dict[str, asyncio.Future[Completion]] = {}
        self.stats = {"calls": 0, "cached": 0, "failed": 0, "retries": 0}
        # prompt text -> its hash, for texts stored by this gateway (a few per scenario)
        self._text_keys: dict[str, str] = {}
        self._params_memo: dict[str, dict[str, Any]] = {}

    # -- providers -----------------------------------------------------------------------------

    def register(self, spec: str, provider: Provider) -> None:
        """Serve ``spec`` (e.g. ``scripted:teen-bot``, or ``embedded`` to swap the default) by ``provider``."""
        self._registered[parse_spec(spec).raw] = provider  # the form provider_for looks up

    def provider_for(self, spec: Spec) -> Provider:
        found = self._registered.get(spec.raw)
        if found is not None:
            return found
        kind = provider_kind(spec.kind)
        slot = f"{spec.kind}:{spec.model}" if kind.one_per_model else spec.kind
        provider = self._providers.get(slot)
        if provider is None:
            provider = self._providers[slot] = kind.create(spec.model)
        return provider

    def _limiter(self, spec: Spec, params: GenParams, provider: Provider) -> CallLimiter:
        kind = provider_kind(spec.kind)
        key = kind.key(spec.model, params)
        limiter = self._limiters.get(key)
        if limiter is None:
            limits = (
                self.limits.get(spec.raw)
                or self.limits.get(key)
                or self.limits.get(spec.kind)
                or self.limits.get("*")
                or ProviderLimits(
                    max_concurrency=getattr(provider, "default_concurrency", None)
                    or self.default_concurrency
                    or kind.default_concurrency
                )
            )
            limiter = self._limiters[key] = self.limiter_factory(key, limits)
        return limiter

    def limiter_states(self) -> list[LimiterState]:
        """Each provider key's limiter now (calls in flight, current limit, 429s, cool-down)."""
        return [limiter.snapshot() for limiter in self._limiters.values()]

    # -- the call ------------------------------------------------------------------------------

    async def complete(
        self,
        spec: str,
        messages: list[Message],
        params: GenParams | None = None,
        *,
        purpose: str = "target",
        run_id: str | None = None,
        conversation_id: str | None = None,
        layout: CallLayout | None = None,
    ) -> tuple[Completion, str]:
        """Returns (completion, call id). Raises ModelError after retries, UserError for a bad spec.

        ``layout`` says how ``messages`` are made of stored turns, so that the call's row stores
        references instead of the messages (``branchpoint.gateway.call_layout``)."""
        parsed = parse_spec(spec)
        params = params or GenParams()
        provider = self.provider_for(parsed)
        key = request_hash(parsed.raw, messages, params)
        call_id = new_call_id()
        self.stats["calls"] += 1
        use_cache = self.cache is not None and cacheable(params)

        earlier: list[str] = []  # why the attempts before the last failed
        ledger = _Ledger(call_id, run_id)

        def record(
            completion: Completion,
            error: str | None,
            committed: Callable[[BaseException | None], None] | None = None,
        ) -> None:
            self._record(
                call_id, parsed, params, key, messages, purpose, run_id, conversation_id,
                completion, error, layout, committed, earlier,
                held=[ledger.row] if ledger.row is not None else None,
            )  # fmt: skip

        if use_cache:
            hit = self._cache_get(key, parsed.raw)
            if hit is None and key in self._inflight:
                # The same seeded request is already running: share its answer, do not pay twice.
                try:
                    hit = (await asyncio.shield(self._inflight[key])).model_copy()
                except ModelError:
                    hit = None
            if hit is not None:
                hit.cached, hit.attempts, hit.cost = True, 0, 0.0
                hit.model = parsed.raw
                self.stats["cached"] += 1
                record(hit, None)
                return hit, call_id

        future: asyncio.Future[Completion] | None = None
        if use_cache:
            future = asyncio.get_running_loop().create_future()
            self._inflight[key] = future
        try:
            completion, attempts, error = await self._call_with_retries(
                parsed, provider, messages, params, earlier,
                conversation_id=conversation_id, ledger=ledger,
            )  # fmt: skip
        except BaseException:  # cancelled: release anyone waiting on this request
            if future is not None and not future.done():
                future.set_exception(ModelError("cancelled"))
                future.exception()  # mark retrieved
                self._inflight.pop(key, None)
            raise
        if completion is not None:
            completion.model = parsed.raw
            completion.attempts = attempts
            completion.cached = False
        if future is not None:
            self._inflight.pop(key, None)
            if completion is not None:
                future.set_result(completion)  # each waiter takes a copy of its own
            else:
                future.set_exception(ModelError(error or "failed"))
                future.exception()

        if completion is None:
            self.stats["failed"] += 1
            failed = Completion(text="", model=parsed.raw, attempts=attempts)
            record(failed, error)
            raise ModelError(error or "model call failed")

        committed = None
        if use_cache and self.cache is not None:
            # with a store, this call's row is the cache entry (branchpoint.gateway.cache)
            committed = self.cache.put(key, parsed.raw, completion)
        settle = self._settle_after_commit(ledger, completion)
        if settle is not None:
            committed = _both(committed, settle) if committed is not None else settle
        record(completion, None, committed)
        if self.store is None and settle is not None:
            settle(None)  # nothing to commit: settled now
        return completion, call_id

    def _settle_after_commit(
        self, ledger: _Ledger, completion: Completion
    ) -> Callable[[BaseException | None], None] | None:
        """What settles a successful call's reservation in memory once its row (which deletes
        the reservation row) has committed: at its cost, or at its bound where the commit failed
        (the reservation row is then still in the store). Told on the writer's thread."""
        reservation, budget = ledger.reservation, self.budget
        if reservation is None or budget is None:
            return None
        loop = asyncio.get_running_loop()
        loop_thread = threading.get_ident()

        def settle(failure: BaseException | None) -> None:
            usd = reservation.upper_usd if failure is not None else (completion.cost or 0.0)
            if threading.get_ident() == loop_thread:
                budget.settle(reservation, usd)  # committed in line (no writer thread)
            elif not loop.is_closed():  # closed: the run is over, nobody waits on this budget
                loop.call_soon_threadsafe(budget.settle, reservation, usd)

        return settle

    async def _call_with_retries(
        self,
        spec: Spec,
        provider: Provider,
        messages: list[Message],
        params: GenParams,
        earlier: list[str],
        *,
        conversation_id: str | None = None,
        ledger: _Ledger | None = None,
    ) -> tuple[Completion | None, int, str | None]:
        """Raises BudgetReached (before sending an attempt) when the budget would not cover it.
        Appends each failed attempt's reason but the last one's to ``earlier``. ``ledger``: the
        call's place in the budget's ledger; a successful attempt's reservation is left there,
        to be settled once the call's row commits.

        A failed attempt's reservation is settled here, in the store before memory: an error
        answer (an HTTP status, or a connection refused) was not billed, so its row is deleted
        and then memory releases it; any other failure (a timeout, a connection cut, an answer
        that could not be read, a cancellation) may have been billed, so its row stays in the
        store and memory counts it as spent at its bound. No row outlives its call otherwise,
        so a budget stop or a cancellation between attempts leaves nothing behind."""
        limiter = self._limiter(spec, params, provider)
        price = self.prices.get(spec.raw)
        attempt = 0
        while True:
            attempt += 1
            reservation: Reservation | None = None
            row: str | None = None  # the attempt's reservation row, once committed
            unbilled = False  # an error answer: nothing was billed
            sent = False
            await limiter.acquire()
            outcome: Outcome = "error"
            retry_after: float | None = None
            used = 0
            try:
                if self.budget is not None:
                    # after the slot: only calls about to be sent hold part of the budget
                    target = self.budget.target_for(conversation_id, spec.raw)
                    reservation = await self.budget.acquire(
                        target, self._upper_usd(price, messages, params)
                    )
                    if ledger is not None:
                        row = await self._write_ahead(
                            ledger, attempt, target, reservation.upper_usd
                        )
                started = time.perf_counter()
                sent = True
                async with asyncio.timeout(self.timeout_s):
                    completion = await provider.complete(spec.model, messages, params)
                completion = split_reasoning(completion)  # <think> blocks, any provider
                completion.latency_s = time.perf_counter() - started
                if completion.cost is None and price is not None:
                    completion.cost = tokens_of(completion).usd(price)
                outcome, used = "ok", completion.tokens_in + completion.tokens_out
                if reservation is not None and self.budget is not None:
                    if ledger is not None:  # settled once the call's row has committed
                        ledger.reservation, ledger.row = reservation, row
                    else:
                        self.budget.settle(reservation, completion.cost or 0.0)
                return completion, attempt, None
            except ModelError as exc:
                error, retryable, retry_after = exc.reason, exc.retryable, exc.retry_after
                unbilled = exc.unsent or (exc.status is not None and exc.status >= 400)
                if exc.status == 429:
                    outcome = "throttled"
            except TimeoutError:
                error, retryable, retry_after = f"timed out after {self.timeout_s:g}s", True, None
            except UserError:
                raise
            except Exception as exc:
                from branchpoint.gateway.budget import BudgetReached

                if isinstance(exc, BudgetReached) or not sent:
                    raise  # the budget, or the store that could not take the reservation
                # a provider bug or an unmapped library error: record, do not retry
                error, retryable, retry_after = f"{type(exc).__name__}: {exc}", False, None
            finally:
                limiter.release(outcome, retry_after=retry_after, tokens=used)
                perhaps_billed = outcome != "ok" and not unbilled
                if reservation is not None and self.budget is not None and perhaps_billed:
                    # its bound stays spent, in memory as in the store
                    self.budget.settle(reservation, reservation.upper_usd)
            if unbilled and reservation is not None and self.budget is not None:
                # an error answer: released in the store, then in memory (never the other way:
                # memory must not lend out what the store still counts)
                if row is not None:
                    await self._release(row)
                self.budget.settle(reservation, 0.0)
            error = redact_text(" ".join(str(error).split()))[:2000]
            if not retryable or attempt >= self.max_attempts:
                if attempt > 1:
                    # what the earlier attempts met too, each different reason once
                    before = [e for e in dict.fromkeys(earlier) if e != error[:200]]
                    also = f"; earlier: {' | '.join(before)}" if before else ""
                    error = f"{error} (after {attempt} attempts{also})"[:2000]
                return None, attempt, error
            earlier.append(error[:200])
            self.stats["retries"] += 1
            await asyncio.sleep(self._delay(attempt, retry_after))

    async def _write_ahead(
        self, ledger: _Ledger, attempt: int, target: str, usd: float
    ) -> str | None:
        """Commit the reservation of ``attempt`` before it is sent: a process killed while the
        call is out leaves it in the store, where the spend rebuilt on restart counts it. Only
        priced calls of a run with a store (the spend of a run is what a budget rebuilds).
        Returns the row's id, or None where none is written."""
        if usd <= 0 or ledger.run_id is None or self.store is None:
            return None
        reservation_id = f"{ledger.call_id}:{attempt}"
        row = {
            "id": reservation_id,
            "call_id": ledger.call_id,
            "run_id": ledger.run_id,
            "target": target,
            "upper_usd": usd,
            "created_at": utcnow(),
        }
        if self.writer is not None:
            # awaited: other calls' reservations share its commit, none leaves before its own
            from branchpoint.gateway.write_behind import RANK_RESERVATION

            await self.writer.write([(RANK_RESERVATION, _INSERT_RESERVATION, [row])])
            return reservation_id
        with self.store.engine.begin() as conn:
            conn.execute(_INSERT_RESERVATION, [row])
        return reservation_id

    async def _release(self, reservation_id: str) -> None:
        """Delete the reservation row of an attempt known to be unbilled, and wait for it."""
        assert self.store is not None
        rows = [{"reservation_id": reservation_id}]
        if self.writer is not None:
            from branchpoint.gateway.write_behind import RANK_SETTLE

            await self.writer.write([(RANK_SETTLE, _SETTLE_RESERVATION, rows)])
            return
        with self.store.engine.begin() as conn:
            conn.execute(_SETTLE_RESERVATION, rows)

    def _upper_usd(self, price: Price | None, messages: list[Message], params: GenParams) -> float:
        """A bound on one attempt's cost: a generous token count of the prompt (2 characters a
        token, plus each message's framing) and all of ``max_tokens`` (UPPER_OUTPUT_TOKENS
        without one)."""
        if price is None:
            return 0.0
        prompt = sum(len(m.content) // 2 + 8 for m in messages) + 16
        output = params.max_tokens or UPPER_OUTPUT_TOKENS
        return Tokens(prompt, output).usd(price)

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        backoff = min(self.max_backoff_s, self.backoff_s * 2 ** (attempt - 1))
        backoff *= (
            0.5 + random.random()
        )  # jitter: replicates that failed together do not retry together
        if retry_after is not None:
            # The server said when: wait at least that long (plus a little jitter), within reason.
            return min(
                max(retry_after, 0.0) * (1 + 0.1 * random.random()),
                max(self.max_backoff_s, retry_after),
            )
        return backoff

    # -- records -------------------------------------------------------------------------------

    def _cache_get(self, key: str, model: str) -> Completion | None:
        assert self.cache is not None
        return self.cache.get(key, model)

    def _record(
        self,
        call_id: str,
        spec: Spec,
        params: GenParams,
        key: str,
        messages: list[Message],
        purpose: str,
        run_id: str | None,
        conversation_id: str | None,
        completion: Completion,
        error: str | None,
        layout: CallLayout | None = None,
        committed: Callable[[BaseException | None], None] | None = None,
        earlier: list[str] | None = None,
        note: dict[str, Any] | None = None,
        held: list[str] | None = None,
    ) -> None:
        """Store the call's row; ``committed`` is told once it is committed (or has failed).
        ``note`` goes into the row's params (a batch call's batch id). ``held``: its reservation
        rows, deleted in the same transaction (settled: the row's cost replaces them)."""
        if self.store is None:
            return
        prompt: list[dict[str, Any]] | None = None
        texts: list[tuple[str, str]] = []
        if layout is not None and layout.size() == len(messages):
            prompt, texts = self._prompt_parts(layout)
        # a call stored by parts stores its output schema by hash too (a judge's, once per schema)
        stored = self._stored_params(params, texts if prompt is not None else None)
        values: dict[str, Any] = dict(
            id=call_id,
            run_id=run_id,
            conversation_id=conversation_id,
            purpose=purpose,
            model=spec.raw,
            # with the structured-output mode used and the refusals met, where there was one
            params=stored
            | call_record(completion)
            # a call that succeeded after retries keeps why the attempts before failed (a failed
            # call's error says it already)
            | ({"earlier_errors": list(earlier)} if earlier and error is None else {})
            | (note or {}),
            request_hash=key,
            messages=[]
            if prompt is not None
            else [{"role": m.role, "content": m.content} for m in messages],
            prompt=prompt,
            text=completion.text,
            reasoning=completion.reasoning,
            tokens_in=completion.tokens_in,
            tokens_out=completion.tokens_out,
            tokens_cached=completion.tokens_cached,
            tokens_cache_write=completion.tokens_cache_write,
            cost=completion.cost,
            latency_s=completion.latency_s,
            finish_reason=completion.finish_reason,
            provider_request_id=completion.request_id,
            cached=completion.cached,
            attempts=completion.attempts,
            error=error,
            created_at=utcnow(),
        )
        if self.writer is None:
            from branchpoint.core.prompt_texts import put_text

            with self.store.session() as s:
                for kind, text in texts:
                    put_text(s, kind, text)
                s.add(ModelCall(**values))
                if held:
                    s.flush()
                    s.execute(_SETTLE_RESERVATION, [{"reservation_id": r} for r in held])
                s.commit()
            if committed is not None:
                committed(None)
            return
        from branchpoint.gateway.write_behind import (
            RANK_MODEL_CALL,
            RANK_PROMPT_TEXT,
            RANK_SETTLE,
            upsert,
        )

        ops: list[Any] = []
        if texts:
            rows = [
                {"hash": text_hash(t), "kind": k, "text": t, "created_at": values["created_at"]}
                for k, t in texts
            ]
            ops.append((RANK_PROMPT_TEXT, upsert(self.store, _PROMPT_TEXTS, ["hash"], []), rows))
        ops.append((RANK_MODEL_CALL, _INSERT_MODEL_CALL, [values]))
        if held:  # one Write is one transaction: the row and its settling land together
            rows = [{"reservation_id": r} for r in held]
            ops.append((RANK_SETTLE, _SETTLE_RESERVATION, rows))
        self.writer.send(ops, notify=committed)

    # -- calls answered through a batch API (branchpoint/gateway/batch.py) -----------------------------

    def batch_price(self, spec: str) -> Price | None:
        """USD per token of ``spec``'s calls through its batch API: its given price (``prices``)
        times its batch factor (``batch_factors``, default ``pricing.BATCH_FACTOR``), else
        litellm's batch price for it (``pricing.batch_price_of``); None when unpriced."""
        from branchpoint.gateway.pricing import BATCH_FACTOR, batch_price_of

        raw = parse_spec(spec).raw
        factor = self.batch_factors.get(raw)
        given = self.prices.get(raw)
        if given is not None:
            return given.scaled(BATCH_FACTOR if factor is None else factor)
        return batch_price_of(raw, factor=factor)

    def record_batch_call(
        self,
        call_id: str,
        spec: str,
        messages: list[Message],
        params: GenParams,
        completion: Completion | None,
        error: str | None,
        *,
        batch_id: str,
        purpose: str,
        run_id: str | None = None,
        conversation_id: str | None = None,
        layout: CallLayout | None = None,
    ) -> None:
        """Store the row of one request answered (or failed) in a batch, priced at the batch
        price, once: a ``call_id`` already stored (a resumed judge reading the same results) is
        left as it is. The row carries the request's hash like any call's, so it also serves
        the cache; ``layout`` stores its messages by parts, as ``complete`` does."""
        if self.store is None:
            return
        with self.store.session() as s:
            if s.get(ModelCall, call_id) is not None:
                return
        parsed = parse_spec(spec)
        done = completion or Completion(text="", model=parsed.raw)
        done = done.model_copy(update={"model": parsed.raw, "cached": False, "attempts": 1})
        price = self.batch_price(parsed.raw)
        if completion is not None and price is not None:
            done.cost = tokens_of(done).usd(price)
        key = request_hash(parsed.raw, messages, params)
        self._record(
            call_id, parsed, params, key, messages, purpose, run_id, conversation_id,
            done, error, layout, note={"batch_id": batch_id},
        )  # fmt: skip
        self.stats["calls"] += 1
        if error is not None:
            self.stats["failed"] += 1

    def _stored_params(
        self, params: GenParams, texts: list[tuple[str, str]] | None = None
    ) -> dict[str, Any]:
        """Params as stored; with ``texts``, the output schema as ``json_schema_ref``: ``{"text":
        HASH}`` of its JSON (stored once per schema; ``call_requests.call_params`` restores it),
        added to ``texts`` the first time this process stores it."""
        # Redaction scans the environment for secrets, costly once per call; a run's calls share
        # a few params but for the seed, so the redacted form is kept per params without it.
        seed = params.seed
        memo_key = params.model_dump_json(exclude={"seed"})
        base = self._params_memo.get(memo_key)
        if base is None:
            if len(self._params_memo) > 4096:
                self._params_memo.clear()
            base = self._params_memo[memo_key] = stored_params(
                params.model_copy(update={"seed": None})
            )
        out = base | {"seed": seed} if seed is not None else dict(base)
        schema = out.get("json_schema")
        if texts is not None and isinstance(schema, dict):
            # json.dumps keeps the schema's key order, which the request sent
            del out["json_schema"]
            out["json_schema_ref"] = self._text_part(json.dumps(schema), "json_schema", texts)
        return out

    def _prompt_parts(
        self, layout: CallLayout
    ) -> tuple[list[dict[str, Any]], list[tuple[str, str]]]:
        """The stored form of ``layout``, and the prompt texts this process has not stored yet."""
        parts: list[dict[str, Any]] = []
        texts: list[tuple[str, str]] = []
        for m in layout.lead:
            if isinstance(m, ComposedMessage):
                pieces = []
                for piece in m.pieces:
                    if isinstance(piece, TranscriptRef):
                        pieces.append({"transcript": piece.conversation_id, "count": piece.count})
                    else:
                        pieces.append(self._text_part(piece, f"{m.role}_prompt", texts))
                parts.append({"role": m.role, "pieces": pieces})
                continue
            parts.append({"role": m.role} | self._text_part(m.content, f"{m.role}_prompt", texts))
        if layout.turns is not None:
            ref = layout.turns
            parts.append({"turns": ref.conversation_id, "count": ref.count, "flip": ref.flip})
        return parts, texts

    def _text_part(self, text: str, kind: str, texts: list[tuple[str, str]]) -> dict[str, Any]:
        """``{"content": text}`` for a short text, else ``{"text": HASH}`` (the text added to
        ``texts`` the first time this process stores it)."""
        if len(text) <= SHORT:
            return {"content": text}
        key = self._text_keys.get(text)
        if key is None:
            if len(self._text_keys) > 100_000:
                self._text_keys.clear()  # only speed is lost: a text is stored again as it was
            key = self._text_keys[text] = text_hash(text)
            texts.append((kind, text))
        return {"text": key}

    async def flush(self) -> None:
        """Wait until every ModelCall row written so far is committed."""
        if self.writer is not None:
            await self.writer.drain()

    async def aclose(self) -> None:
        await self.flush()
        seen: set[int] = set()
        for provider in [*self._providers.values(), *self._registered.values()]:
            if id(provider) in seen:
                continue
            seen.add(id(provider))
            close = getattr(provider, "aclose", None)
            if close is not None:
                await close()
        self._providers.clear()

    async def __aenter__(self) -> Gateway:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def tokens_of(completion: Completion) -> Tokens:
    """A completion's tokens as priced: its cache reads and writes at their rates."""
    return Tokens(
        completion.tokens_in,
        completion.tokens_out,
        completion.tokens_cached,
        completion.tokens_cache_write,
    )


def stored_params(params: GenParams) -> dict[str, Any]:
    """Params as stored: no None values, no secrets (in ``extra`` or in an api_base URL)."""
    data = params.model_dump(exclude_none=True)
    extra = data.get("extra") or {}
    data["extra"] = {k: v for k, v in extra.items() if not _secret(k)}
    if not data["extra"]:
        del data["extra"]
    return redact(data)


def _secret(name: str) -> bool:
    from branchpoint.core.redaction import is_secret_key

    return is_secret_key(name) or name in {"api_key", "headers", "extra_headers"}


def _both(
    first: Callable[[BaseException | None], None], then: Callable[[BaseException | None], None]
) -> Callable[[BaseException | None], None]:
    def told(outcome: BaseException | None) -> None:
        try:
            first(outcome)
        finally:
            then(outcome)

    return told
