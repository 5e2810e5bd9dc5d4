"""The real provider path, end to end: model string -> real openai client -> loopback wire.

`OPENAI_BASE_URL` points the real `openai` client at a loopback fake that speaks both
OpenAI protocols: Chat Completions (the `openai-chat:` model; what OpenAI-compatible servers
speak) and the Responses API (the `openai:` model). The client's own retries (two,
honouring `retry-after`) absorb a 429 and a 500; when the errors persist the run fails with
a `TransientError`, and a 400 is a `PermanentError` without any retry.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic_ai import models as pydantic_ai_models

from flotilla.agents.core.errors import PermanentError, TransientError
from flotilla.agents.running.runtime import RunJob, StepRunResult, run_step
from flotilla.agents.tools.registry import AgentSpec
from flotilla.storage.db import Database
from tests.fakes.openai_server import (
    FakeOpenAI,
    function_call_item,
    message_item,
    text_message,
    tool_call_message,
)

SPEC = AgentSpec("researcher", "Researcher", "finds facts", "You research.", tools=("read_thread",))
FAKE_KEY = "sk-test-not-a-real-key"


@pytest.fixture
async def server(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[FakeOpenAI]:
    fake = FakeOpenAI()
    base_url = await fake.start()
    # real model requests are off for the suite; this test only talks to 127.0.0.1
    monkeypatch.setattr(pydantic_ai_models, "ALLOW_MODEL_REQUESTS", True)
    monkeypatch.setenv("OPENAI_BASE_URL", base_url)
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
    yield fake
    await fake.close()


def scripted(body: dict[str, Any]) -> dict[str, Any]:
    """Call read_thread first, then answer with the final_result tool."""
    last = body["messages"][-1]
    if last["role"] == "user":
        return tool_call_message("read_thread", {"last": 3}, "call_read")
    if last["role"] == "tool" and last["tool_call_id"] == "call_read":
        return tool_call_message(
            "final_result",
            {"message": "Acme: 10/seat.", "summary": "Acme charges 10 per seat."},
            "call_final",
        )
    return text_message("unexpected")


def scripted_responses(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The same script over the Responses API: read_thread, then final_result."""
    last = body["input"][-1]
    if last.get("role") == "user":
        return [function_call_item("read_thread", {"last": 3}, "call_read")]
    if last.get("type") == "function_call_output" and last["call_id"] == "call_read":
        answer = {"message": "Acme: 10/seat.", "summary": "Acme charges 10 per seat."}
        return [function_call_item("final_result", answer, "call_final")]
    return [message_item("unexpected")]


APIS = [
    pytest.param("openai-chat:gpt-test", "/v1/chat/completions", id="chat-completions"),
    pytest.param("openai:gpt-test", "/v1/responses", id="responses"),
]


def job(key: str) -> RunJob:
    return RunJob(run_key=key, team_id="T1", input="Find Acme's price", request="compare pricing")


async def test_a_run_with_tool_calls_goes_over_the_chat_completions_wire(
    db: Database, server: FakeOpenAI
) -> None:
    server.respond = scripted

    result = await run_step(db, job("wire:1"), SPEC, model="openai-chat:gpt-test")

    assert result == StepRunResult("Acme: 10/seat.", "Acme charges 10 per seat.", [])
    assert [r.path for r in server.requests] == ["/v1/chat/completions"] * 2
    first, second = server.requests[0].body, server.requests[1].body
    assert first["model"] == "gpt-test"
    assert {t["function"]["name"] for t in first["tools"]} >= {"read_thread", "final_result"}
    assert (
        first["messages"][0]["role"] == "system"
        and "You research." in first["messages"][0]["content"]
    )
    tool_result = second["messages"][-1]
    assert tool_result["role"] == "tool" and tool_result["tool_call_id"] == "call_read"
    assert server.requests[0].headers["Authorization"] == f"Bearer {FAKE_KEY}"


