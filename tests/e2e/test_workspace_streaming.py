"""chat.startStream / appendStream / stopStream through slack_sdk's own chat_stream helper,
and markdown_text on chat.postMessage."""

from __future__ import annotations

import pytest
from slack_sdk.errors import SlackApiError

from flotilla.local_slack import Driver, LocalWorkspace
from tests.e2e.conftest import Receiver, client_for
from tests.e2e.spec_shapes import documented_errors


async def test_a_streamed_reply_grows_then_is_final_with_blocks_and_metadata(
    workspace: LocalWorkspace, driver: Driver, receiver: Receiver
) -> None:
    alice = workspace.add_person("alice")
    app = workspace.install_app(
        "Commander", request_url=receiver.url, bot_events=["message.channels"]
    )
    channel = workspace.create_channel("general", [alice, app])
    parent = driver.post("alice", "general", "summarise please")
    client = client_for(workspace, app.bot_token)
    stream = await client.chat_stream(
        channel=channel.id,
        thread_ts=parent.ts,
        recipient_user_id=alice.id,
        recipient_team_id=workspace.state.team_id,
        buffer_size=5,
    )
    await stream.append(markdown_text="**Summary**: ")
    reply = driver.thread("general", parent.ts)[1]
    assert reply.streaming and reply.text == "**Summary**: "
    assert "(typing…)" in driver.transcript("general", parent.ts)
    await stream.append(markdown_text="three sources agree.")
    meta = {"event_type": "step_result", "event_payload": {"step": "s1"}}
    feedback = [{"type": "context", "elements": [{"type": "mrkdwn", "text": "Was this useful?"}]}]
    await stream.stop(blocks=feedback, metadata=meta)
    assert not reply.streaming and reply.text == "**Summary**: three sources agree."
    assert reply.blocks is not None and [b["type"] for b in reply.blocks] == ["markdown", "context"]
    assert reply.metadata == meta and reply.thread_ts == parent.ts
    await driver.wait_for(
        lambda: any(b"message_changed" in body for _, body in receiver.requests),
        what="message_changed when the stream stops",
    )
    with pytest.raises(SlackApiError) as info:
        await client.chat_appendStream(channel=channel.id, ts=reply.ts, markdown_text="more")
    assert info.value.response.data["error"] == "message_not_in_streaming_state"


async def test_stream_errors(workspace: LocalWorkspace, driver: Driver) -> None:
    alice = workspace.add_person("alice")
    app, other = workspace.install_app("One"), workspace.install_app("Two")
    channel = workspace.create_channel("general", [alice, app, other])
    client = client_for(workspace, app.bot_token)
    parent = driver.post("alice", "general", "go")
    with pytest.raises(SlackApiError) as info:
        await client.chat_startStream(channel=channel.id, thread_ts=parent.ts, markdown_text="x")
    assert info.value.response.data["error"] == "missing_recipient_user_id"
    started = await client.chat_startStream(
        channel=channel.id,
        thread_ts=parent.ts,
        recipient_user_id=alice.id,
        recipient_team_id=workspace.state.team_id,
    )
    cases = [
        (
            client_for(workspace, other.bot_token).chat_appendStream(
                channel=channel.id, ts=started["ts"], markdown_text="x"
            ),
            "message_not_owned_by_app",
        ),
        (
            client.chat_appendStream(channel=channel.id, ts="1.000001", markdown_text="x"),
            "message_not_found",
        ),
        (
            client.chat_appendStream(channel=channel.id, ts=started["ts"], markdown_text=""),
            "no_text",
        ),
    ]
    for call, expected in cases:
        with pytest.raises(SlackApiError) as info:
            await call
        data = info.value.response.data
        assert data["error"] == expected and expected in documented_errors("chat.appendStream")


async def test_post_message_markdown_text_becomes_a_markdown_block(
    workspace: LocalWorkspace,
) -> None:
    app = workspace.install_app("Md")
    channel = workspace.create_channel("general", [app])
    client = client_for(workspace, app.bot_token)
    resp = await client.chat_postMessage(channel=channel.id, markdown_text="**bold**")
    assert resp["message"]["blocks"][0]["type"] == "markdown"
    with pytest.raises(SlackApiError) as info:
        await client.chat_postMessage(channel=channel.id, markdown_text="**b**", text="b")
    assert info.value.response.data["error"] == "markdown_text_conflict"
