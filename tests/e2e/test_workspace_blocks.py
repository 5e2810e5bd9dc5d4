"""Block Kit limits (tests/specs/limits.json) enforced on messages and views,
checked over HTTP through slack_sdk: each limit passes at its value and fails one past it."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from slack_sdk.errors import SlackApiError

from flotilla.local_slack import LocalWorkspace
from flotilla.local_slack.blocks import check_view
from tests.e2e.conftest import client_for
from tests.e2e.spec_shapes import SPECS

LIMITS = json.loads((SPECS / "limits.json").read_text())


def plain(text: str) -> dict[str, Any]:
    return {"type": "plain_text", "text": text}


def section(n: int) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": "x" * n}}


def button(i: int = 0, *, text: str = "Go", value: str = "v") -> dict[str, Any]:
    return {"type": "button", "text": plain(text), "action_id": f"a{i}", "value": value}


def option(i: int, *, text: str = "o", value: str | None = None) -> dict[str, Any]:
    return {"text": plain(text), "value": value or f"v{i}"}


# name -> (limit, blocks builder taking the size)
MESSAGE_LIMITS: dict[str, tuple[int, Callable[[int], list[dict[str, Any]]]]] = {
    "blocks_max": (LIMITS["message"]["blocks_max"]["value"], lambda n: [section(1)] * n),
    "section_text_max": (LIMITS["block"]["section_text_max"]["value"], lambda n: [section(n)]),
    "section_fields_max_items": (
        LIMITS["block"]["section_fields_max_items"]["value"],
        lambda n: [{"type": "section", "fields": [plain("f")] * n}],
    ),
    "header_text_max": (
        LIMITS["block"]["header_text_max"]["value"],
        lambda n: [{"type": "header", "text": plain("h" * n)}],
    ),
    "actions_elements_max": (
        LIMITS["block"]["actions_elements_max"]["value"],
        lambda n: [{"type": "actions", "elements": [button(i) for i in range(n)]}],
    ),
    "context_elements_max": (
        LIMITS["block"]["context_elements_max"]["value"],
        lambda n: [{"type": "context", "elements": [plain("c")] * n}],
    ),
    "block_id_max": (
        LIMITS["block"]["block_id_max"]["value"],
        lambda n: [{**section(1), "block_id": "b" * n}],
    ),
    "button_text_max": (
        LIMITS["element"]["button_text_max"]["value"],
        lambda n: [{"type": "actions", "elements": [button(text="t" * n)]}],
    ),
    "button_value_max": (
        LIMITS["element"]["button_value_max"]["value"],
        lambda n: [{"type": "actions", "elements": [button(value="v" * n)]}],
    ),
    "action_id_max": (
        LIMITS["element"]["action_id_max"]["value"],
        lambda n: [{"type": "actions", "elements": [{**button(), "action_id": "a" * n}]}],
    ),
    "static_select_options_max": (
        LIMITS["element"]["static_select_options_max"]["value"],
        lambda n: [
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "static_select",
                        "action_id": "s",
                        "placeholder": plain("p"),
                        "options": [option(i) for i in range(n)],
                    }
                ],
            }
        ],
    ),
    "option_text_max": (
        LIMITS["element"]["option_text_max"]["value"],
        lambda n: [
            {
                "type": "actions",
                "elements": [
                    {
                        "type": "static_select",
                        "action_id": "s",
                        "options": [option(0, text="o" * n)],
                    }
                ],
            }
        ],
    ),
    "markdown_block_text_max": (
        LIMITS["block"]["markdown_block_text_max"]["value"],
        lambda n: [{"type": "markdown", "text": "m" * n}],
    ),
}


@pytest.fixture
async def poster(workspace: LocalWorkspace) -> Callable[[list[dict[str, Any]]], Any]:
    app = workspace.install_app("Blocks", scopes=["chat:write"])
    channel = workspace.create_channel("blocks", [app])
    client = client_for(workspace, app.bot_token)

    async def post(blocks: list[dict[str, Any]]) -> Any:
        return await client.chat_postMessage(channel=channel.id, text="t", blocks=blocks)

    return post


@pytest.mark.parametrize("name", sorted(MESSAGE_LIMITS))
async def test_message_block_limit(name: str, poster: Callable[..., Any]) -> None:
    limit, build = MESSAGE_LIMITS[name]
    assert (await poster(build(limit)))["ok"] is True
    with pytest.raises(SlackApiError) as info:
        await poster(build(limit + 1))
    data = info.value.response.data
    assert data["error"] == "invalid_blocks"
    assert data["response_metadata"]["messages"][0].startswith("[ERROR] ")
    assert "[json-pointer:/blocks" in data["errors"][0]


@pytest.mark.parametrize(
    "blocks",
    [
        [{"type": "no_such_block"}],
        [{"type": "section"}],
        [{"type": "actions", "elements": []}],
        [{"type": "image", "image_url": "https://x/y.png"}],
        [{"type": "input", "label": plain("l"), "element": {"type": "plain_text_input"}}][:0]
        + [{"type": "actions", "elements": [{"type": "plain_text_input", "action_id": "x"}]}],
        [section(1) | {"block_id": "same"}, section(1) | {"block_id": "same"}],
        [{"type": "header", "text": {"type": "mrkdwn", "text": "headers are plain text"}}],
    ],
    ids=[
        "unknown",
        "empty-section",
        "no-elements",
        "no-alt",
        "input-outside-input",
        "dup-id",
        "mrkdwn-header",
    ],
)
async def test_malformed_blocks_are_invalid(blocks: list[Any], poster: Callable[..., Any]) -> None:
    with pytest.raises(SlackApiError) as info:
        await poster(blocks)
    assert info.value.response.data["error"] == "invalid_blocks"


def modal(**extra: Any) -> dict[str, Any]:
    return {"type": "modal", "title": plain("Title"), "blocks": [section(1)], **extra}


VIEW = LIMITS["view"]
VIEW_LIMITS: dict[str, tuple[int, Callable[[int], dict[str, Any]]]] = {
    "blocks_max": (VIEW["blocks_max"]["value"], lambda n: modal(blocks=[section(1)] * n)),
    "modal_title_max": (VIEW["modal_title_max"]["value"], lambda n: modal(title=plain("t" * n))),
    "modal_submit_max": (VIEW["modal_submit_max"]["value"], lambda n: modal(submit=plain("s" * n))),
    "modal_close_max": (VIEW["modal_close_max"]["value"], lambda n: modal(close=plain("c" * n))),
    "private_metadata_max": (
        VIEW["private_metadata_max"]["value"],
        lambda n: modal(private_metadata="p" * n),
    ),
    "callback_id_max": (VIEW["callback_id_max"]["value"], lambda n: modal(callback_id="c" * n)),
}


@pytest.mark.parametrize("name", sorted(VIEW_LIMITS))
async def test_view_limit_on_views_open(name: str, workspace: LocalWorkspace) -> None:
    limit, build = VIEW_LIMITS[name]
    app = workspace.install_app("Views", scopes=["chat:write"])
    person = workspace.add_person("alice")
    client = client_for(workspace, app.bot_token)

    def trigger() -> str:
        return workspace.state.issue_trigger(person.id, app.app_id, workspace.clock())

    assert (await client.views_open(trigger_id=trigger(), view=build(limit)))["ok"] is True
    with pytest.raises(SlackApiError) as info:
        await client.views_open(trigger_id=trigger(), view=build(limit + 1))
    data = info.value.response.data
    assert data["error"] == "invalid_arguments"
    assert "[json-pointer:/view" in data["response_metadata"]["messages"][0]


async def test_modal_with_input_needs_submit() -> None:
    view = modal(
        blocks=[
            {
                "type": "input",
                "label": plain("Name"),
                "element": {"type": "plain_text_input", "action_id": "n"},
            }
        ]
    )
    assert any("submit" in e for e in check_view(view))
    assert check_view({**view, "submit": plain("Save")}) == []
