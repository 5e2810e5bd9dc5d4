"""A minimal Bolt AsyncApp (defined here, not Flotilla's) served over HTTP on loopback runs
unchanged against the local workspace: it answers a mention in a thread, opens a modal from a
button within the trigger window, gets validation errors shown, and survives a 429."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond, AsyncSay
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient

from flotilla.local_slack import Driver, InstalledApp, LocalWorkspace
from flotilla.local_slack.transcript import render_thread, render_view
from tests.e2e.conftest import serve_bolt_app

SCOPES = ["chat:write", "app_mentions:read", "channels:history", "commands", "users:read"]
EVENTS = ["app_mention", "app_home_opened"]


def tiny_app(installed: InstalledApp, client: AsyncWebClient) -> AsyncApp:
    app = AsyncApp(client=client, signing_secret=installed.signing_secret)

    @app.event("app_mention")
    async def on_mention(event: dict[str, Any], say: AsyncSay) -> None:
        thread_ts = event.get("thread_ts") or event["ts"]
        blocks: list[dict[str, Any]] = [
            {"type": "section", "text": {"type": "mrkdwn", "text": "Want a ticket?"}},
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "button",
                        "action_id": "open_form",
                        "text": {"type": "plain_text", "text": "Open form"},
                        "value": thread_ts,
                    }
                ],
            },
        ]
        await say(text="Want a ticket?", blocks=blocks, thread_ts=thread_ts)
        if "twice" in event["text"]:
            await say(text="second", thread_ts=thread_ts)

    @app.action("open_form")
    async def on_open(ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient) -> None:
        await ack()
        meta = json.dumps(
            {"channel": body["channel"]["id"], "thread_ts": body["actions"][0]["value"]}
        )
        await client.views_open(
            trigger_id=body["trigger_id"],
            view={
                "type": "modal",
                "callback_id": "ticket",
                "private_metadata": meta,
                "title": {"type": "plain_text", "text": "New ticket"},
                "submit": {"type": "plain_text", "text": "Create"},
                "blocks": [
                    {
                        "type": "input",
                        "block_id": "title_block",
                        "label": {"type": "plain_text", "text": "Title"},
                        "element": {"type": "plain_text_input", "action_id": "title"},
                    }
                ],
            },
        )

    @app.view("ticket")
    async def on_submit(ack: AsyncAck, view: dict[str, Any], client: AsyncWebClient) -> None:
        title = view["state"]["values"]["title_block"]["title"]["value"]
        if len(title) < 5:
            await ack(response_action="errors", errors={"title_block": "At least 5 characters"})
            return
        await ack()
        meta = json.loads(view["private_metadata"])
        await client.chat_postMessage(
            channel=meta["channel"], thread_ts=meta["thread_ts"], text=f"Created ticket: {title}"
        )

    @app.command("/ticket")
    async def on_command(ack: AsyncAck, command: dict[str, Any], respond: AsyncRespond) -> None:
        await ack(f"Filing {command['text']}…")
        await respond(response_type="in_channel", text=f"Ticket filed: {command['text']}")

    @app.event("app_home_opened")
    async def on_home(event: dict[str, Any], client: AsyncWebClient) -> None:
        await client.views_publish(
            user_id=event["user"],
            view={
                "type": "home",
                "blocks": [
                    {"type": "header", "text": {"type": "plain_text", "text": "Your tickets"}}
                ],
            },
        )

    return app


@dataclass
class Running:
    installed: InstalledApp
    client: AsyncWebClient
    channel: str


@pytest.fixture
async def running(workspace: LocalWorkspace) -> AsyncIterator[Running]:
    installed = workspace.install_app(
        "TinyBot", scopes=SCOPES, bot_events=EVENTS, commands={"/ticket": None}
    )
    alice = workspace.add_person("alice")
    channel = workspace.create_channel("general", [alice, installed])
    client = AsyncWebClient(token=installed.bot_token, base_url=workspace.api_url)
    client.retry_handlers.append(AsyncRateLimitErrorRetryHandler(max_retry_count=2))
    async with serve_bolt_app(workspace, tiny_app(installed, client), installed):
        yield Running(installed, client, channel.id)


async def test_bolt_app_answers_a_mention_in_the_thread(running: Running, driver: Driver) -> None:
    parent = driver.post("alice", "general", "we need a ticket for the outage")
    driver.mention("alice", "general", running.installed, "help", thread_ts=parent.ts)
    reply = await driver.thread_has_message("general", parent.ts, from_="tinybot")
    assert reply.bot_id == running.installed.bot_id and reply.thread_ts == parent.ts
    assert "[Open form]" in render_thread(driver.state, reply.channel, parent.ts)
    # Bolt called auth.test lazily, then chat.postMessage
    assert ("auth.test", "ok") in driver.ws.api_log and (
        "chat.postMessage",
        "ok",
    ) in driver.ws.api_log


async def test_bolt_app_opens_a_modal_and_shows_validation_errors(
    running: Running, driver: Driver
) -> None:
    msg = driver.mention("alice", "general", running.installed, "ticket please")
    reply = await driver.thread_has_message("general", msg.ts, from_="tinybot", containing="ticket")
    delivery = await driver.click("alice", reply, "open_form")
    assert delivery.acked
    await driver.wait_for(
        lambda: driver.state.top_modal(driver.person("alice").id) is not None,
        what="the modal to open",
    )
    assert ("views.open", "ok") in driver.ws.api_log

    outcome = await driver.submit("alice", {"title": "abc"})
    assert outcome.response_action == "errors"
    assert outcome.errors == {"title_block": "At least 5 characters"}
    view = driver.open_view("alice")  # still open, error shown next to the field
    assert "⚠ At least 5 characters" in render_view(driver.state, view)

    outcome = await driver.submit("alice", {"title": "Database failover"})
    assert outcome.view is None  # closed
    await driver.thread_has_message(
        "general", msg.ts, from_="tinybot", containing="Created ticket: Database failover"
    )


async def test_bolt_app_survives_a_429_with_the_retry_handler(
    running: Running, driver: Driver, workspace: LocalWorkspace
) -> None:
    workspace.rate_limiter.enabled = True
    workspace.rate_limiter.channel_burst = 1
    msg = driver.mention("alice", "general", running.installed, "say it twice")
    await driver.thread_has_message("general", msg.ts, from_="tinybot", containing="second")
    assert ("chat.postMessage", running.channel) in workspace.rate_limiter.limited
    texts = [m.text for m in driver.thread("general", msg.ts)[1:]]
    assert texts == ["Want a ticket?", "second"]


async def test_bolt_app_answers_a_slash_command_through_its_response_url(
    running: Running, driver: Driver
) -> None:
    delivery = await driver.slash_command("alice", "general", "/ticket", "printer on fire")
    assert delivery.acked
    assert [e.text for e in driver.ephemerals("alice")] == ["Filing printer on fire…"]
    await driver.wait_for(
        lambda: any(
            m.text == "Ticket filed: printer on fire"
            for m in driver.state.messages[running.channel].values()
        ),
        what="the in_channel response",
    )


async def test_bolt_app_publishes_its_home_tab_when_opened(
    running: Running, driver: Driver
) -> None:
    driver.open_app_home("alice", running.installed)
    await driver.wait_for(lambda: driver.home("alice", running.installed) is not None, what="home")
    home = driver.home("alice", running.installed)
    assert home is not None and "Your tickets" in render_view(driver.state, home)
