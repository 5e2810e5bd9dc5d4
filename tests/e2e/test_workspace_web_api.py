"""Web API conformance of the local workspace, through the real slack_sdk AsyncWebClient."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from flotilla.local_slack import Driver, InstalledApp, LocalWorkspace
from flotilla.local_slack.records import Channel, Person
from tests.e2e.conftest import client_for
from tests.e2e.spec_shapes import documented_errors, merged, recorded, unknown_keys


class World:
    def __init__(self, ws: LocalWorkspace) -> None:
        self.ws = ws
        self.alice: Person = ws.add_person("alice", admin=True)
        self.bob: Person = ws.add_person("bob")
        self.app: InstalledApp = ws.install_app(
            "Commander", scopes=["chat:write", "channels:history", "channels:read", "users:read"]
        )
        self.other: InstalledApp = ws.install_app("Writer", scopes=["chat:write"])
        self.general: Channel = ws.create_channel("general", [self.alice, self.bob, self.app])
        self.secret: Channel = ws.create_channel("secret", [self.alice], private=True)
        self.empty: Channel = ws.create_channel("empty", [self.alice])
        self.client: AsyncWebClient = client_for(ws, self.app.bot_token)


@pytest.fixture
def world(workspace: LocalWorkspace) -> World:
    return World(workspace)


async def error_of(method: str, call: Any) -> dict[str, Any]:
    """Await a failing call; check Slack's error format and that the error is documented."""
    with pytest.raises(SlackApiError) as info:
        await call
    data = info.value.response.data
    assert info.value.response.status_code == 200
    assert isinstance(data, dict) and data["ok"] is False
    assert data["error"] in documented_errors(method), data["error"]
    return data


MESSAGE_SAMPLE = merged(
    recorded("api/chat.postMessage.json")["message"],
    recorded("api/conversations.replies.json")["messages"][0],
    recorded("events/MessagePayload.json")["event"],  # user messages carry client_msg_id
)


async def test_auth_test_answers_the_bot_identity_in_the_recorded_shape(world: World) -> None:
    resp = await world.client.auth_test()
    assert resp["user_id"] == world.app.bot_user_id
    assert resp["bot_id"] == world.app.bot_id
    assert resp["team_id"] == world.ws.state.team_id
    assert unknown_keys(resp.data, recorded("api/auth.test.json")) == []


async def test_missing_and_wrong_tokens_are_not_authed_and_invalid_auth(world: World) -> None:
    no_token = AsyncWebClient(base_url=world.ws.api_url)
    assert (await error_of("auth.test", no_token.auth_test()))["error"] == "not_authed"
    bad = client_for(world.ws, "xoxb-not-a-real-token")
    assert (await error_of("auth.test", bad.auth_test()))["error"] == "invalid_auth"


async def test_form_and_json_bodies_and_query_args_are_all_accepted(world: World) -> None:
    headers = {"Authorization": f"Bearer {world.app.bot_token}"}
    async with aiohttp.ClientSession() as http:
        url = world.ws.api_url + "chat.postMessage"
        form = {"channel": world.general.id, "text": "as form"}
        async with http.post(url, data=form, headers=headers) as resp:
            assert (await resp.json())["ok"] is True
        async with http.post(url, json={**form, "text": "as json"}, headers=headers) as resp:
            assert (await resp.json())["ok"] is True
        async with http.get(
            world.ws.api_url + "auth.test", params={"token": world.app.bot_token}
        ) as r:
            assert (await r.json())["ok"] is True
        async with http.post(world.ws.api_url + "chat.nonsense", headers=headers) as r:
            assert (await r.json()) == {"ok": False, "error": "unknown_method"}
    texts = [m.text for m in world.ws.state.messages[world.general.id].values()]
    assert texts == ["as form", "as json"]


