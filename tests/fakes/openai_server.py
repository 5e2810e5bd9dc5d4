"""A loopback server speaking OpenAI's wire protocols: Chat Completions
(`POST /v1/chat/completions`, what OpenAI-compatible servers speak) and the Responses API
(`POST /v1/responses`, what pydantic-ai's `openai:` model uses).

Tests script it: `respond` maps a Chat Completions body to the next assistant message (text
or tool calls), `respond_responses` maps a Responses body to the next output items, and
`fail_next(status, times)` makes the next requests (of either kind) fail the way OpenAI
does (429 with `retry-after`, 500 …, with OpenAI's error body). Every request is recorded
with its headers and the status it was answered with, so tests can check what the real
`openai` client sent and how often.

Chaos: with `fault_rate` set, that share of requests (drawn from `rng`) fails with one of
`fault_kinds` – an HTTP status, or `HANG`: the request is held for `hang_seconds` and the
connection then dropped without an answer, as a stuck upstream behind a proxy does.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

Responder = Callable[[dict[str, Any]], dict[str, Any]]
ResponsesResponder = Callable[[dict[str, Any]], list[dict[str, Any]]]


def text_message(text: str) -> dict[str, Any]:
    """An assistant message with text content."""
    return {"role": "assistant", "content": text}


def tool_call_message(
    name: str, arguments: dict[str, Any], call_id: str = "call_1"
) -> dict[str, Any]:
    """An assistant message calling one tool (arguments are sent JSON-encoded, as OpenAI does)."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    }


