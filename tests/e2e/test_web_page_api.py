"""The browser page's HTTP side without a browser: the page and its files, what a person
sees as JSON, the Server-Sent Events stream, and actions refused with a sentence."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from flotilla.local_slack import Driver, LocalWorkspace
from flotilla.local_slack.records import Channel, InstalledApp, Person
from tests.e2e.conftest import Receiver
from tests.fakes.clock import FakeClock


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def populate(ws: LocalWorkspace, url: str) -> tuple[Person, Person, InstalledApp, Channel]:
    alice, bob = ws.add_person("alice"), ws.add_person("bob")
    app = ws.install_app("TinyBot", request_url=url, commands={"/tiny": None})
    channel = ws.create_channel("general", [alice, bob, app])
    ws.create_channel("secret", [bob], private=True)
    return alice, bob, app, channel


async def act(http: aiohttp.ClientSession, ws: LocalWorkspace, **body: Any) -> dict[str, Any]:
    async with http.post(ws.page_url + "act", json=body) as response:
        answer: dict[str, Any] = await response.json()
        return answer


async def test_the_page_and_every_file_it_loads_are_served(
    workspace: LocalWorkspace, http: aiohttp.ClientSession
) -> None:
    async with http.get(workspace.page_url) as response:
        assert response.status == 200 and response.content_type == "text/html"
        html = await response.text()
    files = re.findall(r'(?:src|href)="(static/[^"]+)"', html)
    assert {"static/page.css", "static/page.js"} <= set(files)
    async with http.get(workspace.page_url + "static/page.js") as response:
        files += re.findall(r'from "\./([^"]+)"', await response.text())
    for name in files:
        path = name if name.startswith("static/") else f"static/{name}"
        async with http.get(workspace.page_url + path) as response:
            assert response.status == 200, path
    assert "https://" not in html  # nothing from the network: the page works offline


async def test_a_person_sees_their_channels_and_their_ephemeral_messages(
    workspace: LocalWorkspace, receiver: Receiver, http: aiohttp.ClientSession
) -> None:
    alice, bob, app, channel = populate(workspace, receiver.url)
    workspace.state.ephemerals.clear()
    async with http.get(workspace.page_url + "state", params={"user": "alice"}) as response:
        seen = await response.json()
    assert seen["me"] == alice.id
    assert [c["name"] for c in seen["channels"]] == ["general"]  # not bob's private channel
    assert {a["name"]: a["commands"] for a in seen["apps"]} == {"TinyBot": ["/tiny"]}
    async with http.get(workspace.page_url + "state", params={"user": "nobody"}) as response:
        assert response.status == 404


async def test_actions_reach_the_workspace_or_are_refused_with_a_sentence(
    workspace: LocalWorkspace, receiver: Receiver, http: aiohttp.ClientSession
) -> None:
    alice, _, app, channel = populate(workspace, receiver.url)
    posted = await act(
        http, workspace, type="post", user=alice.id, channel=channel.id, text="@TinyBot hello"
    )
    assert posted["ok"] is True
    message = workspace.state.messages[channel.id][posted["ts"]]
    assert message.text == f"<@{app.bot_user_id}> hello" and message.user == alice.id
    assert await act(http, workspace, type="post", user=alice.id, channel=channel.id, text=" ") == {
        "ok": False,
        "error": "Type a message first",
    }
    refused = await act(
        http, workspace, type="command", user=alice.id, channel=channel.id, command="/nope", text=""
    )
    assert refused == {"ok": False, "error": "/nope is not a valid command"}
    ran = await act(
        http,
        workspace,
        type="command",
        user=alice.id,
        channel=channel.id,
        command="/tiny",
        text="go",
    )
    assert ran == {"ok": True, "acked": True}
    form = dict(x.split("=", 1) for x in receiver.requests[-1][1].decode().split("&"))
    assert form["command"] == "%2Ftiny" and form["user_id"] == alice.id
    async with http.post(workspace.page_url + "act", data=b"not json") as response:
        assert response.status == 415  # a form or text body: what another site could send
    bad = b"not json"
    headers = {"Content-Type": "application/json"}
    async with http.post(workspace.page_url + "act", data=bad, headers=headers) as response:
        assert response.status == 400
    unknown = await act(http, workspace, type="dance", user=alice.id)
    assert unknown == {"ok": False, "error": "Unknown action."}


async def test_a_required_field_left_empty_never_reaches_the_app(
    workspace: LocalWorkspace, receiver: Receiver, http: aiohttp.ClientSession
) -> None:
    alice, _, app, _ = populate(workspace, receiver.url)
    spec = {
        "type": "modal",
        "title": {"type": "plain_text", "text": "T"},
        "submit": {"type": "plain_text", "text": "Go"},
        "blocks": [
            {
                "type": "input",
                "block_id": "b",
                "label": {"type": "plain_text", "text": "Name"},
                "element": {"type": "plain_text_input", "action_id": "a"},
            }
        ],
    }
    view = workspace.state.new_view(app, alice.id, spec, None)
    workspace.state.modal_stacks[(alice.id, app.app_id)] = [view.id]
    seen = len(receiver.requests)
    answer = await act(
        http, workspace, type="submit", user=alice.id, view_id=view.id, values={"b": {"a": ""}}
    )
    assert answer == {"ok": True, "errors": {"b": "Please complete this required field."}}
    assert len(receiver.requests) == seen and view.errors == answer["errors"]
    sent = await act(
        http, workspace, type="submit", user=alice.id, view_id=view.id, values={"b": {"a": "Ada"}}
    )
    assert sent["ok"] is True and len(receiver.requests) == seen + 1
    assert view.state_values["b"]["a"] == {"type": "plain_text_input", "value": "Ada"}


async def read_event(stream: aiohttp.StreamReader) -> dict[str, Any]:
    """The next `state` event of a Server-Sent Events stream."""
    data = ""
    while True:
        line = (await stream.readline()).decode().rstrip("\n")
        if line.startswith("data: "):
            data = line[6:]
        elif line == "" and data:
            snapshot: dict[str, Any] = json.loads(data)
            return snapshot


async def test_the_stream_pushes_each_change_and_ends_when_the_workspace_stops(
    receiver: Receiver, http: aiohttp.ClientSession
) -> None:
    ws = LocalWorkspace()
    await ws.start("127.0.0.1", 0)
    alice, _, _, channel = populate(ws, receiver.url)
    response = await http.get(ws.page_url + "events", params={"user": alice.id})
    assert response.headers["Content-Type"] == "text/event-stream"
    async with asyncio.timeout(10):
        first = await read_event(response.content)
        assert first["messages"][channel.id] == []
        Driver(ws).post("alice", "general", "live!")
        second = await read_event(response.content)
    assert [m["text"] for m in second["messages"][channel.id]] == ["live!"]
    assert second["version"] > first["version"]
    async with asyncio.timeout(10):  # an open stream does not hold the server up
        await ws.stop()
    response.close()


async def test_status_lines_under_threads_and_what_ends_them(
    receiver: Receiver, http: aiohttp.ClientSession
) -> None:
    clock = FakeClock(datetime.fromtimestamp(1_000, UTC))
    ws = LocalWorkspace(clock=clock.time)
    await ws.start("127.0.0.1", 0)
    try:
        alice, _, app, channel = populate(ws, receiver.url)
        client = AsyncWebClient(token=app.bot_token, base_url=ws.api_url)
        root = Driver(ws).post("alice", "general", "help?")

        async def statuses() -> list[dict[str, Any]]:
            async with http.get(ws.page_url + "state", params={"user": "alice"}) as response:
                shown: list[dict[str, Any]] = (await response.json())["statuses"]
                return shown

        await client.assistant_threads_setStatus(
            channel_id=channel.id,
            thread_ts=root.ts,
            status="is thinking…",
            loading_messages=["Reading"],
            username="Helper",
        )
        assert await statuses() == [
            {
                "channel": channel.id,
                "thread_ts": root.ts,
                "text": "Helper is thinking…",
                "loading_messages": ["Reading"],
            }
        ]
        clock.advance(121)  # two minutes without a reply
        assert await statuses() == []
        await client.assistant_threads_setStatus(
            channel_id=channel.id, thread_ts=root.ts, status="is writing…"
        )
        assert [s["text"] for s in await statuses()] == ["TinyBot is writing…"]
        await client.assistant_threads_setStatus(
            channel_id=channel.id, thread_ts=root.ts, status=""
        )
        assert await statuses() == []

        too_many = [str(i) for i in range(11)]
        for channel_id, thread_ts, loading, error in [
            (channel.id, "1.000001", None, "invalid_thread_ts"),
            ("C0NOPE", root.ts, None, "channel_not_found"),
            (channel.id, root.ts, too_many, "invalid_arguments"),
        ]:
            with pytest.raises(SlackApiError) as refused:
                await client.assistant_threads_setStatus(
                    channel_id=channel_id, thread_ts=thread_ts, status="x", loading_messages=loading
                )
            assert refused.value.response["error"] == error
        reader = ws.install_app("Reader", scopes=["channels:history"], bot_events=[])
        ws.invite(channel, reader)
        reading = AsyncWebClient(token=reader.bot_token, base_url=ws.api_url)
        with pytest.raises(SlackApiError) as refused:
            await reading.assistant_threads_setStatus(
                channel_id=channel.id, thread_ts=root.ts, status="x"
            )
        assert refused.value.response["error"] == "missing_scope"
    finally:
        await ws.stop()
