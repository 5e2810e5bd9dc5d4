"""The local workspace's browser page (headless Chromium) with a small Bolt app defined here:
Block Kit and mrkdwn drawn as Slack draws them, live updates without reloading, threads,
modals with errors under the field, slash commands, ephemeral messages, App Home and the
person switcher – all through the workspace's real Events API and interactivity paths."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from playwright.async_api import Browser, Page, expect
from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncSay
from slack_sdk.web.async_client import AsyncWebClient

from flotilla.local_slack import InstalledApp, LocalWorkspace
from flotilla.local_slack.records import Person
from tests.e2e.browser import assert_no_page_errors, browser, open_page, screenshot
from tests.e2e.conftest import serve_bolt_app

__all__ = ["browser"]  # the fixture, imported for pytest

SCOPES = ["chat:write", "app_mentions:read", "channels:history", "commands", "users:read"]
EVENTS = ["app_mention", "app_home_opened"]
PLAIN = "plain_text"


def text(kind: str, words: str) -> dict[str, Any]:
    return {"type": kind, "text": words}


def card_blocks(person: str) -> list[dict[str, Any]]:
    """Every kind of block the page draws, with all of mrkdwn's marks."""
    mrkdwn = (
        f"*Bold words* and _slanted words_ and `some code` and ~gone~, "
        f"<https://example.com/docs|the docs>, <@{person}> :tada:\n&gt; a quote"
    )
    return [
        {"type": "header", "text": text(PLAIN, "Weekly report")},
        {
            "type": "section",
            "text": text("mrkdwn", mrkdwn),
            "fields": [text("mrkdwn", "*Owner*\nalice"), text("mrkdwn", "*Due*\nFriday")],
        },
        {"type": "divider"},
        {"type": "context", "elements": [text("mrkdwn", "updated just now")]},
        {
            "type": "actions",
            "elements": [
                {
                    "type": "button",
                    "action_id": "open_form",
                    "style": "primary",
                    "text": text(PLAIN, "Open form"),
                    "value": "v1",
                },
                {
                    "type": "static_select",
                    "action_id": "pick",
                    "placeholder": text(PLAIN, "Pick"),
                    "options": [
                        {"text": text(PLAIN, "Red"), "value": "red"},
                        {"text": text(PLAIN, "Blue"), "value": "blue"},
                    ],
                },
            ],
        },
    ]


TICKET_MODAL = {
    "type": "modal",
    "callback_id": "ticket",
    "title": text(PLAIN, "New ticket"),
    "submit": text(PLAIN, "Create"),
    "close": text(PLAIN, "Cancel"),
    "blocks": [
        {
            "type": "input",
            "block_id": "title_block",
            "label": text(PLAIN, "Title"),
            "element": {"type": "plain_text_input", "action_id": "title"},
        },
        {
            "type": "input",
            "block_id": "size_block",
            "label": text(PLAIN, "Size"),
            "element": {
                "type": "radio_buttons",
                "action_id": "size",
                "options": [
                    {"text": text(PLAIN, "Small"), "value": "s"},
                    {"text": text(PLAIN, "Large"), "value": "l"},
                ],
            },
        },
        {
            "type": "actions",
            "elements": [
                {"type": "button", "action_id": "more", "text": text(PLAIN, "More options")}
            ],
        },
    ],
}
MORE_MODAL = {
    "type": "modal",
    "title": text(PLAIN, "More options"),
    "close": text(PLAIN, "Back"),
    "notify_on_close": True,
    "blocks": [{"type": "section", "text": text("mrkdwn", "Nothing more, _really_.")}],
}
CLOSED: list[bool] = []  # is_cleared of each view_closed the app heard