async def test_post_message_answers_channel_ts_and_message_in_slack_shape(world: World) -> None:
    blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": "*hi*"}}]
    meta = {"event_type": "plan_step", "event_payload": {"step": 1}}
    resp = await world.client.chat_postMessage(
        channel=world.general.id, text="hi", blocks=blocks, metadata=meta
    )
    msg = resp["message"]
    assert resp["channel"] == world.general.id and resp["ts"] == msg["ts"]
    assert msg["user"] == world.app.bot_user_id and msg["bot_id"] == world.app.bot_id
    assert msg["app_id"] == world.app.app_id and msg["bot_profile"]["name"] == "Commander"
    assert msg["team"] == world.ws.state.team_id and msg["metadata"] == meta
    assert msg["blocks"][0]["block_id"]  # Slack assigns block ids
    assert unknown_keys(resp.data, recorded("api/chat.postMessage.json")) == []


async def test_ts_is_strictly_increasing_and_slack_formatted(world: World) -> None:
    seen = []
    for i in range(30):
        resp = await world.client.chat_postMessage(channel=world.general.id, text=str(i))
        seen.append(resp["ts"])
    assert all(len(ts.split(".")[1]) == 6 for ts in seen)
    assert [float(t) for t in seen] == sorted(float(t) for t in seen)
    assert len(set(seen)) == len(seen)


@pytest.mark.filterwarnings("ignore:The top-level `text` argument is missing:UserWarning")
async def test_post_message_errors(world: World) -> None:
    c = world.client
    bad_meta: Any = "{"  # not JSON: slack_sdk passes strings through
    cases = [
        (c.chat_postMessage(channel="C0NOPE", text="x"), "channel_not_found"),
        (c.chat_postMessage(channel=world.secret.id, text="x"), "channel_not_found"),
        (c.chat_postMessage(channel=world.empty.id, text="x"), "not_in_channel"),
        (c.chat_postMessage(channel=world.general.id, text=""), "no_text"),
        (
            c.chat_postMessage(channel=world.general.id, text="x", metadata=bad_meta),
            "invalid_metadata_format",
        ),
    ]
    for call, expected in cases:
        assert (await error_of("chat.postMessage", call))["error"] == expected
    no_scope = client_for(world.ws, world.ws.install_app("Mute", scopes=["users:read"]).bot_token)
    data = await error_of(
        "chat.postMessage", no_scope.chat_postMessage(channel=world.general.id, text="x")
    )
    assert data["error"] == "missing_scope"
    assert data["needed"] == "chat:write" and data["provided"] == "users:read"


async def test_chat_write_public_posts_to_public_channels_without_joining(world: World) -> None:
    app = world.ws.install_app("Public", scopes=["chat:write", "chat:write.public"])
    client = client_for(world.ws, app.bot_token)
    assert (await client.chat_postMessage(channel=world.empty.id, text="hello"))["ok"]
    data = await error_of(
        "chat.postMessage", client.chat_postMessage(channel=world.secret.id, text="x")
    )
    assert data["error"] == "channel_not_found"


async def test_post_message_truncates_text_past_40000_characters(world: World) -> None:
    resp = await world.client.chat_postMessage(channel=world.general.id, text="x" * 40_005)
    assert len(resp["message"]["text"]) == 40_000


async def test_username_and_icon_need_chat_write_customize(world: World) -> None:
    plain = await world.client.chat_postMessage(
        channel=world.general.id, text="x", username="Writer", icon_emoji=":pen:"
    )
    assert "username" not in plain["message"] and plain["message"]["user"] == world.app.bot_user_id
    persona_app = world.ws.install_app("Persona", scopes=["chat:write", "chat:write.customize"])
    world.ws.invite(world.general, persona_app)
    persona = client_for(world.ws, persona_app.bot_token)
    resp = await persona.chat_postMessage(
        channel=world.general.id, text="x", username="Writer", icon_emoji=":pen:"
    )
    msg = resp["message"]
    assert msg["username"] == "Writer" and msg["icons"] == {"emoji": ":pen:"}
    assert msg["subtype"] == "bot_message" and msg["bot_id"] == persona_app.bot_id


