"""A small form of several fields answered in its own message (no modal), through the real
Bolt app and the local workspace: its inputs travel in the [Submit] click's `state.values`."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest

from flotilla.bot.views.forms import SUBMIT_ACTION, FormKey
from flotilla.local_slack import Message
from tests.e2e.slice.conftest import Run, scripted
from tests.e2e.slice.scripts import plans

FORM = {
    "fields": [
        {"name": "budget", "label": "Budget"},
        {"name": "size", "label": "Team size", "kind": "select", "options": ["Small", "Large"]},
        {"name": "notes", "label": "Notes", "kind": "long_text", "required": False},
    ]
}
STEPS = [
    {
        "index": 1,
        "title": "Budget and size",
        "assignee": "user",
        "form": FORM,
        "input": "How much, and for whom?",
    },
    {
        "index": 2,
        "title": "Write",
        "assignee": "writer",
        "input": "Plan with {{step_1.output_summary}}",
    },
]


def submits(run: Run) -> list[dict[str, Any]]:
    """The [Submit] clicks the app was sent (block_actions payloads)."""
    return [
        d.payload
        for d in run.stack.workspace.events.deliveries
        if d.kind == "block_actions" and d.payload["actions"][0]["action_id"] == SUBMIT_ACTION
    ]


def has_submit(message: Message) -> bool:
    return SUBMIT_ACTION in str(message.blocks)


async def test_a_form_of_several_fields_is_answered_in_its_message_and_the_plan_goes_on(
    start: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="flotilla")
    async with start(model=scripted(plans({"BUDGET": STEPS}))) as run:
        root = run.ask("BUDGET please")
        form = await run.says(root, "needs your input")
        types = [b["type"] for b in form.blocks or []]
        assert types == ["section", "input", "input", "input", "actions"] and has_submit(form)

        answer = {"field:budget": "10k", "field:size": "Large", "field:notes": "annual"}
        await run.driver.click("maya", form, SUBMIT_ACTION, values=answer)
        answered = await run.says(root, "Answered by")
        assert answered.ts == form.ts  # the form's own message, updated in place
        assert "Budget: 10k; Team size: Large; Notes: annual" in answered.text
        assert not has_submit(answered)
        await run.says(root, "[offline model] writer:")
        await run.quiesce()

        plan = await run.plan(root)
        assert plan.status == "completed", run.transcript(root)
        assert plan.steps[0].output_summary == "budget: 10k\nsize: Large\nnotes: annual"
        assert "views.open" not in [method for method, _ in run.stack.workspace.api_log]
        assert "form answered" in [r.getMessage() for r in caplog.records]
        # the click carried every input as Slack's state.values: {block: {action: entry}}
        values = submits(run)[0]["state"]["values"]
        assert values["field:budget"] == {"value": {"type": "plain_text_input", "value": "10k"}}
        size = values["field:size"]["value"]
        assert size["type"] == "static_select" and size["selected_option"]["value"] == "Large"


async def test_a_submit_missing_a_required_answer_is_told_and_the_form_stays_open(
    start: Callable[..., Any],
) -> None:
    async with start(model=scripted(plans({"BUDGET": STEPS}))) as run:
        root = run.ask("BUDGET please")
        form = await run.says(root, "needs your input")
        typed = {"field:budget": "10k", "field:notes": "annual"}  # no team size picked
        await run.driver.click("maya", form, SUBMIT_ACTION, values=typed)
        await run.driver.wait_for(lambda: run.driver.ephemerals("maya"), what="a sentence")
        sentence = run.driver.ephemerals("maya")[0].text
        assert "Team size is required." in sentence and "Submit again" in sentence
        assert (await run.plan(root)).steps[0].status == "in_progress"
        assert has_submit(form) and "Answered by" not in form.text  # still open

        # nothing typed was lost: picking the missing one and pressing Submit again records all
        await run.driver.click("maya", form, SUBMIT_ACTION, values={"field:size": "Small"})
        await run.says(root, "Answered by")
        await run.quiesce()
        plan = await run.plan(root)
        assert plan.steps[0].output_summary == "budget: 10k\nsize: Small\nnotes: annual"
        assert len(run.driver.ephemerals("maya")) == 1


async def test_a_double_click_is_taken_once_and_a_stale_submit_is_refused(
    start: Callable[..., Any],
) -> None:
    async with start(model=scripted(plans({"BUDGET": STEPS}))) as run:
        root = run.ask("BUDGET please")
        form = await run.says(root, "needs your input")
        run.driver.type_into("maya", form, {"field:budget": "10k", "field:size": "Small"})
        maya, app = run.driver.person("maya"), run.stack.commander
        key = FormKey((await run.plan(root)).id, 1, 1, 1).encode()
        button = {
            "type": "button",
            "action_id": SUBMIT_ACTION,
            "block_id": key,
            "value": key,
            "text": {"type": "plain_text", "text": "Submit"},
        }
        click = run.driver.ws.interactivity.message_action
        # a double click: two submits of the same answers at once; one is recorded, and
        # neither is refused (it is the same answer)
        await asyncio.gather(
            click(maya, app, form, button | {"action_ts": "1.1"}),
            click(maya, app, form, button | {"action_ts": "1.2"}),
        )
        await run.says(root, "Answered by")
        await run.quiesce()
        assert run.driver.ephemerals("maya") == []
        # a client still showing the old form (its inputs gone from the message since) clicks
        # Submit once more: refused as answered, not asked for what it lacks
        assert not has_submit(form)
        await click(maya, app, form, button | {"action_ts": "1.3"})
        await run.driver.wait_for(lambda: run.driver.ephemerals("maya"), what="a refusal")
        assert [e.text for e in run.driver.ephemerals("maya")] == [
            f"This form was already answered by <@{maya.id}>."
        ]
        step = (await run.plan(root)).steps[0]
        assert step.status == "done" and step.output_summary == "budget: 10k\nsize: Small"