def page_app(installed: InstalledApp, client: AsyncWebClient) -> AsyncApp:
    app = AsyncApp(client=client, signing_secret=installed.signing_secret)

    @app.event("app_mention")
    async def on_mention(event: dict[str, Any], say: AsyncSay) -> None:
        await say(text="Weekly report", blocks=card_blocks(event["user"]), thread_ts=event["ts"])

    @app.action("open_form")
    async def on_open(ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient) -> None:
        await ack()
        meta = {"channel": body["channel"]["id"], "thread_ts": body["container"]["thread_ts"]}
        view = {**TICKET_MODAL, "private_metadata": json.dumps(meta)}
        await client.views_open(trigger_id=body["trigger_id"], view=view)

    @app.action("more")
    async def on_more(ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient) -> None:
        await ack()
        await client.views_push(trigger_id=body["trigger_id"], view=MORE_MODAL)

    @app.view_closed("")
    async def on_closed(ack: AsyncAck, body: dict[str, Any]) -> None:
        await ack()
        CLOSED.append(body["is_cleared"])

    @app.action("pick")
    async def on_pick(ack: AsyncAck, body: dict[str, Any], say: AsyncSay) -> None:
        await ack()
        picked = body["actions"][0]["selected_option"]["value"]
        await say(text=f"You picked {picked}", thread_ts=body["container"]["thread_ts"])

    @app.view("ticket")
    async def on_submit(ack: AsyncAck, view: dict[str, Any], client: AsyncWebClient) -> None:
        values = view["state"]["values"]
        title = values["title_block"]["title"]["value"]
        if len(title) < 5:
            await ack(response_action="errors", errors={"title_block": "At least 5 characters"})
            return
        await ack()
        size = values["size_block"]["size"]["selected_option"]["value"]
        meta = json.loads(view["private_metadata"])
        await client.chat_postMessage(
            channel=meta["channel"],
            thread_ts=meta["thread_ts"],
            text=f"Created ticket *{title}* (size {size})",
        )

    @app.action("send_form")
    async def on_send_form(ack: AsyncAck, body: dict[str, Any], say: AsyncSay) -> None:
        await ack()
        values = body["state"]["values"]  # the message's inputs, as Slack sends them
        name = values["name_block"]["name"]["value"]
        size = (values["size_block"]["size"]["selected_option"] or {}).get("value")
        await say(text=f"Got {name} in size {size}")

    @app.action(re.compile("^(rate|remove)$"))  # context actions: feedback and icon buttons
    async def on_context_action(ack: AsyncAck, body: dict[str, Any], say: AsyncSay) -> None:
        await ack()
        action = body["actions"][0]  # for feedback buttons: the clicked side's text and value
        clicked = f"{action['type']}, {action['text']['text']}"
        await say(text=f"{action['action_id']}: {action['value']} ({clicked})")

    @app.command("/ticket")
    async def on_command(ack: AsyncAck, command: dict[str, Any]) -> None:
        await ack(f"Filing _{command['text']}_ for <@{command['user_id']}>")

    @app.event("app_home_opened")
    async def on_home(event: dict[str, Any], client: AsyncWebClient) -> None:
        blocks = [
            {"type": "header", "text": text(PLAIN, "Your tickets")},
            {"type": "section", "text": text("mrkdwn", f"Hello <@{event['user']}>")},
        ]
        await client.views_publish(user_id=event["user"], view={"type": "home", "blocks": blocks})

    return app


@dataclass
class Running:
    workspace: LocalWorkspace
    installed: InstalledApp
    client: AsyncWebClient
    channel: str
    alice: Person
    bob: Person


@pytest.fixture
async def running(workspace: LocalWorkspace) -> AsyncIterator[Running]:
    installed = workspace.install_app(
        "TinyBot", scopes=SCOPES, bot_events=EVENTS, commands={"/ticket": None}
    )
    alice, bob = workspace.add_person("alice"), workspace.add_person("bob", admin=True)
    channel = workspace.create_channel("general", [alice, bob, installed])
    workspace.create_channel("random", [alice, installed])
    client = AsyncWebClient(token=installed.bot_token, base_url=workspace.api_url)
    async with serve_bolt_app(workspace, page_app(installed, client), installed):
        yield Running(workspace, installed, client, channel.id, alice, bob)


async def say(page: Page, words: str, where: str = "#composer") -> None:
    box = page.locator(f"{where} textarea")
    await box.fill(words)
    await box.press("Enter")


