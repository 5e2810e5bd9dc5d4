"""Interactivity and slash commands: payload shapes, trigger ids (once, 3 seconds), modal
stacks and hashes, response_action answers, response_url, App Home."""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp
import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from flotilla.local_slack import Driver, InstalledApp, LocalWorkspace, Message
from flotilla.local_slack.records import Person
from tests.e2e.conftest import Receiver, client_for
from tests.e2e.spec_shapes import recorded, unknown_keys
from tests.fakes.clock import FakeClock


@dataclass
class Setup:
    app: InstalledApp
    alice: Person
    channel: str
    client: AsyncWebClient
    clock: FakeClock


@pytest.fixture
def setup(workspace: LocalWorkspace, receiver: Receiver) -> Setup:
    clock = FakeClock(datetime.fromtimestamp(1_800_000_000, UTC))
    workspace.clock = clock.time  # the workspace's clock is `time.time` shaped
    app = workspace.install_app(
        "Forms", request_url=receiver.url, commands={"/ticket": None}, bot_events=[]
    )
    alice = workspace.add_person("alice")
    channel = workspace.create_channel("general", [alice, app])
    return Setup(app, alice, channel.id, client_for(workspace, app.bot_token), clock)


def plain(text: str) -> dict[str, str]:
    return {"type": "plain_text", "text": text}


BUTTONS = [
    {
        "type": "actions",
        "block_id": "acts",
        "elements": [
            {
                "type": "button",
                "action_id": "go",
                "text": plain("Go"),
                "value": "42",
                "style": "primary",
            },
            {
                "type": "static_select",
                "action_id": "pick",
                "placeholder": plain("Pick"),
                "options": [
                    {"text": plain("Red"), "value": "r"},
                    {"text": plain("Blue"), "value": "b"},
                ],
            },
        ],
    },
]


def modal(title: str = "Form", **extra: Any) -> dict[str, Any]:
    return {
        "type": "modal",
        "callback_id": "form",
        "title": plain(title),
        "submit": plain("Save"),
        "blocks": [
            {
                "type": "input",
                "block_id": "name",
                "label": plain("Name"),
                "element": {"type": "plain_text_input", "action_id": "name_input"},
            }
        ],
        **extra,
    }


def payload_of(receiver: Receiver, index: int = -1) -> dict[str, Any]:
    form = urllib.parse.parse_qs(receiver.requests[index][1].decode())
    return dict(json.loads(form["payload"][0]))


async def posted(s: Setup, driver: Driver) -> Message:
    resp = await s.client.chat_postMessage(channel=s.channel, text="pick", blocks=BUTTONS)
    msg = driver.state.message(s.channel, resp["ts"])
    assert msg is not None
    return msg


async def test_block_actions_payload_is_signed_form_encoded_and_in_slack_shape(
    setup: Setup, driver: Driver, receiver: Receiver
) -> None:
    msg = await posted(setup, driver)
    await driver.click("alice", msg, "go")
    await driver.click("alice", msg, "pick", value="Blue")
    headers, body = receiver.requests[0]
    assert headers["Content-Type"] == "application/x-www-form-urlencoded"
    assert SignatureVerifier(setup.app.signing_secret).is_valid_request(body, headers)
    click, pick = payload_of(receiver, 0), payload_of(receiver, 1)
    sample = recorded("app-backend/interactive-components/BlockActionPayload.json")
    assert unknown_keys(click, sample) == [] and unknown_keys(pick, sample) == []
    assert click["type"] == "block_actions" and click["user"]["id"] == setup.alice.id
    assert click["container"] == {
        "type": "message",
        "message_ts": msg.ts,
        "channel_id": setup.channel,
        "is_ephemeral": False,
    }
    action = click["actions"][0]
    assert (action["action_id"], action["block_id"], action["value"]) == ("go", "acts", "42")
    assert pick["actions"][0]["selected_option"] == {"text": plain("Blue"), "value": "b"}
    assert click["trigger_id"] and click["response_url"].startswith(driver.ws.base_url)


