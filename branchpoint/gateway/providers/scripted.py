"""A scripted model: canned replies chosen by content. A real provider for logic tests and benchmarks.

    model = ScriptedModel(rules=[
        (r"(?i)kill myself", "Please reach out to a crisis line."),     # regex on the last message
        (lambda msgs, params: len(msgs) > 10, "We have talked a while."),  # predicate on all messages
        (r"boom", ModelError("server exploded", retryable=True)),       # raise for some inputs
        (r"count", ["one", "two", "three"]),                              # successive replies
    ], default="ok")
    gateway.register("scripted:teen-bot", model)

Like Inspect AI's mockllm: it goes through the real gateway (cache, records, retries), it just does
not run a network model. It is never a default and never stands in for a model a user would run.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import re
from collections.abc import Callable, Sequence
from typing import Any

from branchpoint.core.errors import UserError
from branchpoint.gateway.completion import Completion, GenParams, Message, ModelError
from branchpoint.gateway.providers.base import ProviderKind

Predicate = Callable[[list[Message], GenParams], bool]
Responder = Callable[[list[Message], GenParams], str | Completion]
Pattern = str | re.Pattern[str] | Predicate
Reply = str | Completion | Responder | BaseException | Sequence[Any]

_ids = itertools.count(1)


# Every request carries the whole conversation so far, so counting its prompt tokens afresh made
# the loopback server's CPU per call grow with the history (a fifth of it at 10 exchanges).
@functools.lru_cache(maxsize=1 << 16)
def _count_tokens(text: str) -> int:
    return len(text.split())


class _Rule:
    def __init__(self, pattern: Pattern, reply: Reply) -> None:
        if isinstance(pattern, str):
            pattern = re.compile(pattern)
        self.pattern = pattern
        self.reply = reply
        self.hits = 0

    def matches(self, messages: list[Message], params: GenParams) -> bool:
        if isinstance(self.pattern, re.Pattern):
            last = messages[-1].content if messages else ""
            return self.pattern.search(last) is not None
        return bool(self.pattern(messages, params))


class ScriptedModel:
    """Replies by the first rule that matches; ``default`` when none does.

    A reply is a string, a Completion, a callable ``(messages, params) -> str | Completion``, an
    exception instance (raised, e.g. ``ModelError("...", retryable=True)``), or a list of these used
    one after another on successive matches (the last one repeats).

    ``fail_first=K`` raises a retryable ModelError on the first K calls (with ``retry_after``), to
    exercise the gateway's retry path. ``delay_s`` sleeps before answering, like a slow server.
    """

    def __init__(
        self,
        rules: Sequence[tuple[Pattern, Reply]] = (),
        default: Reply = "ok",
        *,
        delay_s: float = 0.0,
        fail_first: int = 0,
        retry_after: float | None = None,
        reasoning: str | None = None,
    ) -> None:
        self.rules = [_Rule(p, r) for p, r in rules]
        self.default = _Rule(lambda m, p: True, default)
        self.delay_s = delay_s
        self.fail_first = fail_first
        self.retry_after = retry_after
        self.reasoning = reasoning
        self.calls = 0  # every call, failed ones included
        self.requests: list[tuple[list[Message], GenParams]] = []

    def reset(self) -> None:
        self.calls = 0
        self.requests.clear()
        for rule in [*self.rules, self.default]:
            rule.hits = 0

    def _choose(self, messages: list[Message], params: GenParams) -> _Rule:
        for rule in self.rules:
            if rule.matches(messages, params):
                return rule
        return self.default

    def reply_for(self, messages: list[Message], params: GenParams) -> Completion:
        """The completion for these messages, without counting a call (used by the server too)."""
        rule = self._choose(messages, params)
        reply = rule.reply
        if isinstance(reply, (list, tuple)):
            reply = reply[min(rule.hits, len(reply) - 1)]
        rule.hits += 1
        if isinstance(reply, BaseException):
            raise reply
        if callable(reply) and not isinstance(reply, Completion):
            reply = reply(messages, params)
        if isinstance(reply, Completion):
            return reply.model_copy()
        text = str(reply)
        if params.max_tokens is not None:
            words = text.split(" ")
            if len(words) > params.max_tokens:
                text = " ".join(words[: params.max_tokens])
                return self._completion(messages, text, "length")
        return self._completion(messages, text, "stop")

    def _completion(self, messages: list[Message], text: str, finish: str) -> Completion:
        return Completion(
            text=text,
            reasoning=self.reasoning,
            tokens_in=sum(_count_tokens(m.content) for m in messages),
            tokens_out=_count_tokens(text),
            cost=0.0,
            finish_reason=finish,
            request_id=f"scripted-{next(_ids)}",
        )

    async def complete(self, model: str, messages: list[Message], params: GenParams) -> Completion:
        self.calls += 1
        self.requests.append((list(messages), params))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.calls <= self.fail_first:
            raise ModelError(
                f"scripted failure {self.calls} of {self.fail_first}",
                retryable=True,
                retry_after=self.retry_after,
            )
        completion = self.reply_for(messages, params)
        completion.model = model
        return completion

    async def aclose(self) -> None:
        return None


def echo_model(delay_s: float = 0.0) -> ScriptedModel:
    """Replies with the last message's content: the built-in ``scripted:echo``."""
    return ScriptedModel(default=lambda msgs, _p: msgs[-1].content if msgs else "", delay_s=delay_s)


# Models every gateway knows without registration (demos, benchmarks, the loopback server).
BUILTIN: dict[str, Callable[[], ScriptedModel]] = {"echo": echo_model}


def _create(model: str) -> ScriptedModel:
    if model in BUILTIN:
        return BUILTIN[model]()
    raise UserError(
        f"model spec 'scripted:{model}': no scripted model of that name is registered "
        f"(built in: {', '.join('scripted:' + n for n in BUILTIN)})"
    )


# Other scripted models are registered on a gateway by spec (``Gateway.register``).
# One provider per name: each name is a different model (one shared provider would answer
# ``scripted:NAME`` with whichever built-in model was created first).
PROVIDER = ProviderKind(
    prefix="scripted",
    usage="scripted:NAME",
    create=_create,
    default_concurrency=64,
    one_per_model=True,
)