async def test_a_mention_shows_the_apps_blocks_in_the_thread_beside_the_channel(
    running: Running, browser: Browser
) -> None:
    page = await open_page(browser, running.workspace.page_url + "?as=alice")
    await say(page, "@TinyBot weekly report please")
    root = page.locator("#messages .message", has_text="weekly report please")
    await expect(root.locator(".mention")).to_have_text("@tinybot")  # typed @Name, sent <@U…>
    await root.locator(".replies-link", has_text="1 reply").click()
    card = page.locator("#thread-messages .message", has_text="Weekly report")
    await expect(page.locator("#messages")).to_be_visible()  # the channel stays beside it
    await expect(card.locator(".bk-header")).to_have_text("Weekly report")
    await expect(card.locator("b").first).to_have_text("Bold words")
    await expect(card.locator("i")).to_have_text("slanted words")
    await expect(card.locator("code")).to_have_text("some code")
    await expect(card.locator("s")).to_have_text("gone")
    await expect(card.locator("a.link")).to_have_attribute("href", "https://example.com/docs")
    await expect(card.locator(".mention.mention-me")).to_have_text("@alice")
    tada = card.locator('.bk-section .emoji[data-emoji="🎉"]')  # the page's picture for :tada:
    await expect(tada.locator("svg")).to_have_count(1)
    await expect(card.locator("blockquote")).to_have_text("a quote")
    await expect(card.locator(".bk-field")).to_have_count(2)
    await expect(card.locator("hr.bk-divider")).to_have_count(1)
    await expect(card.locator(".bk-context")).to_have_text("updated just now")
    await expect(card.locator(".bk-button.bk-primary")).to_have_text("Open form")

    await card.locator("select").select_option("blue")  # a menu reaches the app at once
    picked = page.locator("#thread-messages .message-content", has_text="You picked")
    await expect(picked).to_have_text("You picked blue")
    await screenshot(page, "page-thread")
    assert_no_page_errors(page)


async def test_a_modal_shows_errors_under_the_field_then_closes(
    running: Running, browser: Browser
) -> None:
    page = await open_page(browser, running.workspace.page_url + "?as=alice")
    await say(page, "@TinyBot report")
    await page.locator(".replies-link").click()
    await page.locator("#thread-messages .bk-button", has_text="Open form").click()
    modal = page.locator("#modal-backdrop .modal")
    await expect(modal.locator(".modal-title")).to_have_text("New ticket")
    title = modal.locator(".bk-input", has_text="Title")
    size = modal.locator(".bk-input", has_text="Size")
    await modal.locator(".modal-submit").click()  # blank: the client refuses, as Slack's does
    await expect(title.locator(".bk-error")).to_have_text("Please complete this required field.")
    await expect(size.locator(".bk-error")).to_have_text("Please complete this required field.")
    await title.locator("input").fill("abc")
    await size.get_by_label("Large").check()
    await modal.locator(".modal-submit").click()  # the app answers response_action=errors
    await expect(title.locator(".bk-error")).to_have_text("At least 5 characters")
    await expect(size.locator(".bk-error")).to_have_count(0)
    await expect(title.locator("input")).to_have_value("abc")  # what was typed is kept
    await screenshot(page, "page-modal-error")
    await title.locator("input").fill("Printer on fire")
    await modal.locator(".modal-submit").click()
    await expect(page.locator("#modal-backdrop")).to_be_hidden()
    created = page.locator("#thread-messages .message-content", has_text="Created ticket")
    await expect(created.locator("b")).to_have_text("Printer on fire")
    await expect(created).to_contain_text("(size l)")
    assert_no_page_errors(page)


