"""Bad input gets a clear answer and loses nothing: forged or stale signatures, broken
payloads, oversized requests, malformed model plans."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable
from typing import Any

import aiohttp
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo
from slack_sdk.signature import SignatureVerifier

from flotilla.agents.running.offline import first_prompt
from flotilla.storage.conversations import find_conversation
from tests.e2e.slice.conftest import Run, scripted
from tests.e2e.slice.scripts import call, tools_of


def signed(secret: str, body: str, timestamp: int) -> dict[str, str]:
    base = f"v0:{timestamp}:{body}".encode()
    signature = "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {
        "X-Slack-Request-Timestamp": str(timestamp),
        "X-Slack-Signature": signature,
        "Content-Type": "application/json",
    }


def mention_body(run: Run, text: str) -> str:
    commander = run.stack.commander
    return json.dumps(
        {
            "token": commander.verification_token,
            "team_id": run.stack.workspace.state.team_id,
            "api_app_id": commander.app_id,
            "type": "event_callback",
            "event_id": "EvFORGED1",
            "event_time": int(time.time()),
            "event": {
                "type": "app_mention",
                "user": run.stack.people["maya"].id,
                "text": f"<@{commander.bot_user_id}> {text}",
                "ts": "1700000000.000100",
                "channel": run.stack.channel.id,
                "event_ts": "1700000000.000100",
            },
        }
    )


async def post(url: str, body: str, headers: dict[str, str]) -> tuple[int, str]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body, headers=headers) as response,
    ):
        return response.status, await response.text()


async def test_forged_and_stale_signatures_are_refused(start: Callable[..., Any]) -> None:
    async with start() as run:
        url = run.stack.commander.request_url or ""
        body = mention_body(run, "compare our pricing and draft a note")
        now = int(time.time())
        forged = signed("not-the-secret", body, now)
        stale = signed(run.stack.commander.signing_secret, body, now - 600)
        assert not SignatureVerifier(run.stack.commander.signing_secret).is_valid(
            body, forged["X-Slack-Request-Timestamp"], forged["X-Slack-Signature"]
        )
        for headers in (forged, stale, {"Content-Type": "application/json"}):
            status, _ = await post(url, body, headers)
            assert status == 401
        await run.quiesce()
        assert run.stack.workspace.state.thread(run.stack.channel.id, "1700000000.000100") == []
        assert run.service.executor.jobs == {} and not run.service.events.tasks
        async with run.service.db.read() as conn:
            assert (
                await find_conversation(
                    conn, run.service.team_id, run.stack.channel.id, "1700000000.000100"
                )
                is None
            )


async def test_broken_payloads_get_an_error_not_a_crash(start: Callable[..., Any]) -> None:
    async with start() as run:
        url = run.stack.commander.request_url or ""
        secret = run.stack.commander.signing_secret
        for body in ("{not json", json.dumps({"type": "event_callback"}), ""):
            status, text = await post(url, body, signed(secret, body, int(time.time())))
            assert 400 <= status < 500, (body, status, text)
        # still working afterwards
        root = run.ask("what time zone is the launch in?")
        await run.says(root, "[offline model]", from_="Flotilla")


async def test_an_oversized_request_is_declined_politely(start: Callable[..., Any]) -> None:
    async with start() as run:
        root = run.ask("compare " + "very " * 3000 + "carefully")
        answer = await run.says(root, "characters long; I can take up to")
        assert "shorten it" in answer.text
        await run.quiesce()
        assert "Plan (" not in run.transcript(root)


async def test_a_malformed_plan_from_the_model_is_explained_not_stored(
    start: Callable[..., Any],
) -> None:
    broken = [
        {"index": 1, "title": "Research", "assignee": "researcher", "input": "go", "wait_for": [2]},
        {
            "index": 2,
            "title": "Write",
            "assignee": "ghostwriter",
            "input": "{{step_9.output_summary}}",
            "status": "done",
        },
    ]

    def always_broken(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse | None:
        if "create_plan" in tools_of(info) and "BROKEN PLAN" in first_prompt(messages):
            return call("create_plan", {"steps": broken})  # however often it is told why
        return None

    async with start(model=scripted(always_broken)) as run:
        root = run.ask("BROKEN PLAN please")
        answer = await run.says(root, "could not", from_="Flotilla")
        await run.quiesce()
        conversation = await run.service.find_conversation(root.channel, root.ts)
        assert conversation is not None
        assert await run.service.reconciler.plan(conversation.id) is None
        assert "Plan (" not in run.transcript(root)
        # one sentence for people; the validator's list is for operators (the log) only
        assert "'status'" not in answer.text and "only the orchestrator" not in answer.text
        assert "What was still wrong" not in answer.text and "\n" not in answer.text