SIZES = [{"text": plain("S"), "value": "s"}, {"text": plain("L"), "value": "l"}]
MESSAGE_FORM: list[dict[str, Any]] = [
    {
        "type": "input",
        "block_id": "name",
        "label": plain("Name"),
        "element": {"type": "plain_text_input", "action_id": "value"},
    },
    {
        "type": "input",
        "block_id": "size",
        "label": plain("Size"),
        "optional": True,
        "element": {
            "type": "static_select",
            "action_id": "value",
            "placeholder": plain("Pick"),
            "options": SIZES,
        },
    },
    {
        "type": "input",
        "block_id": "notes",
        "label": plain("Notes"),
        "optional": True,
        "element": {
            "type": "plain_text_input",
            "action_id": "value",
            "multiline": True,
            "initial_value": "none",
        },
    },
    {
        "type": "actions",
        "block_id": "acts",
        "elements": [
            {"type": "button", "action_id": "send", "text": plain("Submit"), "value": "k"}
        ],
    },
]


async def test_a_click_in_a_message_carries_its_inputs_as_each_person_left_them(
    setup: Setup, driver: Driver, receiver: Receiver, workspace: LocalWorkspace
) -> None:
    """Slack sends a message's input blocks with a click in it, in `state.values`
    ({block_id: {action_id: entry}}): what this person typed or picked, else the initial
    value, else null. Nothing is sent while typing; another person's typing is their own."""
    resp = await setup.client.chat_postMessage(
        channel=setup.channel, text="form", blocks=MESSAGE_FORM
    )
    msg = driver.state.message(setup.channel, resp["ts"])
    assert msg is not None
    bob = workspace.add_person("bob")
    driver.type_into("bob", msg, {"name": "Bob's", "size": "L"})
    driver.type_into("alice", msg, {"name": "Ada"})
    assert receiver.requests == []  # typing sends nothing (no dispatch_action)
    await driver.click("alice", msg, "send")
    values = payload_of(receiver)["state"]["values"]
    assert values == {
        "name": {"value": {"type": "plain_text_input", "value": "Ada"}},
        "size": {"value": {"type": "static_select", "selected_option": None}},
        "notes": {"value": {"type": "plain_text_input", "value": "none"}},
    }
    await driver.click("alice", msg, "send", values={"size": "S"})  # typed before stays
    values = payload_of(receiver)["state"]["values"]
    assert values["name"]["value"]["value"] == "Ada"
    assert values["size"]["value"]["selected_option"] == {"text": plain("S"), "value": "s"}
    await driver.click(bob, msg, "send")
    assert payload_of(receiver)["state"]["values"]["name"]["value"]["value"] == "Bob's"
    with pytest.raises(LookupError):
        driver.type_into("alice", msg, {"nowhere": "x"})


async def test_trigger_id_is_valid_once_and_for_three_seconds(
    setup: Setup, driver: Driver, receiver: Receiver
) -> None:
    msg = await posted(setup, driver)
    await driver.click("alice", msg, "go")
    trigger = payload_of(receiver)["trigger_id"]
    setup.clock.advance(2.9)
    resp = await setup.client.views_open(trigger_id=trigger, view=modal())
    assert resp["view"]["id"].startswith("V") and resp["view"]["hash"]
    assert unknown_keys(resp.data, recorded("api/views.open.json")) == []
    with pytest.raises(SlackApiError) as reused:
        await setup.client.views_open(trigger_id=trigger, view=modal())
    assert reused.value.response.data["error"] == "exchanged_trigger_id"
    await driver.click("alice", msg, "go")
    setup.clock.advance(3.5)
    with pytest.raises(SlackApiError) as late:
        await setup.client.views_open(trigger_id=payload_of(receiver)["trigger_id"], view=modal())
    assert late.value.response.data["error"] == "expired_trigger_id"
    with pytest.raises(SlackApiError) as bogus:
        await setup.client.views_open(trigger_id="123.456.abc", view=modal())
    assert bogus.value.response.data["error"] == "invalid_trigger_id"


