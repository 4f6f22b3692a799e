"""Calls through an OpenAI-compatible Batch API: many requests in one file, answered within hours
at a lower price (OpenAI bills half).

    api = BatchAPI(batch_target("oai:gpt-4o-mini", params))
    job = await api.create(await api.upload([line, ...]), metadata={"branchpoint_submission": t})
    while not (job := await api.job(job.id)).done: await asyncio.sleep(30)
    results = await api.results(job)          # custom_id -> BatchResult
    await api.aclose()

The requests are ``POST /v1/chat/completions`` bodies as ``oai:`` sends them (``request_line``),
uploaded as JSONL to ``POST /files`` (purpose ``batch``), then ``POST /batches``; the job is read
with ``GET /batches/{id}`` and its results from ``GET /files/{id}/content`` (the output file,
and the error file for the lines that failed). Served by ``oai:`` judges (their ``api_base``) and
``litellm:openai/...`` ones (OpenAI's, or their ``api_base``); any other spec, or a server that
answers 404 where the API should be, is a UserError: nothing falls back to calls at full price
without being asked. The key is read from the environment (``extra.api_key_env``, default
OPENAI_API_KEY) and sent only in the Authorization header; errors are redacted.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson
from pydantic import BaseModel, Field

from branchpoint.core.errors import UserError
from branchpoint.core.redaction import redact_text
from branchpoint.gateway.completion import Completion, GenParams, Message
from branchpoint.gateway.specs import parse_spec
from branchpoint.gateway.structured import messages_for, pinned_mode

if TYPE_CHECKING:
    import aiohttp

__all__ = [
    "BatchAPI",
    "BatchJob",
    "BatchResult",
    "BatchTarget",
    "batch_target",
    "request_line",
]

OPENAI_BASE = "https://api.openai.com/v1"
TERMINAL = ("completed", "failed", "expired", "cancelled")
# OpenAI's limits on one batch's input file
MAX_LINES = 50_000
MAX_BYTES = 190 * 1024 * 1024
_TRIES = 5  # of one request to the batch API that failed for a reason that may pass


@dataclass(frozen=True)
class BatchTarget:
    """Where a spec's batch lives: the server, the model name it knows, the key's variable."""

    api_base: str
    model: str
    key_env: str = "OPENAI_API_KEY"


def batch_target(spec: str, params: GenParams, *, where: str = "--batch") -> BatchTarget:
    """The batch API that serves ``spec``; a UserError for a spec that has none (``where``
    names the option or field that asked for it)."""
    parsed = parse_spec(spec)
    key_env = str(params.extra.get("api_key_env") or "OPENAI_API_KEY")
    if parsed.kind == "oai":
        if not params.api_base:
            raise UserError(f"{where}: {spec} needs an api_base param (where its batch API is)")
        return BatchTarget(params.api_base.rstrip("/"), parsed.model, key_env)
    if parsed.kind == "litellm" and parsed.model.startswith("openai/"):
        base = (params.api_base or OPENAI_BASE).rstrip("/")
        return BatchTarget(base, parsed.model.removeprefix("openai/"), key_env)
    raise UserError(
        f"{where}: judge {spec} has no batch API here (batch judging serves oai:MODEL and "
        f"litellm:openai/MODEL judges); judge it without {where}"
    )


def request_line(
    custom_id: str, target: BatchTarget, messages: list[Message], params: GenParams
) -> tuple[bytes, list[Message]]:
    """One JSONL line of a batch's input, and the messages it sends (the schema spelt out in
    them below ``json_schema``). The body is what ``oai:`` posts: its structured-output mode is
    the pinned one (``structured=...``), else ``json_schema``: a batch cannot probe a server."""
    from branchpoint.gateway.providers.oai import OpenAICompatProvider

    mode = pinned_mode(params) or "json_schema"
    sent = messages_for(mode, messages, params.json_schema) if params.json_schema else messages
    body = OpenAICompatProvider().body(target.model, sent, params, mode)
    line = {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}
    return orjson.dumps(line), sent


class BatchJob(BaseModel):
    """A batch as the provider reports it."""

    id: str
    status: str
    total: int = 0
    completed: int = 0
    failed: int = 0
    output_file_id: str | None = None
    error_file_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def done(self) -> bool:
        return self.status in TERMINAL

    @classmethod
    def of(cls, data: dict[str, Any]) -> BatchJob:
        counts = data.get("request_counts") or {}
        return cls(
            id=str(data["id"]),
            status=str(data.get("status") or "unknown"),
            total=int(counts.get("total") or 0),
            completed=int(counts.get("completed") or 0),
            failed=int(counts.get("failed") or 0),
            output_file_id=data.get("output_file_id"),
            error_file_id=data.get("error_file_id"),
            metadata=dict(data.get("metadata") or {}),
        )


class BatchResult(BaseModel):
    """One request's outcome: a completion, or why there is none (one line, redacted)."""

    custom_id: str
    completion: Completion | None = None
    error: str | None = None


