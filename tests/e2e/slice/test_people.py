"""People in the thread: cancel from the card, interjections, who may answer a form."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flotilla.bot.views.forms import INLINE_ACTION, OPEN_ACTION, SUBMIT_ACTION, FormKey
from flotilla.bot.views.plan_card import CANCEL_ACTION
from flotilla.local_slack.driver import block_action
from tests.e2e.slice.conftest import REQUEST, Run, scripted
from tests.e2e.slice.scripts import call, plans, steer, text


def card_of(run: Run, root: Any) -> Any:
    return next(m for m in run.messages(root) if "Plan (" in m.text)


async def test_cancel_from_the_card(start: Callable[..., Any]) -> None:
    async with start() as run:
        root = run.ask(REQUEST)
        form = await run.says(root, "needs your input")
        [(element, block_id)] = [  # the form's button
            (el, block["block_id"])
            for block in form.blocks or []
            if block.get("type") == "actions"
            for el in block["elements"]
        ]

        await run.driver.click("dev", card_of(run, root), CANCEL_ACTION)  # not the requester
        await run.driver.wait_for(lambda: run.driver.ephemerals("dev"), what="a refusal")
        assert "Only <@" in run.driver.ephemerals("dev")[0].text
        assert (await run.plan(root)).status == "paused"

        await run.driver.click("maya", card_of(run, root), CANCEL_ACTION)
        await run.says(root, "Plan cancelled by")
        await run.quiesce()
        plan = await run.plan(root)
        assert plan.status == "cancelled"
        assert [s.status for s in plan.steps] == ["done", "done", "skipped", "skipped", "skipped"]
        transcript = run.transcript(root)
        assert "Cancel plan" not in transcript  # the card lost its button
        assert "cancelled" in card_of(run, root).text

        # the open form is closed: it says so and has no button left to click
        await run.quiesce()
        closed = next(m for m in run.messages(root) if m.ts == form.ts)
        assert "The plan was cancelled" in closed.text
        assert not any(b.get("type") == "actions" for b in closed.blocks or [])
        assert not [m for m in run.messages(root) if m.text.startswith("@writer")]

        # a client still showing the form's button (not refreshed yet) clicks it: told why
        before = len(run.driver.ephemerals("maya"))
        await run.driver.ws.interactivity.message_action(
            run.driver.person("maya"),
            run.stack.commander,
            closed,
            block_action(element, block_id, None, "2.0"),
        )
        await run.driver.wait_for(
            lambda: len(run.driver.ephemerals("maya")) > before, what="why the form is closed"
        )
        assert (
            run.driver.ephemerals("maya")[-1].text == "This form is closed: the plan was cancelled."
        )


async def test_an_interjection_edits_a_pending_step(start: Callable[..., Any]) -> None:
    def edit() -> list[Any]:
        return [
            call(
                "edit_step", {"index": 4, "input": "Draft the sales note; mention the free trial."}
            ),
            text("Noted – added to the writer's step before it starts."),
        ]

    async with start(model=scripted(steer("free trial", edit))) as run:
        root = run.ask(REQUEST)
        form = await run.says(root, "needs your input")
        run.driver.post("dev", "launch", "can we also mention the free trial?", thread_ts=root.ts)
        await run.says(root, "Noted – added to the writer's step")
        plan = await run.plan(root)
        assert plan.steps[3].input == "Draft the sales note; mention the free trial."
        assert plan.steps[3].status == "pending"

        await run.driver.click("maya", form, SUBMIT_ACTION, values={"field:tiers": "Pro"})
        writer = await run.says(root, "mention the free trial", from_="Flotilla")
        assert writer.text.startswith("@writer")
        await run.says(root, "[offline model] commander:")
        await run.quiesce()
        assert (await run.plan(root)).status == "completed"


async def test_only_the_requester_answers_a_form(start: Callable[..., Any]) -> None:
    async with start() as run:
        root = run.ask(REQUEST)
        form = await run.says(root, "needs your input")
        await run.driver.click("dev", form, SUBMIT_ACTION, values={"field:tiers": "Pro"})
        await run.driver.wait_for(lambda: run.driver.ephemerals("dev"), what="a refusal")
        assert "who made the request" in run.driver.ephemerals("dev")[0].text
        plan = await run.plan(root)
        assert plan.steps[2].status == "in_progress"

        # a workspace admin may answer for them; a second answer is refused
        await run.driver.click("alex", form, SUBMIT_ACTION, values={"field:tiers": "Enterprise"})
        await run.says(root, "Answered by")
        await run.quiesce()
        plan = await run.plan(root)
        assert plan.steps[2].status == "done"
        assert "Enterprise" in (plan.steps[2].output_summary or "")


async def test_a_second_submission_is_refused(start: Callable[..., Any]) -> None:
    async with start() as run:
        root = run.ask("[ask] research the history of our launch emails and write a short report")
        question = await run.says(root, "asks:")
        plan = await run.plan(root)
        key = FormKey(plan.id, 1, 1, 1).encode()
        await run.driver.click("maya", question, INLINE_ACTION, value="2024 only")
        await run.says(root, "Answered by")
        await run.quiesce()
        # The message was replaced, so its input is gone; a client holding the old message
        # (a double click, a second device) sends the same action again.
        await run.driver.ws.interactivity.message_action(
            run.driver.person("maya"),
            run.stack.commander,
            question,
            {
                "type": "plain_text_input",
                "action_id": INLINE_ACTION,
                "block_id": key,
                "value": "again",
                "action_ts": "1.0",
            },
        )
        await run.driver.wait_for(lambda: run.driver.ephemerals("maya"), what="a refusal")
        assert "already answered" in run.driver.ephemerals("maya")[0].text
        plan = await run.plan(root)
        assert plan.steps[0].question is not None
        assert plan.steps[0].question.answer == {"answer": "2024 only"}


LARGE_FORM = {
    "fields": [{"name": "budget", "label": "Budget"}, {"name": "owner", "label": "Owner"}]
    + [{"name": f"extra{i}", "label": f"Extra {i}", "required": False} for i in range(4)]
}


async def test_a_large_form_is_answered_in_a_modal_that_stays_open_on_a_blank_answer(
    start: Callable[..., Any],
) -> None:
    """More fields than a message holds (6 > 5): the [Answer] button opens the modal."""
    steps = [
        {"index": 1, "title": "Budget and owner", "assignee": "user", "form": LARGE_FORM},
        {
            "index": 2,
            "title": "Write",
            "assignee": "writer",
            "input": "Plan with {{step_1.output_summary}}",
        },
    ]
    async with start(model=scripted(plans({"BUDGET": steps}))) as run:
        root = run.ask("BUDGET please")
        message = await run.says(root, "needs your input")
        assert "Submit" not in str(message.blocks) and "field:budget" not in str(message.blocks)
        await run.driver.click("maya", message, OPEN_ACTION)
        await run.modal("maya")
        outcome = await run.driver.submit("maya", {"field:budget": "   ", "field:owner": "Dev"})
        assert outcome.response_action == "errors"
        assert outcome.errors == {"field:budget": "Budget is required."}
        assert outcome.view is not None  # the modal stays open, the error under the field
        assert (await run.plan(root)).steps[0].status == "in_progress"

        await run.driver.submit("maya", {"field:budget": "10k", "field:owner": "Dev"})
        await run.says(root, "Answered by")
        await run.says(root, "[offline model] writer:")
        await run.quiesce()
        plan = await run.plan(root)
        assert plan.steps[0].output_summary == "budget: 10k\nowner: Dev"
        calls = [method for method, _ in run.stack.workspace.api_log]
        assert calls.count("views.open") == 1


async def test_an_empty_inline_answer_gets_a_hint(start: Callable[..., Any]) -> None:
    async with start() as run:
        root = run.ask("[ask] research the history of our launch emails and write it up")
        question = await run.says(root, "asks:")
        await run.driver.click("maya", question, INLINE_ACTION, value="   ")
        await run.driver.wait_for(lambda: run.driver.ephemerals("maya"), what="a hint")
        assert "type an answer" in run.driver.ephemerals("maya")[0].text
        assert (await run.plan(root)).steps[0].status == "blocked"


async def test_replies_after_the_plan_finished_need_a_mention(start: Callable[..., Any]) -> None:
    async with start() as run:
        root = run.ask("research the history of our launch emails and write a short report")
        await run.says(root, "[offline model] commander:")
        await run.quiesce()
        count = len(run.messages(root))
        run.driver.post("dev", "launch", "thanks, looks great", thread_ts=root.ts)
        await run.quiesce()
        assert len(run.messages(root)) == count + 1  # no answer to people talking
        run.driver.mention("dev", "launch", run.stack.commander, "what next?", thread_ts=root.ts)
        await run.says(root, "what next?", from_="Flotilla")  # a mention is answered
