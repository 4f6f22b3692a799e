"""What a sweep's judges will cost, for the plan: calls, tokens and USD per judge and rubric.

The plan (``branchpoint.study.plan``) counts the trees' calls but cannot see rubrics, so the
judging share is made here and attached to it (``SweepPlan.judging``), where the printed plan,
its totals and the confirmation's bound pick it up.

Per-turn rubrics judge every chatbot turn once: a turn shared by arms up to their fork is judged
once and its verdicts copied, so the judge calls are the trees' chatbot calls, at each estimate
level (``low`` / ``expected`` / ``high`` as the plan counts them). A judge call reads the rubric's
prompt (rendered, its length measured) and the transcript up to the rated turn; conversation
rubrics make one call per arm that reads all of it. As for the trees (``branchpoint/study/costs.py``), low
is a floor (one input token a call, an empty answer), expected a typical verdict per criterion
(``VERDICT_TOKENS``), high all of ``max_tokens`` on every attempt (an answer that does not
validate is asked again, ``DEFAULT_MAX_RETRIES`` times, each retry reading the answers before it).
Identical transcripts (replicates of a deterministic chatbot) are answered from the cache for
nothing, so expected and high are upper bounds on what it lets through. ``SweepPlan.attach_judging`` adds
the judges' wall time to the plan's (``branchpoint/study/timing.py``). Each estimate is priced both ways,
direct and through the provider's batch API: the plan counts the way the manifest asks for
(``batch``) and shows the other beside it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from branchpoint.core.store import Store
    from branchpoint.gateway.completion import GenParams
    from branchpoint.gateway.pricing import Price
    from branchpoint.judges.rubric import Rubric
    from branchpoint.study.manifest import JudgeEntry
    from branchpoint.study.plan import JudgingEstimate, SweepPlan

# tokens of one criterion's typical verdict (applicable, verdict, a rationale, evidence)
VERDICT_TOKENS = 60


def estimate_judging(plan: SweepPlan, store: Store | None = None) -> list[JudgingEstimate]:
    """One estimate per model judge and rubric of ``plan``'s manifest (the heuristic judge calls
    no model), for ``plan.attach_judging``. With the sweep's ``store``, the conversations already
    finished count too, for what they still lack of each judge's verdicts (a judge added to a
    manifest after its conversations were run, a judging pass that was interrupted)."""
    from branchpoint.gateway.specs import params_from
    from branchpoint.judges.loading import load_rubric
    from branchpoint.study.plan import model_prices

    prices = model_prices(plan.manifest)
    finished = _finished(plan) if store is not None else []
    out = []
    for entry in plan.manifest.judges:
        if entry.spec == "heuristic":
            continue
        params = params_from(entry.params, where="judges.params") if entry.params else None
        for name in entry.rubrics:
            rubric = load_rubric(name)
            left = _not_judged(store, finished, entry, params, rubric) if store else []
            out.append(_estimate(plan, entry, params, rubric, name, prices.get(entry.spec), left))
    return out


def _finished(plan: SweepPlan) -> list[str]:
    """The conversations of the trees the plan no longer counts (every arm done)."""
    pending = {id(tree) for _, tree, _ in plan.pending}
    return [
        arm.conversation_id
        for _, run_plan in plan.runs
        for tree in run_plan.trees
        if id(tree) not in pending
        for arm in tree.arms
    ]


def _not_judged(
    store: Store,
    conversations: list[str],
    entry: JudgeEntry,
    params: GenParams | None,
    rubric: Rubric,
) -> list[int]:
    """One item per judge call the finished ``conversations`` still need: the exchange it
    rates (a per-turn rubric), or 0 for a whole conversation (a conversation rubric)."""
    from branchpoint.core.read import judged_units, original_replies
    from branchpoint.judges.llm_judge import PROMPT_VERSION, judge_version

    if not conversations:
        return []
    version = judge_version(PROMPT_VERSION, params)
    done = {
        (unit.conversation_id, unit.turn_id)
        for unit in judged_units(store, conversations, rubric.rubric_hash(), [entry.spec])
        if unit.judge == entry.spec and unit.prompt_version == version
    }
    if rubric.scope == "conversation":
        return [0 for c in conversations if (c, None) not in done]
    return [k for c, turn, k in original_replies(store, conversations) if (c, turn) not in done]


def _estimate(
    plan: SweepPlan,
    entry: JudgeEntry,
    params: GenParams | None,
    rubric: Rubric,
    name: str,
    price: Price | None,
    left: list[int],
) -> JudgingEstimate:
    from branchpoint.judges.llm_judge import DEFAULT_MAX_RETRIES
    from branchpoint.scenarios.parts import ScenarioFields
    from branchpoint.study.costs import CORRECTION_TOKENS, LEVELS, message_lengths
    from branchpoint.study.plan import JudgingEstimate

    est = JudgingEstimate(
        label=f"{entry.spec} / {name} ({entry.when})",
        spec=entry.spec,
        params=params,
        when=entry.when,
    )
    prompt = _prompt_tokens(rubric)
    n_criteria = len(rubric.criteria)
    max_tokens = entry.params.get("max_tokens")
    high_output = int(max_tokens) if max_tokens else min(4096, 256 + 160 * n_criteria)
    attempts = 1 + DEFAULT_MAX_RETRIES

    def add(i: int, calls: int, read: int) -> None:
        level = LEVELS[i]
        if level == "low":  # the floor: one token a non-empty message, a verdict may be empty
            est.calls[level] += calls
            est.tokens[level].input += calls
            return
        if level == "expected":
            est.calls[level] += calls
            est.tokens[level].input += read
            est.tokens[level].output += calls * min(VERDICT_TOKENS * n_criteria, high_output)
            return
        # high: every call at its most attempts, each retry reading the call's input, the
        # answers before it (at most max_tokens each) and a corrective note that names every
        # criterion id (branchpoint/judges/llm_judge.py; up to 8 tokens an id)
        est.calls[level] += attempts * calls
        note = CORRECTION_TOKENS + 8 * n_criteria
        retry_reads = sum(j * (high_output + note) for j in range(attempts))
        est.tokens[level].input += attempts * read + calls * retry_reads
        est.tokens[level].output += attempts * calls * high_output

    # Trees whose tallies are one object (one shape, ``branchpoint.study.plan._Shapes``) with the same
    # arms, exchanges and reply caps make the same judge calls: each such group counted once.
    alike: dict[tuple[int, int, int, int | None, int | None], list[Any]] = {}
    for run_plan, tree, tallies in plan.pending:
        key = (
            id(tallies),
            len(tree.arms),
            tree.max_turns,
            run_plan.persona_params.max_tokens,
            tree.target_params.max_tokens,
        )
        alike.setdefault(key, [run_plan, tree, tallies, 0])[3] += 1
    for run_plan, tree, tallies, n in alike.values():
        for i, level in enumerate(LEVELS):
            persona_len, reply_len = message_lengths(
                level, run_plan.persona_params.max_tokens, tree.target_params.max_tokens
            )
            exchange = persona_len + reply_len
            if rubric.scope == "conversation":
                calls = len(tree.arms)
                read = calls * (prompt + tree.max_turns * exchange)
            else:
                by_exchange = tallies[level].target
                calls = sum(by_exchange.values())
                read = sum(m * (prompt + k * exchange) for k, m in by_exchange.items())
            add(i, n * calls, n * read)
    # A finished conversation-scope item has no length here (0): it reads at most the longest
    # conversation the sweep allows, the manifest's cap or else the scenarios' own max_turns.
    longest = plan.manifest.max_exchanges or max(
        (tree.max_turns for _, tree, _ in plan.pending),
        default=ScenarioFields.model_fields["max_turns"].default,
    )
    for i, level in enumerate(LEVELS):  # the finished conversations' calls, the same way
        persona_len, reply_len = message_lengths(level, None, None)
        exchange = persona_len + reply_len
        add(i, len(left), sum(prompt + (k or longest) * exchange for k in left))
    from branchpoint.gateway.pricing import PLAN_CACHE_SHARE

    batch_price = _batch_price(entry)
    est.batch = entry.batch
    for level in LEVELS:
        tokens = est.tokens[level].with_cache_share(PLAN_CACHE_SHARE[level])
        direct = tokens.usd(price) if price is not None else None
        batched = tokens.usd(batch_price) if batch_price is not None else None
        est.usd[level], est.usd_other[level] = (
            (batched, direct) if entry.batch else (direct, batched)
        )
    return est


def _batch_price(entry: JudgeEntry) -> Price | None:
    """What the judge's calls cost through its batch API (``branchpoint.gateway.pricing.batch_price_of``),
    with the manifest's price and batch factor where it gives them."""
    from branchpoint.gateway.pricing import batch_price_of

    given = entry.price
    override = given.per_mtok() if given is not None else None
    return batch_price_of(entry.spec, override, given.batch_factor if given is not None else None)


def _prompt_tokens(rubric: Rubric) -> int:
    """The rubric's judge prompt with an empty transcript, in tokens (as the plan counts them)."""
    from branchpoint.judges.llm_judge import render_messages
    from branchpoint.judges.verdicts import JudgingUnit
    from branchpoint.study.costs import CHARS_PER_TOKEN

    unit = JudgingUnit(conversation_id="estimate", run_id="estimate", transcript=[])
    messages = render_messages(rubric, unit, list(rubric.criteria))
    return sum(len(m.content) for m in messages) // CHARS_PER_TOKEN