class BatchAPI:
    """One server's ``/files`` and ``/batches``, through aiohttp (proxies from the environment,
    as ``oai:`` honours them)."""

    def __init__(self, target: BatchTarget) -> None:
        self.target = target
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(trust_env=True)
        return self._session

    def _headers(self) -> dict[str, str]:
        import os

        key = os.environ.get(self.target.key_env)
        return {"Authorization": f"Bearer {key}"} if key else {}

    async def _request(self, method: str, path: str, **kw: Any) -> bytes:
        """The body of a 2xx answer; UserError for an answer that will not change by asking again
        (404 where the batch API should be, a refused key, a bad request), after retries for
        the others (a refused connection, 429, 5xx)."""
        import aiohttp

        url = self.target.api_base + path
        problem = ""
        for attempt in range(_TRIES):
            if attempt:
                await asyncio.sleep(min(30.0, 0.5 * 2**attempt))
            try:
                async with self._client().request(
                    method, url, headers=self._headers(), **kw
                ) as reply:
                    body = await reply.read()
                    if reply.status < 300:
                        return body
                    detail = " ".join(body[:300].decode("utf-8", "replace").split())
                    problem = f"HTTP {reply.status} from {method} {url}: {detail}"
                    if reply.status in (404, 405) and path in ("/files", "/batches"):
                        raise UserError(
                            redact_text(
                                f"--batch: {self.target.api_base} has no batch API ({method} "
                                f"{path} answered {reply.status}); judge without --batch"
                            )
                        )
                    if reply.status not in (408, 409, 425, 429) and reply.status < 500:
                        raise UserError(redact_text(f"--batch: {problem}"))
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                problem = f"{type(exc).__name__} calling {method} {url}: {exc}"
        raise UserError(redact_text(f"--batch: {problem} (after {_TRIES} tries)"))

    async def upload(self, lines: list[bytes]) -> str:
        """Upload a batch's input (``lines``, JSONL); its file id. Costs nothing: only a batch
        made of it is billed."""
        import aiohttp

        form = aiohttp.FormData()
        form.add_field("purpose", "batch")
        form.add_field(
            "file",
            b"\n".join(lines) + b"\n",
            filename="branchpoint-batch.jsonl",
            content_type="application/jsonl",
        )
        return str(orjson.loads(await self._request("POST", "/files", data=form))["id"])

    async def create(self, file_id: str, metadata: dict[str, str]) -> BatchJob:
        """Create a batch of an uploaded file (24 h completion window)."""
        body = {
            "input_file_id": file_id,
            "endpoint": "/v1/chat/completions",
            "completion_window": "24h",
            "metadata": metadata,
        }
        return BatchJob.of(orjson.loads(await self._request("POST", "/batches", json=body)))

    async def submit(self, lines: list[bytes], metadata: dict[str, str]) -> BatchJob:
        """``upload`` then ``create``."""
        return await self.create(await self.upload(lines), metadata)

    async def job(self, batch_id: str) -> BatchJob:
        return BatchJob.of(orjson.loads(await self._request("GET", f"/batches/{batch_id}")))

    async def find(self, key: str, value: str) -> BatchJob | None:
        """The newest batch (of the last hundred) whose metadata has ``key: value``: a batch
        created by a process that died before it could record the batch's id."""
        try:
            data = orjson.loads(await self._request("GET", "/batches?limit=100"))
        except UserError:
            return None  # no listing: the caller submits again
        for item in data.get("data") or []:
            if isinstance(item, dict) and (item.get("metadata") or {}).get(key) == value:
                return BatchJob.of(item)
        return None

    async def results(self, job: BatchJob) -> dict[str, BatchResult]:
        """Every result line of a finished batch, by custom_id (a request with no line is absent)."""
        out: dict[str, BatchResult] = {}
        for file_id in (job.output_file_id, job.error_file_id):
            if not file_id:
                continue
            raw = await self._request("GET", f"/files/{file_id}/content")
            for line in raw.splitlines():
                if line.strip():
                    result = _result(line, self.target.model)
                    if result is not None:
                        out[result.custom_id] = result
        return out

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _result(line: bytes, model: str) -> BatchResult | None:
    from branchpoint.gateway.completion import ModelError
    from branchpoint.gateway.providers.oai import chat_completion

    try:
        item = orjson.loads(line)
        custom_id = str(item["custom_id"])
    except (ValueError, KeyError, TypeError):
        return None  # not a result line: its request counts as unanswered
    response = item.get("response") or {}
    status = response.get("status_code")
    body = response.get("body")
    if item.get("error") or status != 200:
        said = item.get("error") or (body.get("error") if isinstance(body, dict) else body)
        if isinstance(said, dict):
            said = said.get("message") or said
        reason = " ".join(f"batch request failed (HTTP {status}): {said}".split())[:1000]
        return BatchResult(custom_id=custom_id, error=redact_text(reason))
    try:
        return BatchResult(custom_id=custom_id, completion=chat_completion(body, model))
    except (KeyError, IndexError, TypeError, AttributeError, ModelError) as exc:
        reason = f"malformed batch result: {type(exc).__name__} {exc}"
        return BatchResult(custom_id=custom_id, error=redact_text(reason[:1000]))
