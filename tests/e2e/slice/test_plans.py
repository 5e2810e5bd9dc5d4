"""Plans end to end: chain, diamond with a form, blocked and resumed, identities."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flotilla.bot.views.forms import INLINE_ACTION, SUBMIT_ACTION
from tests.e2e.slice.conftest import REQUEST, Run


def dispatch_order(run: Run, root: Any) -> list[str]:
    """The agents the commander addressed, in thread order."""
    names = []
    for message in run.messages(root)[1:]:
        meta = message.metadata or {}
        if meta.get("event_type") == "flotilla_dispatch" and message.text.startswith(("@", "<@")):
            names.append(message.text.split()[0])
    return names


async def test_diamond_with_a_form_runs_to_the_synthesis(start: Callable[..., Any]) -> None:
    async with start() as run:
        root = run.ask(REQUEST)
        form = await run.says(root, "needs your input")
        # one step at a time, lowest index first: researcher, then analyst, then the form
        plan = await run.plan(root)
        assert [s.status for s in plan.steps] == [
            "done",
            "done",
            "in_progress",
            "pending",
            "pending",
        ]
        researcher = run.stack.agent_apps["researcher"]
        assert dispatch_order(run, root) == [f"<@{researcher.bot_user_id}>", "@analyst"]

        await run.driver.click(
            "maya",
            form,
            SUBMIT_ACTION,
            values={"field:tiers": "Pro", "field:notes": "annual discount"},
        )
        await run.says(root, "Answered by")
        final = await run.says(root, "[offline model] commander:", from_="Flotilla")
        await run.quiesce()

        plan = await run.plan(root)
        assert plan.status == "completed", run.transcript(root)
        assert [s.status for s in plan.steps] == ["done"] * 5
        assert "Pro" in (plan.steps[2].output_summary or "")
        transcript = run.transcript(root)
        assert "@writer" in transcript and "✅ Answered by @maya" in transcript
        assert "5 ✅" in transcript  # the card, edited in place
        assert sum("== Plan (5 steps) ==" in line for line in transcript.splitlines()) == 1
        # the writer got the upstream summaries, not transcripts
        writer_dispatch = next(m for m in run.messages(root) if m.text.startswith("@writer"))
        assert "Pro" in writer_dispatch.text
        assert final.ts == run.messages(root)[-1].ts  # the synthesis closes the thread


async def test_chain_passes_summaries_along(start: Callable[..., Any]) -> None:
    async with start() as run:
        root = run.ask("research the history of our launch emails and write a short report")
        await run.says(root, "[offline model]", from_="Writer")
        await run.quiesce()
        plan = await run.plan(root)
        assert plan.status == "completed", run.transcript(root)
        assert [s.assignee for s in plan.steps] == ["researcher", "writer", "commander"]
        assert all(s.attempts == 1 for s in plan.steps)
        assert plan.steps[0].output_summary
        writer_input = next(m.text for m in run.messages(root) if m.text.startswith("@writer"))
        assert plan.steps[0].output_summary.splitlines()[0][:40] in writer_input


async def test_a_short_question_gets_a_plain_answer(start: Callable[..., Any]) -> None:
    async with start() as run:
        root = run.ask("what time zone is the launch in?")
        await run.says(root, "[offline model]", from_="Flotilla")
        await run.quiesce()
        conversation = await run.service.find_conversation(root.channel, root.ts)
        assert await run.service.reconciler.plan(conversation.id) is None
        assert "Plan (" not in run.transcript(root)


async def test_blocked_step_is_answered_inline_and_resumes(start: Callable[..., Any]) -> None:
    async with start() as run:
        root = run.ask("[ask] research the history of our launch emails and write a short report")
        question = await run.says(root, "asks:")
        plan = await run.plan(root)
        assert plan.status == "paused" and plan.steps[0].status == "blocked"
        await run.driver.click("maya", question, INLINE_ACTION, value="focus on 2024")
        await run.says(root, "Answered by")
        await run.says(root, "[offline model]", from_="Writer")
        await run.quiesce()
        plan = await run.plan(root)
        assert plan.status == "completed", run.transcript(root)
        first = plan.steps[0]
        assert first.attempts == 1  # the same run resumed, not a new attempt
        assert first.question is not None and first.question.answer == {"answer": "focus on 2024"}
        assert "focus on 2024" in run.transcript(root)


async def test_both_identity_kinds_post_under_their_own_names(start: Callable[..., Any]) -> None:
    async with start() as run:
        root = run.ask(REQUEST)
        await run.says(root, "needs your input")
        messages = run.messages(root)
        researcher = run.stack.agent_apps["researcher"]
        own = [m for m in messages if m.bot_id == researcher.bot_id]
        assert len(own) == 1 and own[0].username is None  # its own app, its own bot user
        persona = [m for m in messages if m.username == "Analyst"]
        assert len(persona) == 1
        assert persona[0].bot_id == run.stack.commander.bot_id  # the commander's app posts it
        assert persona[0].subtype == "bot_message"
        for message in own + persona:
            assert (message.metadata or {}).get("event_type") == "flotilla_result"
