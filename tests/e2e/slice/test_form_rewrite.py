"""An answered form's message shows who answered what. A click in the form's own message
(an inline answer, a form's [Submit]) rewrites it through the click's response_url – no
Web API call; the modal's submission, a click replayed from the inbox, and a response_url
that is refused (expired, used up) rewrite it with chat.update. Through the real Bolt app
and the local workspace, whose response_urls last 30 minutes and 5 uses as Slack's do."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest

from flotilla.bot.views.forms import INLINE_ACTION, OPEN_ACTION, SUBMIT_ACTION, FormKey
from flotilla.local_slack import Message
from flotilla.local_slack.interactivity import interactivity_of
from tests.e2e.slice.call_budget import counted_calls
from tests.e2e.slice.conftest import Run, scripted
from tests.e2e.slice.scripts import plans
from tests.e2e.slice.test_bad_input import post
from tests.e2e.slice.test_edge_validation import FORM, form_post, headers_for, tracebacks
from tests.e2e.slice.test_inline_forms import STEPS as BUDGET_STEPS

ASK = "[ask] research the history of our launch emails and write it up"
LARGE_FORM = {
    "fields": [{"name": "budget", "label": "Budget"}, {"name": "owner", "label": "Owner"}]
    + [{"name": f"extra{i}", "label": f"Extra {i}", "required": False} for i in range(4)]
}
FALLBACK_LINE = "the answered form was not rewritten through its response_url"


def uses_of(run: Run, click: dict[str, Any]) -> int:
    """How often the click's response_url was used."""
    token = click["response_url"].rsplit("/", 1)[1]
    return interactivity_of(run.stack.workspace).response_targets[token].uses


def last_click(run: Run, action_id: str) -> dict[str, Any]:
    return next(
        d.payload
        for d in reversed(run.stack.workspace.events.deliveries)
        if d.kind == "block_actions" and d.payload["actions"][0]["action_id"] == action_id
    )


