"""Events API delivery: envelope shape, slack_sdk's SignatureVerifier, retries with
X-Slack-Retry-* headers, deliberate duplicates, and who gets which event."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiohttp import web
from slack_sdk.signature import SignatureVerifier

from flotilla.local_slack import Driver, LocalWorkspace
from tests.e2e.conftest import Receiver, client_for
from tests.e2e.spec_shapes import merged, recorded, unknown_keys

EVENT_SAMPLE = merged(
    recorded("events/MessagePayload.json"),
    recorded("events/MessageBotPayload.json"),
    recorded("events/MessageThreadBroadcastPayload.json"),
    recorded("events/AppMentionPayload.json"),
    recorded("events/MessageChangedPayload.json"),
    recorded("events/MessageDeletedPayload.json"),
)


def bodies(rec: Receiver) -> list[dict[str, Any]]:
    return [json.loads(body) for _, body in rec.requests]


def events_of(rec: Receiver, kind: str) -> list[dict[str, Any]]:
    return [b["event"] for b in bodies(rec) if b["event"]["type"] == kind]


async def test_mention_is_delivered_signed_in_the_full_envelope(
    workspace: LocalWorkspace, driver: Driver, receiver: Receiver
) -> None:
    app = workspace.install_app("Commander", request_url=receiver.url)
    alice = workspace.add_person("alice")
    channel = workspace.create_channel("general", [alice, app])
    msg = driver.mention("alice", "general", app, "plan a launch")
    await driver.wait_for(lambda: len(receiver.requests) == 2, what="mention and message events")
    verifier = SignatureVerifier(app.signing_secret)
    for headers, body in receiver.requests:
        assert verifier.is_valid_request(body, headers)
        assert not SignatureVerifier("some-other-secret").is_valid_request(body, headers)
        assert headers["Content-Type"] == "application/json"
        assert "X-Slack-Retry-Num" not in headers
    mention = next(b for b in bodies(receiver) if b["event"]["type"] == "app_mention")
    assert mention["type"] == "event_callback" and mention["api_app_id"] == app.app_id
    assert mention["team_id"] == workspace.state.team_id and mention["event_id"].startswith("Ev")
    assert mention["authorizations"][0]["user_id"] == app.bot_user_id
    assert mention["authorizations"][0]["is_bot"] is True
    assert mention["is_ext_shared_channel"] is False and mention["event_context"]
    assert isinstance(mention["event_time"], int)
    event = mention["event"]
    assert event["user"] == alice.id and event["channel"] == channel.id and event["ts"] == msg.ts
    assert event["text"] == f"<@{app.bot_user_id}> plan a launch"
    for envelope in bodies(receiver):
        assert unknown_keys(envelope, EVENT_SAMPLE) == []


async def test_unanswered_events_are_retried_with_retry_headers(
    workspace: LocalWorkspace, driver: Driver, receiver: Receiver
) -> None:
    app = workspace.install_app("Commander", request_url=receiver.url, bot_events=["app_mention"])
    alice = workspace.add_person("alice")
    workspace.create_channel("general", [alice, app])
    receiver.statuses = [500, 404]  # fail twice, then 200
    driver.mention("alice", "general", app, "hello")
    await driver.wait_for(lambda: len(receiver.requests) == 3, what="two retries")
    heads = [h for h, _ in receiver.requests]
    assert [h.get("X-Slack-Retry-Num") for h in heads] == [None, "1", "2"]
    assert [h.get("X-Slack-Retry-Reason") for h in heads] == [None, "http_error", "http_error"]
    ids = {b["event_id"] for b in bodies(receiver)}
    assert len(ids) == 1  # a retry is the same event
    delivery = workspace.events.deliveries[0]
    await driver.wait_for(lambda: delivery.acked, what="third attempt acked")
    assert [a.status for a in delivery.attempts] == [500, 404, 200]


async def test_slow_answers_are_retried_as_http_timeout(
    workspace: LocalWorkspace, driver: Driver
) -> None:
    seen: list[dict[str, str]] = []
    release = asyncio.Event()

    async def slow_then_fast(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        workspace.state.changed()
        if len(seen) == 1:
            await release.wait()  # hold the first request past the ack timeout
        return web.Response(status=200)

    runner = web.AppRunner(web.Application(), access_log=None)
    runner.app.router.add_post("/events", slow_then_fast)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/events"
        app = workspace.install_app("Slow", request_url=url, bot_events=["app_mention"])
        alice = workspace.add_person("alice")
        workspace.create_channel("general", [alice, app])
        driver.mention("alice", "general", app, "hello")
        await driver.wait_for(lambda: len(seen) == 2, what="a retry after the timeout")
        assert seen[1]["X-Slack-Retry-Num"] == "1"
        assert seen[1]["X-Slack-Retry-Reason"] == "http_timeout"
        release.set()
    finally:
        release.set()
        await runner.cleanup()


async def test_duplicate_delivery_sends_the_same_event_twice(
    workspace: LocalWorkspace, driver: Driver, receiver: Receiver
) -> None:
    app = workspace.install_app("Commander", request_url=receiver.url, bot_events=["app_mention"])
    alice = workspace.add_person("alice")
    workspace.create_channel("general", [alice, app])
    workspace.events.duplicates = 1
    driver.mention("alice", "general", app, "hello")
    await driver.wait_for(lambda: len(receiver.requests) == 2, what="the duplicate")
    first, second = bodies(receiver)
    assert first == second


async def test_bot_messages_reach_members_with_bot_fields_and_metadata_by_scope(
    workspace: LocalWorkspace, driver: Driver, receiver: Receiver
) -> None:
    listener = workspace.install_app(
        "Listener",
        request_url=receiver.url,
        scopes=["chat:write", "channels:history", "app_mentions:read", "metadata.message:read"],
        bot_events=["message.channels", "app_mention"],
    )
    writer = workspace.install_app("Writer", scopes=["chat:write", "chat:write.customize"])
    alice = workspace.add_person("alice")
    channel = workspace.create_channel("general", [alice, listener, writer])
    parent = driver.post("alice", "general", "start")
    client = client_for(workspace, writer.bot_token)
    meta = {"event_type": "step_done", "event_payload": {"step": "s1"}}
    await client.chat_postMessage(
        channel=channel.id,
        text=f"<@{listener.bot_user_id}> done",
        thread_ts=parent.ts,
        metadata=meta,
        username="Researcher",
        icon_emoji=":mag:",
    )
    await driver.wait_for(lambda: len(receiver.requests) == 3, what="message, reply, mention")
    messages = events_of(receiver, "message")
    reply = messages[1]
    assert reply["bot_id"] == writer.bot_id and reply["subtype"] == "bot_message"
    assert reply["username"] == "Researcher" and reply["thread_ts"] == parent.ts
    assert reply["parent_user_id"] == alice.id and reply["metadata"] == meta
    mention = events_of(receiver, "app_mention")[0]  # mentioned by another bot
    assert mention["bot_id"] == writer.bot_id and mention["thread_ts"] == parent.ts


async def test_no_metadata_without_the_scope_and_no_events_for_non_members(
    workspace: LocalWorkspace, driver: Driver, receiver: Receiver
) -> None:
    member = workspace.install_app(
        "Member", request_url=receiver.url, bot_events=["message.channels"]
    )
    outsider = workspace.install_app(
        "Outsider", request_url=receiver.url, bot_events=["message.channels"]
    )
    channel = workspace.create_channel("general", [member])
    client = client_for(workspace, member.bot_token)
    meta = {"event_type": "x", "event_payload": {}}
    await client.chat_postMessage(channel=channel.id, text="hello", metadata=meta)
    await driver.wait_for(lambda: len(receiver.requests) >= 1, what="the message event")
    assert all(b["api_app_id"] == member.app_id for b in bodies(receiver))
    assert "metadata" not in bodies(receiver)[0]["event"]
    assert outsider.app_id not in {d.app_id for d in workspace.events.deliveries}


async def test_edits_deletions_and_app_home_opened(
    workspace: LocalWorkspace, driver: Driver, receiver: Receiver
) -> None:
    app = workspace.install_app(
        "Home", request_url=receiver.url, bot_events=["message.channels", "app_home_opened"]
    )
    alice = workspace.add_person("alice")
    channel = workspace.create_channel("general", [alice, app])
    client = client_for(workspace, app.bot_token)
    posted = await client.chat_postMessage(channel=channel.id, text="v1")
    await client.chat_update(channel=channel.id, ts=posted["ts"], text="v2")
    await client.chat_delete(channel=channel.id, ts=posted["ts"])
    driver.open_app_home("alice", app)
    await driver.wait_for(lambda: len(receiver.requests) == 4, what="four events")
    kinds = [(b["event"]["type"], b["event"].get("subtype")) for b in bodies(receiver)]
    assert sorted(kinds, key=str) == sorted(
        [
            ("message", None),
            ("message", "message_changed"),
            ("message", "message_deleted"),
            ("app_home_opened", None),
        ],
        key=str,
    )
    changed = next(
        e for e in events_of(receiver, "message") if e.get("subtype") == "message_changed"
    )
    assert changed["message"]["text"] == "v2" and changed["previous_message"]["text"] == "v1"
    home = events_of(receiver, "app_home_opened")[0]
    assert home["user"] == alice.id and home["tab"] == "home"


async def test_direct_messages_reach_the_app_as_message_im(
    workspace: LocalWorkspace, driver: Driver, receiver: Receiver
) -> None:
    app = workspace.install_app(
        "Commander", request_url=receiver.url, bot_events=["message.im", "app_home_opened"]
    )
    alice = workspace.add_person("alice")
    client = client_for(workspace, app.bot_token)
    opened = await client.conversations_open(users=alice.id, return_im=True)
    dm_id = opened["channel"]["id"]
    assert dm_id.startswith("D") and opened["channel"]["is_im"] is True
    assert (await client.conversations_open(users=alice.id))["channel"]["id"] == dm_id
    msg = driver.dm("alice", app, "hello there")
    driver.open_app_home("alice", app, tab="messages")
    await driver.wait_for(lambda: len(receiver.requests) == 2, what="message.im and home")
    message = events_of(receiver, "message")[0]
    assert message["channel"] == dm_id and message["channel_type"] == "im"
    assert message["ts"] == msg.ts
    home = events_of(receiver, "app_home_opened")[0]
    assert home["channel"] == dm_id and home["tab"] == "messages"
    posted = await client.chat_postMessage(channel=dm_id, text="hi alice")
    assert posted["channel"] == dm_id
    info = await client.conversations_info(channel=dm_id)
    assert info["channel"]["is_im"] is True


async def test_people_edit_and_delete_their_messages(
    workspace: LocalWorkspace, driver: Driver, receiver: Receiver
) -> None:
    app = workspace.install_app(
        "Commander", request_url=receiver.url, bot_events=["message.channels"]
    )
    alice = workspace.add_person("alice")
    workspace.create_channel("general", [alice, app])
    msg = driver.post("alice", "general", f"hi <@{app.bot_user_id}>, see <https://example.com>")
    driver.edit("alice", msg, "hello")
    driver.delete("alice", msg)
    await driver.wait_for(lambda: len(receiver.requests) == 3, what="posted, changed, deleted")
    posted, changed, deleted = sorted(
        events_of(receiver, "message"), key=lambda e: e.get("subtype") or ""
    )
    elements = posted["blocks"][0]["elements"][0]["elements"]
    assert [e["type"] for e in elements] == ["text", "user", "text", "link"]
    assert posted["client_msg_id"] and posted["user"] == alice.id
    assert (
        changed["message"]["text"] == "hello" and changed["message"]["edited"]["user"] == alice.id
    )
    assert deleted["deleted_ts"] == msg.ts
    with pytest.raises(PermissionError):
        driver.edit(workspace.add_person("bob"), msg, "hijack")