async def test_live_updates_edits_streaming_and_ephemeral_messages(
    running: Running, browser: Browser
) -> None:
    page = await open_page(browser, running.workspace.page_url + "?as=alice")
    client, channel = running.client, running.channel
    posted = await client.chat_postMessage(channel=channel, text="Deploy *started*")
    message = page.locator("#messages .message", has_text="Deploy")
    await expect(message.locator("b")).to_have_text("started")  # arrived without a reload
    await client.chat_update(channel=channel, ts=posted["ts"], text="Deploy *finished*")
    await expect(message.locator("b")).to_have_text("finished")
    await expect(message.locator(".edited")).to_have_count(1)
    await expect(page.locator("#messages .message", has_text="Deploy")).to_have_count(1)

    stream = await client.chat_startStream(
        channel=channel,
        thread_ts=posted["ts"],
        recipient_user_id=running.alice.id,
        recipient_team_id=running.workspace.state.team_id,
        markdown_text="Working on **it**",
    )
    await message.locator(".replies-link").click()
    streamed = page.locator("#thread-messages .message.streaming")
    await expect(streamed.locator(".markdown b")).to_have_text("it")
    await client.chat_appendStream(channel=channel, ts=stream["ts"], markdown_text=" – step 2")
    await expect(streamed).to_contain_text("Working on it – step 2")
    await client.assistant_threads_setStatus(
        channel_id=channel,
        thread_ts=posted["ts"],
        status="is thinking…",
        loading_messages=["Reading the thread", "Checking the numbers"],
    )
    status = page.locator("#thread-messages .thread-status")
    await expect(status.locator(".status-text")).to_have_text("TinyBot is thinking…")
    await expect(status.locator(".status-loading")).to_have_text("Checking the numbers")
    await client.chat_stopStream(channel=channel, ts=stream["ts"])
    await expect(page.locator("#thread-messages .message.streaming")).to_have_count(0)
    await expect(page.locator("#thread-messages .message", has_text="step 2")).to_have_count(1)
    await expect(status).to_have_count(1)
    await client.chat_postMessage(channel=channel, thread_ts=posted["ts"], text="All done")
    await expect(status).to_have_count(0)  # the app's reply ends its status line

    random = running.workspace.state.channel_named("random").id
    await client.chat_postMessage(channel=random, text="Over here")  # elsewhere: shown as unread
    await expect(page.locator("#channel-list .side-item.unread")).to_have_text("# random")
    await page.locator("#channel-list .side-item", has_text="random").click()
    await expect(page.locator("#messages .message")).to_have_text(re.compile("Over here"))
    await expect(page.locator("#channel-list .side-item.unread")).to_have_count(0)
    await expect(page).to_have_title("#random – Flotilla Local")
    await page.locator("#channel-list .side-item", has_text="general").click()

    await client.chat_postEphemeral(channel=channel, user=running.alice.id, text="Just for _you_")
    only_alice = page.locator("#messages .message.ephemeral", has_text="Just for")
    await expect(only_alice.locator(".only-you")).to_have_text("Only visible to you")
    await page.locator("#person").select_option(label="bob (admin)")  # the person switcher
    await expect(page.locator("#me-avatar .avatar")).to_have_text("B")
    await expect(page.locator("#messages .message", has_text="Deploy")).to_have_count(1)
    await expect(page.locator("#messages .message.ephemeral")).to_have_count(0)
    assert_no_page_errors(page)


MESSAGE_FORM: list[dict[str, Any]] = [
    {"type": "section", "text": text("mrkdwn", "Fill me in")},
    {
        "type": "input",
        "block_id": "name_block",
        "label": text(PLAIN, "Name"),
        "element": {"type": "plain_text_input", "action_id": "name"},
    },
    {
        "type": "input",
        "block_id": "size_block",
        "label": text(PLAIN, "Size"),
        "element": {
            "type": "static_select",
            "action_id": "size",
            "placeholder": text(PLAIN, "Pick"),
            "options": [
                {"text": text(PLAIN, "Small"), "value": "s"},
                {"text": text(PLAIN, "Large"), "value": "l"},
            ],
        },
    },
    {
        "type": "actions",
        "block_id": "acts",
        "elements": [{"type": "button", "action_id": "send_form", "text": text(PLAIN, "Submit")}],
    },
]