def function_call_item(name: str, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
    """A Responses API output item calling one tool."""
    return {
        "type": "function_call",
        "id": f"fc_{call_id}",
        "call_id": call_id,
        "name": name,
        "arguments": json.dumps(arguments),
        "status": "completed",
    }


def message_item(text: str) -> dict[str, Any]:
    """A Responses API output item with assistant text."""
    return {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


HANG = 0  # a fault kind: no answer, the connection is dropped after `hang_seconds`
CLIENT_GONE = 499  # recorded when the client hung up before its answer was ready (nginx's 499)


@dataclass
class RecordedRequest:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    # the status answered; HANG when dropped, CLIENT_GONE when nobody was left to answer
    status: int | None = None


@dataclass
class FakeOpenAI:
    respond: Responder = field(default=lambda body: text_message("ok"))
    respond_responses: ResponsesResponder = field(default=lambda body: [message_item("ok")])
    requests: list[RecordedRequest] = field(default_factory=list)
    # when set, only these keys (Bearer) and model names are accepted, as OpenAI would
    api_keys: set[str] | None = None
    models: set[str] | None = None
    # when set, requests are recorded and then held until the test sets the event
    hold: asyncio.Event | None = None
    received: asyncio.Event = field(default_factory=asyncio.Event)
    # chaos: this share of requests fails with one of `fault_kinds` (statuses or HANG)
    fault_rate: float = 0.0
    fault_kinds: tuple[int, ...] = (500, 429, 503, HANG)
    hang_seconds: float = 5.0
    latency: float = 0.0  # seconds each answered request takes (a model thinks for a while)
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    _failures: deque[tuple[int, float | None]] = field(default_factory=deque)
    _runner: web.AppRunner | None = None
    base_url: str = ""

    def fail_next(self, status: int, *, times: int = 1, retry_after: float | None = 0.01) -> None:
        """Answer the next `times` requests with `status` (and a `retry-after` header if given)."""
        for _ in range(times):
            self._failures.append((status, retry_after))

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/responses", self._responses)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self.base_url

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _refusal(
        self, request: web.Request, body: dict[str, Any]
    ) -> tuple[RecordedRequest, web.Response | None]:
        recorded = RecordedRequest(request.path, dict(request.headers), body)
        self.requests.append(recorded)
        refused = await self._refused(request, body)
        if refused is not None:
            recorded.status = refused.status
        return recorded, refused

    async def _refused(self, request: web.Request, body: dict[str, Any]) -> web.Response | None:
        if request.headers.get("Authorization", "") == "":
            return _error(401, "invalid_request_error", "missing_api_key", None)
        key = request.headers.get("Authorization", "").removeprefix("Bearer ")
        if self.api_keys is not None and key not in self.api_keys:
            return _error(401, "invalid_request_error", "invalid_api_key", None)
        if self.models is not None and body.get("model") not in self.models:
            return _error(404, "invalid_request_error", "model_not_found", None)
        if self._failures:
            status, retry_after = self._failures.popleft()
            kind = {429: ("requests", "rate_limit_exceeded")}.get(status, ("server_error", None))
            return _error(status, kind[0], kind[1], retry_after)
        if self.fault_rate and self.rng.random() < self.fault_rate:
            fault = self.rng.choice(self.fault_kinds)
            if fault == HANG:
                await asyncio.sleep(self.hang_seconds)
                if request.transport is not None:
                    request.transport.close()  # dropped: the client sees no answer
                return web.Response(status=HANG)
            kind = {429: ("requests", "rate_limit_exceeded")}.get(fault, ("server_error", None))
            return _error(fault, kind[0], kind[1], 0.05 if fault == 429 else None)
        return None

    async def _responses(self, request: web.Request) -> web.Response:
        body = await request.json()
        recorded, refused = await self._refusal(request, body)
        if refused is not None:
            return refused
        recorded.status = 200
        output = self.respond_responses(body)
        input_tokens = len(json.dumps(body["input"])) // 4
        output_tokens = len(json.dumps(output)) // 4
        return web.json_response(
            {
                "id": f"resp_{len(self.requests)}",
                "object": "response",
                "created_at": 1_790_000_000,
                "model": body["model"],
                "status": "completed",
                "output": output,
                "parallel_tool_calls": True,
                "tool_choice": body.get("tool_choice", "auto"),
                "tools": body.get("tools", []),
                "usage": {
                    "input_tokens": input_tokens,
                    "output_tokens": output_tokens,
                    "total_tokens": input_tokens + output_tokens,
                    "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens_details": {"reasoning_tokens": 0},
                },
            }
        )

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        recorded, refused = await self._refusal(request, body)
        if refused is not None:
            return refused
        self.received.set()
        if self.hold is not None:
            await self.hold.wait()
        if self.latency:
            await asyncio.sleep(self.latency)
        message = self.respond(body)
        gone = request.transport is None or request.transport.is_closing()
        recorded.status = CLIENT_GONE if gone else 200
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        prompt_tokens = len(json.dumps(body["messages"])) // 4
        completion_tokens = len(json.dumps(message)) // 4
        usage = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
        if body.get("stream"):
            return await _sse(request, body, message, finish, usage)
        return web.json_response(
            {
                "id": f"chatcmpl-{len(self.requests)}",
                "object": "chat.completion",
                "created": 1_790_000_000,
                "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage,
            }
        )


async def _sse(
    request: web.Request,
    body: dict[str, Any],
    message: dict[str, Any],
    finish: str,
    usage: dict[str, int],
) -> web.StreamResponse:
    """The message as Chat Completions server-sent events: text and tool-call arguments in
    chunks, then the finish reason, the usage (when asked) and `[DONE]`."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    base = {
        "id": "chatcmpl-stream",
        "object": "chat.completion.chunk",
        "created": 1_790_000_000,
        "model": body["model"],
    }

    async def send(delta: dict[str, Any], finish_reason: str | None = None) -> None:
        chunk = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}
        await response.write(f"data: {json.dumps(chunk)}\n\n".encode())

    await send({"role": "assistant", "content": ""})
    text = message.get("content") or ""
    for i in range(0, len(text), 16):
        await send({"content": text[i : i + 16]})
    for index, call in enumerate(message.get("tool_calls") or []):
        arguments = call["function"]["arguments"]
        head = {
            "index": index,
            "id": call["id"],
            "type": "function",
            "function": {"name": call["function"]["name"], "arguments": ""},
        }
        await send({"tool_calls": [head]})
        for i in range(0, len(arguments), 16):
            piece = {"index": index, "function": {"arguments": arguments[i : i + 16]}}
            await send({"tool_calls": [piece]})
    await send({}, finish)
    if (body.get("stream_options") or {}).get("include_usage"):
        await response.write(
            f"data: {json.dumps({**base, 'choices': [], 'usage': usage})}\n\n".encode()
        )
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


def _error(status: int, type_: str, code: str | None, retry_after: float | None) -> web.Response:
    headers = {"retry-after": str(retry_after)} if retry_after is not None else {}
    message = {429: "Rate limit reached.", 401: "No API key.", 404: "No such model."}.get(
        status, "The server had an error."
    )
    return web.json_response(
        {"error": {"message": message, "type": type_, "param": None, "code": code}},
        status=status,
        headers=headers,
    )