async def open_modal(s: Setup, driver: Driver, view: dict[str, Any]) -> dict[str, Any]:
    trigger = driver.state.issue_trigger(s.alice.id, s.app.app_id, driver.ws.clock())
    return dict((await s.client.views_open(trigger_id=trigger, view=view))["view"])


async def test_views_update_checks_the_hash_and_push_is_limited_to_three(
    setup: Setup, driver: Driver
) -> None:
    view = await open_modal(setup, driver, modal(external_id="ext-1"))
    updated = await setup.client.views_update(
        view_id=view["id"], hash=view["hash"], view=modal("Two")
    )
    assert updated["view"]["title"]["text"] == "Two" and updated["view"]["hash"] != view["hash"]
    assert unknown_keys(updated.data, recorded("api/views.update.json")) == []
    with pytest.raises(SlackApiError) as stale:
        await setup.client.views_update(view_id=view["id"], hash=view["hash"], view=modal("Three"))
    assert stale.value.response.data["error"] == "hash_conflict"
    with pytest.raises(SlackApiError) as missing:
        await setup.client.views_update(view_id="V0NOPE", view=modal())
    assert missing.value.response.data["error"] == "not_found"
    for n in (2, 3):
        trigger = driver.state.issue_trigger(setup.alice.id, setup.app.app_id, driver.ws.clock())
        pushed = await setup.client.views_push(trigger_id=trigger, view=modal(f"Level {n}"))
        assert pushed["view"]["root_view_id"] == view["id"]
    trigger = driver.state.issue_trigger(setup.alice.id, setup.app.app_id, driver.ws.clock())
    with pytest.raises(SlackApiError) as full:
        await setup.client.views_push(trigger_id=trigger, view=modal("Level 4"))
    assert full.value.response.data["error"] == "push_limit_reached"


async def test_view_submission_answers_errors_update_push_and_clear(
    setup: Setup, driver: Driver, receiver: Receiver
) -> None:
    await open_modal(setup, driver, modal(private_metadata="ctx"))
    receiver.answers = [
        json.dumps({"response_action": "errors", "errors": {"name": "Taken"}}),
        json.dumps({"response_action": "update", "view": modal("Updated")}),
        json.dumps({"response_action": "push", "view": modal("Pushed")}),
        json.dumps({"response_action": "clear"}),
    ]
    errors = await driver.submit("alice", {"name": "x"})
    assert errors.errors == {"name": "Taken"} and driver.open_view("alice").errors == {
        "name": "Taken"
    }
    submitted = payload_of(receiver)
    # The Java sample omits view.blocks and response_urls, which Slack's documented
    # view_submission payload (docs.slack.dev view-interactions-payload) carries.
    extra = unknown_keys(submitted, recorded("app-backend/views/ViewSubmissionPayload.json"))
    assert extra == ["/view/blocks", "/response_urls"]
    assert submitted["view"]["state"]["values"] == {
        "name": {"name_input": {"type": "plain_text_input", "value": "x"}}
    }
    assert submitted["view"]["private_metadata"] == "ctx"
    updated = await driver.submit("alice", {"name": "y"})
    assert updated.view is not None and updated.view.spec["title"]["text"] == "Updated"
    pushed = await driver.submit("alice", {"name": "z"})
    assert pushed.view is not None and pushed.view.previous_view_id == updated.view.id
    cleared = await driver.submit("alice", {"name": "w"})
    assert cleared.view is None and driver.state.top_modal(setup.alice.id) is None


async def test_required_fields_are_refused_before_submission(setup: Setup, driver: Driver) -> None:
    await open_modal(setup, driver, modal())
    with pytest.raises(ValueError, match="'Name' is required"):
        await driver.submit("alice", {})


async def test_view_closed_is_sent_only_with_notify_on_close(
    setup: Setup, driver: Driver, receiver: Receiver
) -> None:
    await open_modal(setup, driver, modal())
    assert await driver.close_modal("alice") is None
    await open_modal(setup, driver, modal(notify_on_close=True))
    delivery = await driver.close_modal("alice")
    assert delivery is not None and delivery.acked
    closed = payload_of(receiver)
    assert closed["type"] == "view_closed" and closed["is_cleared"] is False
    extra = unknown_keys(closed, recorded("app-backend/views/ViewClosedPayload.json"))
    assert extra == ["/view/blocks"]  # omitted by the Java sample, sent by Slack


