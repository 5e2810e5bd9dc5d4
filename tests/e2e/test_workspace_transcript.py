"""The transcript renderer and the driver's await conditions."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from flotilla.local_slack import Driver, LocalWorkspace
from flotilla.local_slack.transcript import render_view
from tests.e2e.conftest import client_for


def plain(text: str) -> dict[str, str]:
    return {"type": "plain_text", "text": text}


async def test_a_thread_reads_as_a_person_sees_it(
    workspace: LocalWorkspace, driver: Driver
) -> None:
    alice = workspace.add_person("alice")
    app = workspace.install_app("Commander", scopes=["chat:write", "chat:write.customize"])
    channel = workspace.create_channel("launch", [alice, app])
    client = client_for(workspace, app.bot_token)
    parent = driver.post(
        "alice", "launch", f"<@{app.bot_user_id}> plan the launch in <#{channel.id}>"
    )
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": plain("Plan: launch")},
        {
            "type": "section",
            "text": {"type": "mrkdwn", "text": f"Owner <@{alice.id}>"},
            "fields": [plain("Step 1"), plain("Step 2")],
        },
        {"type": "context", "elements": [{"type": "mrkdwn", "text": "2 steps"}]},
        {"type": "divider"},
        {
            "type": "actions",
            "elements": [
                {"type": "button", "action_id": "ok", "text": plain("Approve"), "style": "primary"},
                {"type": "button", "action_id": "no", "text": plain("Cancel")},
            ],
        },
    ]
    card = await client.chat_postMessage(
        channel=channel.id, thread_ts=parent.ts, text="Plan", blocks=blocks
    )
    await client.chat_postMessage(
        channel=channel.id, thread_ts=parent.ts, text="Found 3 sources", username="Researcher"
    )
    await client.chat_update(channel=channel.id, ts=card["ts"], text="Plan", blocks=blocks[:2])
    text = driver.transcript("launch", parent.ts)
    lines = text.splitlines()
    assert lines[0] == f"#launch thread {parent.ts}"
    assert lines[1].startswith("alice  ")
    assert lines[2] == "  @commander plan the launch in #launch"
    assert lines[3].startswith("    Commander APP  ") and lines[3].endswith("(edited)")
    assert lines[4:8] == [
        "      == Plan: launch ==",
        "      Owner @alice",
        "        Step 1",
        "        Step 2",
    ]
    assert lines[8].startswith("    Researcher APP  ") and lines[9] == "      Found 3 sources"
    # Before the edit the buttons showed as [Label]s.
    await client.chat_update(channel=channel.id, ts=card["ts"], text="Plan", blocks=blocks)
    assert "      [Approve] (primary) [Cancel]" in driver.transcript("launch", parent.ts)


async def test_a_modal_renders_its_fields_values_and_errors(
    workspace: LocalWorkspace, driver: Driver
) -> None:
    alice = workspace.add_person("alice")
    app = workspace.install_app("Forms")
    view = workspace.state.new_view(
        app,
        alice.id,
        {
            "type": "modal",
            "title": plain("New agent"),
            "submit": plain("Create"),
            "close": plain("Cancel"),
            "blocks": [
                {
                    "type": "input",
                    "block_id": "name",
                    "label": plain("Name"),
                    "element": {"type": "plain_text_input", "action_id": "v"},
                },
                {
                    "type": "input",
                    "block_id": "model",
                    "label": plain("Model"),
                    "optional": True,
                    "element": {
                        "type": "static_select",
                        "action_id": "v",
                        "options": [{"text": plain("Small"), "value": "s"}],
                    },
                },
            ],
        },
        None,
    )
    workspace.state.modal_stacks[(alice.id, app.app_id)] = [view.id]
    driver.fill("alice", {"name": "writer", "model": "Small"})
    view.errors = {"name": "Already taken"}
    assert render_view(workspace.state, view).splitlines() == [
        "┌ New agent ┐",
        "│ Name: [writer]",
        "│   ⚠ Already taken",
        "│ Model (optional): [Small]",
        "└ [Cancel] [Create]",
    ]


async def test_wait_for_wakes_on_a_state_change_and_times_out_with_the_transcript(
    workspace: LocalWorkspace, driver: Driver
) -> None:
    workspace.add_person("alice")
    workspace.add_person("bob")
    workspace.create_channel(
        "general",
        [workspace.state.person_named("alice").id, workspace.state.person_named("bob").id],
    )
    parent = driver.post("alice", "general", "anyone?")
    loop = asyncio.get_running_loop()
    # The replies arrive only after the wait has begun: it must wake on the change.
    loop.call_soon(lambda: driver.post("alice", "general", "still here", thread_ts=parent.ts))
    loop.call_soon(lambda: driver.post("bob", "general", "yes", thread_ts=parent.ts))
    reply = await driver.thread_has_message("general", parent.ts, from_="bob", timeout=5)
    assert reply.text == "yes" and reply.user == workspace.state.person_named("bob").id
    with pytest.raises(AssertionError) as info:
        await driver.thread_has_message("general", parent.ts, from_="carol", timeout=0.05)
    assert "no reply from @carol" in str(info.value) and "anyone?" in str(info.value)
    with pytest.raises(AssertionError, match="timed out waiting for nothing"):
        await driver.wait_for(lambda: False, 0.05, what="nothing")


async def test_a_person_sees_their_own_ephemeral_messages_in_the_thread(
    workspace: LocalWorkspace, driver: Driver
) -> None:
    alice, bob = workspace.add_person("alice"), workspace.add_person("bob")
    app = workspace.install_app("Commander")
    channel = workspace.create_channel("general", [alice, bob, app])
    parent = driver.post("alice", "general", "/admin things")
    await client_for(workspace, app.bot_token).chat_postEphemeral(
        channel=channel.id, user=bob.id, thread_ts=parent.ts, text="Only admins can do that."
    )
    assert "Only admins" not in driver.transcript("general", parent.ts, viewer="alice")
    seen = driver.transcript("general", parent.ts, viewer="bob")
    assert "Only admins can do that.\n      (only visible to you)" in seen


async def test_mrkdwn_reads_as_slack_shows_it_and_code_stays_as_typed(
    workspace: LocalWorkspace, driver: Driver
) -> None:
    alice = workspace.add_person("alice")
    app = workspace.install_app("Commander", scopes=["chat:write"])
    channel = workspace.create_channel("launch", [alice, app])
    client = client_for(workspace, app.bot_token)
    parent = driver.post("alice", "launch", "*Plan* for _today_ in <#" + channel.id + ">")
    section = {"type": "mrkdwn", "text": "1 ⏳ *Research pricing*  ·  <@" + alice.id + ">"}
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": section},
        {"type": "markdown", "text": "**Summary**: 2*3*4 &lt;b&gt; in `*code*`, step_1_output"},
        {"type": "section", "text": plain("*plain text keeps its stars*")},
    ]
    await client.chat_postMessage(channel=channel.id, thread_ts=parent.ts, text="x", blocks=blocks)
    lines = driver.transcript("launch", parent.ts).splitlines()
    assert lines[2] == "  Plan for today in #launch"
    assert lines[4:] == [
        "      1 ⏳ Research pricing  ·  @alice",
        "      Summary: 2*3*4 <b> in `*code*`, step_1_output",
        "      *plain text keeps its stars*",
    ]