async def test_thread_semantics(world: World, driver: Driver) -> None:
    parent = driver.post("alice", "general", "parent")
    c = world.client
    r1 = await c.chat_postMessage(channel=world.general.id, text="one", thread_ts=parent.ts)
    # A reply to a reply lands in the same thread.
    r2 = await c.chat_postMessage(channel=world.general.id, text="two", thread_ts=r1["ts"])
    assert r1["message"]["thread_ts"] == parent.ts == r2["message"]["thread_ts"]
    assert r1["message"]["parent_user_id"] == world.alice.id
    thread = await c.conversations_replies(channel=world.general.id, ts=parent.ts)
    texts = [m["text"] for m in thread["messages"]]
    assert texts == ["parent", "one", "two"]
    head = thread["messages"][0]
    assert head["reply_count"] == 2 and head["latest_reply"] == r2["ts"]
    assert head["reply_users"] == [world.app.bot_user_id] and head["thread_ts"] == parent.ts
    from_reply = await c.conversations_replies(channel=world.general.id, ts=r1["ts"])
    assert [m["text"] for m in from_reply["messages"]] == texts
    history = await c.conversations_history(channel=world.general.id)
    assert [m["text"] for m in history["messages"]] == ["parent"]  # replies stay in the thread
    shape = unknown_keys(thread["messages"][0], MESSAGE_SAMPLE)
    assert shape == []


async def test_reply_broadcast_also_shows_in_the_channel(world: World, driver: Driver) -> None:
    parent = driver.post("alice", "general", "parent")
    resp = await world.client.chat_postMessage(
        channel=world.general.id, text="done", thread_ts=parent.ts, reply_broadcast=True
    )
    assert resp["message"]["subtype"] == "thread_broadcast"
    history = await world.client.conversations_history(channel=world.general.id)
    assert [m["text"] for m in history["messages"]] == ["done", "parent"]


async def test_replies_and_history_pagination_and_metadata_flag(world: World) -> None:
    c = world.client
    meta = {"event_type": "t", "event_payload": {"n": 1}}
    parent = await c.chat_postMessage(channel=world.general.id, text="p", metadata=meta)
    for i in range(5):
        await c.chat_postMessage(channel=world.general.id, text=str(i), thread_ts=parent["ts"])
    page1 = await c.conversations_replies(channel=world.general.id, ts=parent["ts"], limit=3)
    assert page1["has_more"] is True and "metadata" not in page1["messages"][0]
    cursor = page1["response_metadata"]["next_cursor"]
    page2 = await c.conversations_replies(
        channel=world.general.id, ts=parent["ts"], limit=3, cursor=cursor, include_all_metadata=True
    )
    assert [m["text"] for m in page1["messages"] + page2["messages"]] == [
        "p",
        "0",
        "1",
        "2",
        "3",
        "4",
    ]
    assert page2["has_more"] is False and page2["response_metadata"]["next_cursor"] == ""
    full = await c.conversations_replies(
        channel=world.general.id, ts=parent["ts"], include_all_metadata=True
    )
    assert full["messages"][0]["metadata"] == meta
    hist = await c.conversations_history(channel=world.general.id, include_all_metadata=True)
    assert hist["messages"][0]["metadata"] == meta


async def test_read_errors(world: World) -> None:
    c = world.client
    assert (
        await error_of(
            "conversations.replies",
            c.conversations_replies(channel=world.general.id, ts="1.000001"),
        )
    )["error"] == "thread_not_found"
    assert (
        await error_of(
            "conversations.replies", c.conversations_replies(channel="C0NOPE", ts="1.000001")
        )
    )["error"] == "channel_not_found"
    assert (
        await error_of("conversations.history", c.conversations_history(channel=world.empty.id))
    )["error"] == "not_in_channel"
    assert (await error_of("users.info", c.users_info(user="U0NOPE")))["error"] == "user_not_found"
    writer = client_for(world.ws, world.other.bot_token)
    data = await error_of("conversations.info", writer.conversations_info(channel=world.general.id))
    assert data["error"] == "missing_scope" and data["needed"] == "channels:read"