async def test_slash_command_form_and_response_url(
    setup: Setup, driver: Driver, receiver: Receiver, workspace: LocalWorkspace
) -> None:
    receiver.answers = [json.dumps({"text": "Working on it"})]
    delivery = await driver.slash_command("alice", "general", "/ticket", "outage")
    headers, body = receiver.requests[-1]
    assert SignatureVerifier(setup.app.signing_secret).is_valid_request(body, headers)
    form = {k: v[0] for k, v in urllib.parse.parse_qs(body.decode()).items()}
    assert set(form) <= set(recorded("app-backend/slash-commands/SlashCommandPayload.json"))
    assert (form["command"], form["text"], form["user_id"]) == ("/ticket", "outage", setup.alice.id)
    assert delivery.acked and [e.text for e in driver.ephemerals("alice")] == ["Working on it"]
    async with aiohttp.ClientSession() as http:
        answer = {"response_type": "in_channel", "text": "Ticket T-1 created"}
        async with http.post(form["response_url"], json=answer) as resp:
            assert resp.status == 200
        history = await setup.client.conversations_history(channel=setup.channel)
        assert history["messages"][0]["text"] == "Ticket T-1 created"
        async with http.post(workspace.base_url + "respond/nope", json=answer) as resp:
            assert resp.status == 404


async def test_response_url_replaces_the_original_message(
    setup: Setup, driver: Driver, receiver: Receiver
) -> None:
    msg = await posted(setup, driver)
    await driver.click("alice", msg, "go")
    async with aiohttp.ClientSession() as http:
        body = {"replace_original": True, "text": "Chosen: Go"}
        async with http.post(payload_of(receiver)["response_url"], json=body) as resp:
            assert resp.status == 200
    assert msg.text == "Chosen: Go" and msg.blocks is None and msg.edited


async def test_a_response_url_replacing_a_threaded_message_with_blocks_keeps_what_slack_keeps(
    setup: Setup, driver: Driver, receiver: Receiver
) -> None:
    """The message keeps its ts, author, thread and metadata, shows the new text and blocks
    (to the API too), and loses its inputs; the url works 5 times, then says used_url."""
    root = await setup.client.chat_postMessage(channel=setup.channel, text="ticket")
    meta = {"event_type": "form", "event_payload": {"key": "k"}}
    resp = await setup.client.chat_postMessage(
        channel=setup.channel,
        thread_ts=root["ts"],
        text="form",
        blocks=MESSAGE_FORM,
        metadata=meta,
    )
    msg = driver.state.message(setup.channel, resp["ts"])
    assert msg is not None
    author = (msg.user, msg.bot_id, msg.app_id)
    await driver.click("alice", msg, "send", values={"name": "Ada"})
    url = payload_of(receiver)["response_url"]
    answered = [{"type": "section", "text": {"type": "mrkdwn", "text": "✅ Answered: Ada"}}]
    async with aiohttp.ClientSession() as http:
        body = {"replace_original": True, "text": "Answered: Ada", "blocks": answered}
        async with http.post(url, json=body) as reply:
            assert reply.status == 200 and (await reply.json()) == {"ok": True}
        assert (msg.ts, msg.thread_ts, msg.metadata) == (resp["ts"], root["ts"], meta)
        assert (msg.user, msg.bot_id, msg.app_id) == author
        assert msg.text == "Answered: Ada" and msg.blocks is not None
        assert [b["type"] for b in msg.blocks] == ["section"] and "Answered: Ada" in str(msg.blocks)
        replies = await setup.client.conversations_replies(
            channel=setup.channel, ts=root["ts"], include_all_metadata=True
        )
        shown = replies["messages"][1]
        assert (shown["ts"], shown["text"], shown["bot_id"]) == (msg.ts, "Answered: Ada", author[1])
        assert "input" not in str(shown["blocks"]) and shown["metadata"] == meta
        for _ in range(4):  # 5 uses in all
            async with http.post(url, json=body) as reply:
                assert reply.status == 200
        async with http.post(url, json=body) as reply:
            assert reply.status == 404 and (await reply.json())["error"] == "used_url"
    assert len(driver.state.thread(setup.channel, root["ts"])) == 2  # nothing posted