async def test_a_form_in_a_message_keeps_what_was_typed_across_a_redraw_and_sends_it(
    running: Running, browser: Browser
) -> None:
    page = await open_page(browser, running.workspace.page_url + "?as=alice")
    client, channel = running.client, running.channel
    posted = await client.chat_postMessage(channel=channel, text="form", blocks=MESSAGE_FORM)
    form = page.locator("#messages .message", has_text="Fill me in")
    await form.locator(".bk-input", has_text="Name").locator("input").fill("Ada")
    await form.locator(".bk-input", has_text="Size").locator("select").select_option("l")
    message = running.workspace.state.message(channel, posted["ts"])
    assert message is not None and message.typed == {}  # typing sends nothing
    redrawn = [{**MESSAGE_FORM[0], "text": text("mrkdwn", "Fill me in, please")}]
    await client.chat_update(
        channel=channel, ts=posted["ts"], text="form", blocks=redrawn + MESSAGE_FORM[1:]
    )
    await expect(form).to_contain_text("please")  # the message was drawn again
    await expect(form.locator(".bk-input", has_text="Name").locator("input")).to_have_value("Ada")
    await expect(form.locator("select")).to_have_value("l")
    await form.locator(".bk-button", has_text="Submit").click()
    await expect(page.locator("#messages .message", has_text="Got Ada")).to_contain_text(
        "Got Ada in size l"
    )
    assert_no_page_errors(page)


async def test_slash_command_box_and_app_home(running: Running, browser: Browser) -> None:
    page = await open_page(browser, running.workspace.page_url + "?as=alice")
    box = page.locator("#composer textarea")
    await box.fill("/tic")
    await expect(page.locator("#command-hints")).to_contain_text("/ticket")
    await say(page, "/ticket the printer")
    answer = page.locator("#messages .message.ephemeral", has_text="Filing")
    await expect(answer.locator("i")).to_have_text("the printer")
    await expect(answer.locator(".mention")).to_have_text("@alice")
    await say(page, "/nothing here")
    await expect(page.locator(".toast")).to_contain_text("/nothing is not a valid command")

    await page.locator("#app-list .side-item", has_text="TinyBot").click()
    home = page.locator("#home")
    await expect(home.locator(".bk-header")).to_have_text("Your tickets")
    await expect(home.locator(".mention")).to_have_text("@alice")
    await page.locator(".tab", has_text="Messages").click()
    await say(page, "hello app")
    await expect(page.locator("#messages .message", has_text="hello app")).to_have_count(1)
    assert_no_page_errors(page)


async def test_a_pushed_modal_goes_back_or_the_x_closes_the_stack(
    running: Running, browser: Browser
) -> None:
    CLOSED.clear()
    page = await open_page(browser, running.workspace.page_url + "?as=alice")
    await say(page, "@TinyBot report")
    await page.locator(".replies-link").click()
    await page.locator("#thread-messages .bk-button", has_text="Open form").click()
    modal = page.locator("#modal-backdrop .modal")
    await modal.locator(".bk-input", has_text="Title").locator("input").fill("Kept while away")
    await modal.locator(".bk-button", has_text="More options").click()  # views.push
    await expect(modal.locator(".modal-title")).to_have_text("More options")
    await expect(modal.locator(".modal-body i")).to_have_text("really")
    await modal.locator(".modal-close").click()  # "Back": one view down
    await expect(modal.locator(".modal-title")).to_have_text("New ticket")
    title = modal.locator(".bk-input", has_text="Title").locator("input")
    await expect(title).to_have_value("Kept while away")  # sent with the click, as in Slack
    await modal.locator(".bk-button", has_text="More options").click()
    await expect(modal.locator(".modal-back")).to_be_visible()
    await modal.locator(".modal-x").click()  # the X closes every view of the stack
    await expect(page.locator("#modal-backdrop")).to_be_hidden()
    assert running.workspace.state.top_modal(running.alice.id) is None
    assert CLOSED == [False, True]
    assert_no_page_errors(page)


def context_actions(only_for: str) -> list[dict[str, Any]]:
    """An answer with Slack's context actions: 👍/👎 feedback buttons and icon buttons (one
    shown only to `only_for`)."""
    feedback = {
        "type": "feedback_buttons",
        "action_id": "rate",
        "positive_button": {
            "text": text(PLAIN, "👍"),
            "value": "good",
            "accessibility_label": "Good",
        },
        "negative_button": {
            "text": text(PLAIN, "👎"),
            "value": "bad",
            "accessibility_label": "Bad",
        },
    }
    remove = {"type": "icon_button", "icon": "trash", "action_id": "remove", "value": "answer-1"}
    return [
        {"type": "section", "text": text("mrkdwn", "Here is the answer")},
        {
            "type": "context_actions",
            "elements": [
                feedback,
                {**remove, "text": text(PLAIN, "Remove")},
                {
                    **remove,
                    "action_id": "purge",
                    "text": text(PLAIN, "Purge"),
                    "visible_to_user_ids": [only_for],
                },
            ],
        },
    ]