def complaints(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


async def answered(run: Run, root: Message, form: Message) -> Message:
    message = await run.says(root, "Answered by")
    assert message.ts == form.ts and message.thread_ts == root.ts  # the form's own message
    assert message.bot_id == form.bot_id and message.metadata == form.metadata
    return message


async def test_a_form_answered_in_its_message_is_rewritten_without_a_web_api_call(
    start: Callable[..., Any], updated: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="flotilla.bot")
    async with start(model=scripted(plans({"BUDGET": BUDGET_STEPS}))) as run:
        root = run.ask("BUDGET please")
        form = await run.says(root, "needs your input")
        run.stack.workspace.api_log.clear()
        answer = {"field:budget": "10k", "field:size": "Large", "field:notes": "annual"}
        await run.driver.click("maya", form, SUBMIT_ACTION, values=answer)
        message = await answered(run, root, form)
        maya = run.driver.person("maya").id
        assert (
            message.text
            == f"✅ Answered by <@{maya}>: Budget: 10k; Team size: Large; Notes: annual"
        )
        assert "Budget: 10k; Team size: Large" in str(message.blocks)
        assert SUBMIT_ACTION not in str(message.blocks) and "input" not in str(message.blocks)
        assert "Answered by @maya: Budget: 10k" in run.transcript(root)
        await run.says(root, "[offline model] writer:")
        await run.quiesce()
        assert (await run.plan(root)).status == "completed"
        assert form.ts not in updated  # not by chat.update: through the response_url, once
        assert uses_of(run, last_click(run, SUBMIT_ACTION)) == 1
        assert counted_calls(run.stack.workspace.api_log)["chat.update"] == len(updated)
        assert FALLBACK_LINE not in caplog.text and complaints(caplog) == []


async def test_an_inline_answer_is_rewritten_through_its_response_url(
    start: Callable[..., Any], updated: list[str]
) -> None:
    async with start() as run:
        root = run.ask(ASK)
        question = await run.says(root, "asks:")
        await run.driver.click("maya", question, INLINE_ACTION, value="2024 only")
        message = await answered(run, root, question)
        assert message.text.endswith(": 2024 only") and INLINE_ACTION not in str(message.blocks)
        await run.quiesce()
        assert question.ts not in updated
        assert uses_of(run, last_click(run, INLINE_ACTION)) == 1


@pytest.mark.parametrize("refused", ["expired_url", "used_url"])
async def test_a_refused_response_url_falls_back_to_chat_update(
    start: Callable[..., Any],
    updated: list[str],
    caplog: pytest.LogCaptureFixture,
    refused: str,
) -> None:
    caplog.set_level(logging.INFO, logger="flotilla.bot")
    async with start(model=scripted(plans({"BUDGET": BUDGET_STEPS}))) as run:
        interactivity = interactivity_of(run.stack.workspace)
        if refused == "expired_url":  # every url older than its 30 minutes
            interactivity.response_url_seconds = -1.0
        else:  # every url used its 5 times already
            interactivity.response_url_uses = 0
        root = run.ask("BUDGET please")
        form = await run.says(root, "needs your input")
        values = {"field:budget": "10k", "field:size": "Small"}
        await run.driver.click("maya", form, SUBMIT_ACTION, values=values)
        message = await answered(run, root, form)
        assert "Budget: 10k; Team size: Small" in message.text
        await run.quiesce()
        assert updated.count(form.ts) == 1  # the update was not lost: chat.update did it
        assert uses_of(run, last_click(run, SUBMIT_ACTION)) == 0
        lines = [r for r in caplog.records if FALLBACK_LINE in r.getMessage()]
        assert len(lines) == 1 and lines[0].levelno == logging.INFO and not lines[0].exc_info
        assert refused in lines[0].getMessage() and complaints(caplog) == []
        assert run.driver.ephemerals("maya") == []  # the person reads nothing about it


async def test_a_modal_answer_is_shown_with_chat_update(
    start: Callable[..., Any], updated: list[str]
) -> None:
    steps = [{"index": 1, "title": "Budget and owner", "assignee": "user", "form": LARGE_FORM}]
    async with start(model=scripted(plans({"BUDGET": steps}))) as run:
        root = run.ask("BUDGET please")
        form = await run.says(root, "needs your input")
        await run.driver.click("maya", form, OPEN_ACTION)
        await run.modal("maya")
        await run.driver.submit("maya", {"field:budget": "10k", "field:owner": "Dev"})
        message = await answered(run, root, form)
        assert "Budget: 10k; Owner: Dev" in message.text
        await run.quiesce()
        assert updated.count(form.ts) == 1


async def test_an_inline_answer_cut_short_is_shown_with_chat_update_by_its_stored_row(
    start: Callable[..., Any], updated: list[str]
) -> None:
    async with start() as run:
        root = run.ask(ASK)
        question = await run.says(root, "asks:")
        await run.quiesce()

        async def dies(*_args: Any, **_kwargs: Any) -> Any:
            raise asyncio.CancelledError  # the process dies while it handles the click

        run.service.reconciler.reconcile = dies
        delivery = await run.driver.click("maya", question, INLINE_ACTION, value="2024 only")
        assert [a.status for a in delivery.attempts] == [200]
        await run.stack.restart()
        resumed = Run(run.stack, run.driver, run.clock)
        resumed.clock.advance(resumed.service.options.inbox_claim_seconds + 1)
        assert resumed.service.replay_inbox is not None
        # the click's inbox row was finished with the answer's store (no files: its stored
        # row, due once its grace is over, records and shows it)
        assert await resumed.service.replay_inbox() == 0
        await resumed.service.settle()
        await answered(resumed, root, question)
        await resumed.quiesce()
        assert updated.count(question.ts) == 1  # its url may have expired: chat.update
        assert uses_of(resumed, last_click(resumed, INLINE_ACTION)) == 0


async def test_a_submit_without_a_response_url_is_answered_without_a_traceback(
    start: Callable[..., Any], updated: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    """Slack's clicks carry a response_url; a signed one without it (the chaos suite's
    generated input found it) is still taken: the form rewritten with chat.update, and a
    repeat's refusal, which has nowhere to go, only logged – no traceback (there was one)."""
    caplog.set_level(logging.INFO)
    async with start(model=scripted(plans({"BUDGET": BUDGET_STEPS}))) as run:
        root = run.ask("BUDGET please")
        form = await run.says(root, "needs your input")
        key = FormKey((await run.plan(root)).id, 1, 1, 1).encode()
        size = {
            "type": "static_select",
            "selected_option": {"text": {"type": "plain_text", "text": "Small"}, "value": "Small"},
        }
        state = {
            "values": {
                "field:budget": {"value": {"type": "plain_text_input", "value": "9k"}},
                "field:size": {"value": size},
            }
        }

        def click(action_ts: str) -> str:
            return form_post(
                {
                    "type": "block_actions",
                    "user": {"id": run.driver.person("maya").id},
                    "team": {"id": run.stack.workspace.state.team_id},
                    "api_app_id": run.stack.commander.app_id,
                    "trigger_id": f"1.2.{action_ts}",
                    "container": {
                        "type": "message",
                        "message_ts": form.ts,
                        "channel_id": form.channel,
                        "thread_ts": root.ts,
                    },
                    "actions": [
                        {
                            "type": "button",
                            "action_id": SUBMIT_ACTION,
                            "block_id": key,
                            "value": key,
                            "action_ts": action_ts,
                        }
                    ],
                    "state": state,
                }
            )

        url = run.stack.commander.request_url or ""
        for action_ts in ("1.0", "1.1"):  # the answer, then a repeat (refused)
            body = click(action_ts)
            status, _ = await post(url, body, headers_for(run, body, FORM))
            assert status == 200
            await answered(run, root, form)
        await run.quiesce()
        assert "Budget: 9k; Team size: Small" in form.text and updated.count(form.ts) == 1
        assert not tracebacks(caplog), [r.getMessage() for r in tracebacks(caplog)]
