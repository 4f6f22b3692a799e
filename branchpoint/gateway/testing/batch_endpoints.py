"""OpenAI's Batch API on the loopback server: ``/v1/files`` and ``/v1/batches``, for tests.

    POST /v1/files                 multipart: purpose=batch, file=JSONL of requests -> a file
    POST /v1/batches               {input_file_id, endpoint, completion_window, metadata} -> a batch
    GET  /v1/batches/{id}          the batch: status, request_counts, output/error file ids
    GET  /v1/batches               the batches created, newest first (with their metadata)
    GET  /v1/files/{id}/content    a file's bytes (a batch's output and error files)

Each request line (``{"custom_id", "method", "url", "body"}``) is answered by the server's own
chat handler, so a batch's replies are those its chat endpoint gives (scripted judges, faults,
structured-output refusals); a reply with status 200 goes to the output file, any other to the
error file, as OpenAI does. The batch is processed after ``delay_s`` (spread over its lines, so
``request_counts`` grows while it is ``in_progress``), long enough for a test to kill a client
while it waits. ``created`` counts the batches created.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any

import orjson

from branchpoint.gateway.testing.http_server import Reply, Request

ChatHandler = Callable[[Request], Awaitable[Reply]]
TERMINAL = ("completed", "failed", "expired", "cancelled")


def _json(body: Any, status: int = 200) -> Reply:
    return Reply(status, orjson.dumps(body))


def _error(status: int, message: str) -> Reply:
    return _json({"error": {"message": message, "type": "invalid_request_error"}}, status)


def _multipart(request: Request) -> dict[str, tuple[str | None, bytes]]:
    """The form fields of a multipart/form-data body: name -> (filename, bytes)."""
    head = f"Content-Type: {request.headers.get('content-type', '')}\r\n\r\n".encode("latin-1")
    message = BytesParser(policy=HTTP).parsebytes(head + request.body)
    fields: dict[str, tuple[str | None, bytes]] = {}
    if not message.is_multipart():
        return fields
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if isinstance(name, str) and isinstance(payload, bytes):
            fields[name] = (part.get_filename(), payload)
    return fields


class BatchEndpoints:
    """The files and batches of one loopback server, answered through its ``chat`` handler."""

    def __init__(self, chat: ChatHandler, *, delay_s: float = 0.0) -> None:
        self.chat = chat
        self.delay_s = delay_s
        self.files: dict[str, tuple[dict[str, Any], bytes]] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self.created = 0  # batches created: a resumed client must not add one
        self._ids = itertools.count(1)
        self._tasks: set[asyncio.Task[None]] = set()

    def handles(self, path: str) -> bool:
        return path.startswith(("/v1/files", "/v1/batches", "/files", "/batches"))

    async def handle(self, request: Request) -> Reply:
        parts = [p for p in request.path.split("/") if p and p != "v1"]
        if parts == ["files"] and request.method == "POST":
            return self._upload(request)
        if len(parts) == 3 and parts[0] == "files" and parts[2] == "content":
            if request.method != "GET":
                return Reply(405, b"405: Method Not Allowed", "text/plain")
            found = self.files.get(parts[1])
            if found is None:
                return _error(404, f"no file {parts[1]!r}")
            return Reply(200, found[1], "application/jsonl")
        if parts == ["batches"] and request.method == "POST":
            return self._create(request)
        if parts == ["batches"] and request.method == "GET":
            newest = sorted(self.batches.values(), key=lambda b: -b["created_at"])
            return _json({"object": "list", "data": newest, "has_more": False})
        if len(parts) == 2 and parts[0] == "batches" and request.method == "GET":
            batch = self.batches.get(parts[1])
            return _json(batch) if batch is not None else _error(404, f"no batch {parts[1]!r}")
        return Reply(404, b"404: Not Found", "text/plain")

    def _new_file(self, purpose: str, filename: str, data: bytes) -> dict[str, Any]:
        file_id = f"file-bp{next(self._ids)}"
        meta = {
            "id": file_id,
            "object": "file",
            "bytes": len(data),
            "created_at": int(time.time()),
            "filename": filename,
            "purpose": purpose,
        }
        self.files[file_id] = (meta, data)
        return meta

    def _upload(self, request: Request) -> Reply:
        fields = _multipart(request)
        purpose = fields.get("purpose", (None, b""))[1].decode("utf-8", "replace")
        if "file" not in fields:
            return _error(400, "a multipart form with a 'file' field is expected")
        if purpose != "batch":
            return _error(400, f"purpose {purpose!r}: only 'batch' is served here")
        filename, data = fields["file"]
        return _json(self._new_file(purpose, filename or "input.jsonl", data))

    def _create(self, request: Request) -> Reply:
        try:
            body = orjson.loads(request.body)
            file_id = str(body["input_file_id"])
        except (ValueError, KeyError, TypeError) as exc:
            return _error(400, f"bad request body: {exc}")
        if body.get("endpoint") != "/v1/chat/completions":
            return _error(400, f"endpoint {body.get('endpoint')!r}: only /v1/chat/completions")
        if file_id not in self.files:
            return _error(404, f"no file {file_id!r}")
        lines = [line for line in self.files[file_id][1].splitlines() if line.strip()]
        batch_id = f"batch_bp{next(self._ids)}"
        batch: dict[str, Any] = {
            "id": batch_id,
            "object": "batch",
            "endpoint": body["endpoint"],
            "input_file_id": file_id,
            "completion_window": body.get("completion_window", "24h"),
            "status": "in_progress",
            "output_file_id": None,
            "error_file_id": None,
            "created_at": time.time(),
            "metadata": body.get("metadata") or {},
            "request_counts": {"total": len(lines), "completed": 0, "failed": 0},
        }
        self.batches[batch_id] = batch
        self.created += 1
        auth = {k: v for k, v in request.headers.items() if k == "authorization"}
        task = asyncio.get_running_loop().create_task(self._process(batch, lines, auth))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return _json(batch)

    async def _process(
        self, batch: dict[str, Any], lines: list[bytes], headers: dict[str, str]
    ) -> None:
        out: list[bytes] = []
        errors: list[bytes] = []
        counts = batch["request_counts"]
        for n, raw in enumerate(lines):
            await asyncio.sleep(self.delay_s / max(1, len(lines)))
            try:
                item = orjson.loads(raw)
                custom_id = str(item["custom_id"])
                body = orjson.dumps(item["body"])
            except (ValueError, KeyError, TypeError) as exc:
                custom_id, reply = f"line-{n + 1}", _error(400, f"bad request line: {exc}")
            else:
                request = Request("POST", "/v1/chat/completions", dict(headers), body)
                reply = await self.chat(request)
            try:
                answer: Any = orjson.loads(reply.body)
            except ValueError:  # a malformed reply fault: the body as text
                answer = {"error": {"message": reply.body.decode("utf-8", "replace")}}
            line = {
                "id": f"batch_req_bp{next(self._ids)}",
                "custom_id": custom_id,
                "response": {"status_code": reply.status, "body": answer},
                "error": None,
            }
            (out if reply.status == 200 else errors).append(orjson.dumps(line))
            counts["completed" if reply.status == 200 else "failed"] += 1
        if out:
            name = f"{batch['id']}_output.jsonl"
            batch["output_file_id"] = self._new_file("batch_output", name, b"\n".join(out))["id"]
        if errors:
            name = f"{batch['id']}_errors.jsonl"
            batch["error_file_id"] = self._new_file("batch_output", name, b"\n".join(errors))["id"]
        batch["status"] = "completed"
        batch["completed_at"] = int(time.time())

    async def aclose(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