async def test_the_openai_model_goes_over_the_responses_api(
    db: Database, server: FakeOpenAI
) -> None:
    server.respond_responses = scripted_responses

    result = await run_step(db, job("wire:responses"), SPEC, model="openai:gpt-test")

    assert result == StepRunResult("Acme: 10/seat.", "Acme charges 10 per seat.", [])
    assert [r.path for r in server.requests] == ["/v1/responses"] * 2
    output = server.requests[1].body["input"][-1]
    assert output["type"] == "function_call_output" and output["call_id"] == "call_read"


@pytest.mark.parametrize(("model", "path"), APIS)
async def test_a_429_and_a_500_are_retried_by_the_client_within_the_run(
    db: Database, server: FakeOpenAI, model: str, path: str
) -> None:
    server.respond = scripted
    server.respond_responses = scripted_responses
    server.fail_next(429)
    server.fail_next(500)

    result = await run_step(db, job("wire:2"), SPEC, model=model)

    assert isinstance(result, StepRunResult) and result.summary == "Acme charges 10 per seat."
    assert {r.path for r in server.requests} == {path}
    # 429, 500, then the same first request succeeds; then the second model turn
    assert len(server.requests) == 4
    assert server.requests[0].body == server.requests[2].body


@pytest.mark.parametrize(("model", "path"), APIS)
@pytest.mark.parametrize("status", [429, 500])
async def test_a_persistent_429_or_500_is_a_transient_error_after_the_client_retries(
    db: Database, server: FakeOpenAI, status: int, model: str, path: str
) -> None:
    server.fail_next(status, times=10)

    with pytest.raises(TransientError) as raised:
        await run_step(db, job(f"wire:{status}"), SPEC, model=model)

    assert raised.value.retryable
    assert f"HTTP {status}" in str(raised.value)
    assert len(server.requests) == 3  # one attempt and the openai client's two retries
    assert {r.path for r in server.requests} == {path}
    assert FAKE_KEY not in str(raised.value)


async def test_a_400_is_a_permanent_error_without_retries(db: Database, server: FakeOpenAI) -> None:
    server.fail_next(400, times=5, retry_after=None)

    with pytest.raises(PermanentError):
        await run_step(db, job("wire:400"), SPEC, model="openai-chat:gpt-test")
    assert len(server.requests) == 1


async def test_an_endpoint_can_be_chosen_by_base_url_in_the_model_string(
    db: Database, server: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.respond = scripted
    monkeypatch.delenv("OPENAI_BASE_URL")
    monkeypatch.delenv("OPENAI_API_KEY")  # a local server needs no key

    result = await run_step(
        db, job("wire:url"), SPEC, model=f"openai-chat:llama3@{server.base_url}"
    )

    assert isinstance(result, StepRunResult)
    assert json.loads(json.dumps(server.requests[0].body))["model"] == "llama3"


@pytest.mark.parametrize(("model", "path"), APIS)
async def test_the_commander_plans_over_the_wire(
    db: Database, server: FakeOpenAI, model: str, path: str
) -> None:
    from flotilla.agents.running.commander import commander_turn

    steps = [
        {"index": 1, "title": "Research", "assignee": "researcher", "input": "{{request}}"},
        {
            "index": 2,
            "title": "Sum up",
            "assignee": "commander",
            "input": "{{step_1.output_summary}}",
        },
    ]

    def chat(body: dict[str, Any]) -> dict[str, Any]:
        if body["messages"][-1]["role"] == "user":
            return tool_call_message("create_plan", {"steps": steps}, "call_plan")
        return text_message("Planned.")

    def responses(body: dict[str, Any]) -> list[dict[str, Any]]:
        if body["input"][-1].get("role") == "user":
            return [function_call_item("create_plan", {"steps": steps}, "call_plan")]
        return [message_item("Planned.")]

    server.respond, server.respond_responses = chat, responses
    turn = await commander_turn(db, job("wire:commander"), [SPEC], model=model)

    assert turn.plan is not None and [s.wait_for for s in turn.plan.steps] == [[], [1]]
    assert turn.reply == "Planned."
    sent = server.requests[0].body["tools"]
    names = {t.get("name") or t["function"]["name"] for t in sent}
    assert names == {"reply", "create_plan"}