async def test_update_and_delete(world: World, driver: Driver) -> None:
    c = world.client
    posted = await c.chat_postMessage(channel=world.general.id, text="draft")
    updated = await c.chat_update(channel=world.general.id, ts=posted["ts"], text="final")
    assert updated["text"] == "final" and updated["ts"] == posted["ts"]
    assert updated["message"]["edited"]["user"] == world.app.bot_user_id
    assert unknown_keys(updated.data, recorded("api/chat.update.json")) == []
    person_msg = driver.post("alice", "general", "mine")
    cases = [
        (
            c.chat_update(channel=world.general.id, ts=person_msg.ts, text="x"),
            "cant_update_message",
        ),
        (c.chat_update(channel=world.general.id, ts="1.000002", text="x"), "message_not_found"),
        (
            c.chat_update(channel=world.general.id, ts=posted["ts"], text="y" * 40_001),
            "msg_too_long",
        ),
    ]
    for call, expected in cases:
        assert (await error_of("chat.update", call))["error"] == expected
    assert (
        await error_of("chat.delete", c.chat_delete(channel=world.general.id, ts=person_msg.ts))
    )["error"] == "cant_delete_message"
    deleted = await c.chat_delete(channel=world.general.id, ts=posted["ts"])
    assert deleted["ts"] == posted["ts"]
    assert (
        await error_of("chat.delete", c.chat_delete(channel=world.general.id, ts=posted["ts"]))
    )["error"] == "message_not_found"


async def test_deleting_a_parent_with_replies_leaves_a_tombstone(world: World) -> None:
    c = world.client
    parent = await c.chat_postMessage(channel=world.general.id, text="parent")
    await c.chat_postMessage(channel=world.general.id, text="reply", thread_ts=parent["ts"])
    await c.chat_delete(channel=world.general.id, ts=parent["ts"])
    thread = await c.conversations_replies(channel=world.general.id, ts=parent["ts"])
    assert thread["messages"][0]["subtype"] == "tombstone"
    assert [m["text"] for m in thread["messages"][1:]] == ["reply"]


async def test_post_ephemeral(world: World, driver: Driver) -> None:
    resp = await world.client.chat_postEphemeral(
        channel=world.general.id, user=world.bob.id, text="psst"
    )
    assert unknown_keys(resp.data, recorded("api/chat.postEphemeral.json")) == []
    assert [e.text for e in driver.ephemerals("bob")] == ["psst"]
    assert driver.ephemerals("alice") == []
    outsider = world.ws.add_person("carol")
    data = await error_of(
        "chat.postEphemeral",
        world.client.chat_postEphemeral(channel=world.general.id, user=outsider.id, text="x"),
    )
    assert data["error"] == "user_not_in_channel"


async def test_conversations_info_members_and_users_info(world: World) -> None:
    c = world.client
    info = await c.conversations_info(channel=world.general.id, include_num_members=True)
    assert info["channel"]["name"] == "general" and info["channel"]["num_members"] == 3
    assert unknown_keys(info.data, recorded("api/conversations.info.json")) == []
    members = await c.conversations_members(channel=world.general.id, limit=2)
    rest = await c.conversations_members(
        channel=world.general.id, cursor=members["response_metadata"]["next_cursor"]
    )
    assert members["members"] + rest["members"] == [
        world.alice.id,
        world.bob.id,
        world.app.bot_user_id,
    ]
    user = await c.users_info(user=world.alice.id)
    assert user["user"]["is_admin"] is True and user["user"]["name"] == "alice"
    assert unknown_keys(user.data, recorded("api/users.info.json")) == []
    bot = await c.users_info(user=world.app.bot_user_id)
    assert bot["user"]["is_bot"] is True and bot["user"]["profile"]["bot_id"] == world.app.bot_id