async def test_app_home_publish_hash_and_opened_event(
    setup: Setup, driver: Driver, receiver: Receiver, workspace: LocalWorkspace
) -> None:
    setup.app.bot_events = frozenset({"app_home_opened"})
    home = {"type": "home", "blocks": [{"type": "section", "text": plain("Your agents")}]}
    first = await setup.client.views_publish(user_id=setup.alice.id, view=home)
    assert unknown_keys(first.data, recorded("api/views.publish.json")) == []
    second = await setup.client.views_publish(
        user_id=setup.alice.id, view=home, hash=first["view"]["hash"]
    )
    assert second["view"]["id"] == first["view"]["id"]
    with pytest.raises(SlackApiError) as stale:
        await setup.client.views_publish(
            user_id=setup.alice.id, view=home, hash=first["view"]["hash"]
        )
    assert stale.value.response.data["error"] == "hash_conflict"
    driver.open_app_home("alice", setup.app)
    await driver.wait_for(lambda: len(receiver.requests) == 1, what="app_home_opened")
    event = json.loads(receiver.requests[0][1])["event"]
    assert event["type"] == "app_home_opened" and event["view"]["id"] == first["view"]["id"]
    view = driver.home("alice", setup.app)
    assert view is not None and view.type == "home"


async def test_response_url_refuses_invalid_blocks_and_reports_edits_as_events(
    setup: Setup, driver: Driver, receiver: Receiver
) -> None:
    setup.app.bot_events = frozenset({"message.channels"})
    msg = await posted(setup, driver)
    await driver.wait_for(lambda: len(receiver.requests) == 1, what="the message event")
    await driver.click("alice", msg, "go")
    url = payload_of(receiver)["response_url"]
    async with aiohttp.ClientSession() as http:
        bad = {"replace_original": True, "text": "x", "blocks": [{"type": "nonsense"}]}
        async with http.post(url, json=bad) as resp:
            assert resp.status == 400 and (await resp.json())["error"] == "invalid_blocks"
        async with http.post(url, json={"replace_original": True, "text": "Done"}) as resp:
            assert resp.status == 200
    await driver.wait_for(lambda: len(receiver.requests) == 3, what="message_changed")
    changed = json.loads(receiver.requests[-1][1])["event"]
    assert changed["subtype"] == "message_changed" and changed["message"]["text"] == "Done"


async def test_an_invalid_view_in_a_response_action_leaves_the_modal_as_it_was(
    setup: Setup, driver: Driver, receiver: Receiver
) -> None:
    await open_modal(setup, driver, modal())
    receiver.answers = [json.dumps({"response_action": "update", "view": modal("x" * 30)})]
    outcome = await driver.submit("alice", {"name": "x"})
    assert outcome.problems and "title" in outcome.problems[0]
    assert driver.open_view("alice").spec["title"]["text"] == "Form"


async def test_errors_for_a_block_that_is_not_an_input_are_refused(
    setup: Setup, driver: Driver, receiver: Receiver
) -> None:
    await open_modal(setup, driver, modal())
    receiver.answers = [json.dumps({"response_action": "errors", "errors": {"nope": "Bad"}})]
    outcome = await driver.submit("alice", {"name": "x"})
    assert outcome.problems == ["no input block 'nope'"]
    assert driver.open_view("alice").errors == {}


async def test_response_urls_expire_after_thirty_minutes(
    setup: Setup, driver: Driver, receiver: Receiver
) -> None:
    await driver.slash_command("alice", "general", "/ticket", "x")
    url = urllib.parse.parse_qs(receiver.requests[-1][1].decode())["response_url"][0]
    setup.clock.advance(30 * 60 + 1)
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json={"text": "late"}) as resp:
            assert resp.status == 404 and (await resp.json())["error"] == "expired_url"