async def test_context_actions_are_buttons_whose_clicks_reach_the_app(
    running: Running, browser: Browser
) -> None:
    page = await open_page(browser, running.workspace.page_url + "?as=alice")
    blocks = context_actions(only_for=running.bob.id)
    await running.client.chat_postMessage(channel=running.channel, text="answer", blocks=blocks)
    answer = page.locator("#messages .message", has_text="Here is the answer")
    actions = answer.locator(".bk-context-actions")
    await expect(actions.locator("button")).to_have_count(3)  # 👍, 👎 and Remove; not Purge
    await expect(answer.locator(".bk-unknown")).to_have_count(0)
    await expect(answer).not_to_contain_text("context_actions")
    thumbs_down = actions.get_by_role("button", name="Bad")
    await expect(thumbs_down.locator('.emoji[data-emoji="👎"] svg')).to_have_count(1)
    await expect(actions.locator(".emoji[data-emoji='🗑'] svg")).to_have_count(1)  # trash

    await thumbs_down.click()
    rated = page.locator("#messages .message-content", has_text="rate: bad")
    await expect(rated).to_contain_text("rate: bad (feedback_buttons, ")  # the 👎 side's value
    await expect(rated.locator('.emoji[data-emoji="👎"]')).to_have_count(1)  # and its text
    await expect(thumbs_down).to_have_attribute("aria-pressed", "true")
    await actions.get_by_role("button", name="Remove").click()
    removed = page.locator("#messages .message-content", has_text="remove:")
    await expect(removed).to_have_text("remove: answer-1 (icon_button, Remove)")
    assert_no_page_errors(page)


async def test_emoji_names_and_characters_are_the_pages_own_pictures(
    running: Running, browser: Browser
) -> None:
    page = await open_page(browser, running.workspace.page_url + "?as=alice")
    await say(page, "ok :thumbsup: :white_check_mark: ⏳ :mag: ⚠️ :not_an_emoji:")
    said = page.locator("#messages .message", has_text="not_an_emoji").locator(".message-content")
    drawn = said.locator(".emoji")
    await expect(drawn).to_have_count(5)
    pictures = [await e.get_attribute("data-emoji") for e in await drawn.all()]
    assert pictures == ["👍", "✅", "⏳", "🔍", "⚠"]
    await expect(said.locator(".emoji svg")).to_have_count(5)  # drawn: no emoji font needed
    await expect(said.locator(".emoji-char")).to_have_count(0)
    await expect(said).to_have_text(re.compile(r"^ok\s+:not_an_emoji:$"))  # unknown: as typed
    await expect(said.get_by_role("img", name="white_check_mark")).to_have_count(1)

    blocks: list[dict[str, Any]] = [  # a header's plain_text, a button, a context's mrkdwn
        {"type": "header", "text": text(PLAIN, ":tada: Shipped")},
        {"type": "context", "elements": [text("mrkdwn", "✅ 2 of 2 done :rocket:")]},
        {
            "type": "actions",
            "elements": [
                {"type": "button", "action_id": "noop", "text": text(PLAIN, ":eyes: Look")},
            ],
        },
    ]
    await running.client.chat_postMessage(channel=running.channel, text="shipped", blocks=blocks)
    shipped = page.locator("#messages .message", has_text="Shipped")
    for where, char in [
        (".bk-header", "🎉"),
        (".bk-context", "✅"),
        (".bk-context", "🚀"),
        (".bk-button", "👀"),
    ]:
        await expect(shipped.locator(f'{where} .emoji[data-emoji="{char}"] svg')).to_have_count(1)
    assert_no_page_errors(page)
