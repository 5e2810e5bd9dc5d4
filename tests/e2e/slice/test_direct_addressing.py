"""A person addressing an agent in a thread where a plan is at work – a mention of the
agent's own app, or the persona's name – gets that agent's work as a new step of the plan
(the commander adds it), answered in the thread under the agent's identity."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flotilla.agents.planning.addressing import Addressee, addressed_agent, without_address
from flotilla.storage.db import Database
from tests.e2e.slice.faults import Gate, gated

CHAIN = "research the history of our launch emails and write a short report"


async def test_an_addressed_agent_gets_a_step_and_answers_as_itself(
    start: Callable[..., Any],
) -> None:
    writer = Gate("Write up")
    async with start(model=gated(writer)) as run:
        root = run.ask(CHAIN)
        await writer.reached()  # the plan is at work
        steps = len((await run.plan(root)).steps)
        researcher = run.stack.agent_apps["researcher"]
        run.driver.post(
            "maya", "launch", f"<@{researcher.bot_user_id}> also check Initech", thread_ts=root.ts
        )
        await run.says(root, f"Plan ({steps + 1} steps)")  # the card: the step is added
        run.driver.post("maya", "launch", "@analyst: compare with Globex", thread_ts=root.ts)
        await run.says(root, f"Plan ({steps + 2} steps)")
        writer.release.set()
        await run.quiesce()
        plan = await run.plan(root)
        assert plan.status == "completed", run.transcript(root)
        added = {s.assignee: s for s in plan.steps if s.title == "As asked in the thread"}
        assert set(added) == {"researcher", "analyst"}, run.transcript(root)
        assert added["researcher"].input == "also check Initech"
        assert added["analyst"].input == "compare with Globex"
        assert all(s.status == "done" for s in added.values())
        for name, step in added.items():
            answer = next(
                m
                for m in run.messages(root)
                if (m.metadata or {}).get("event_type") == "flotilla_result"
                and m.metadata["event_payload"]["step"] == step.index
            )
            if name == "researcher":  # its own app
                assert answer.app_id == researcher.app_id
            else:  # the analyst's persona
                assert answer.username and "analyst" in answer.username.lower()


def test_who_a_message_is_addressed_to() -> None:
    agents = [Addressee("researcher", "Researcher", "U0RES"), Addressee("analyst", "Analyst")]
    assert addressed_agent("<@U0RES> also check Initech", agents) == "researcher"
    assert addressed_agent("@analyst compare with Globex", agents) == "analyst"
    assert addressed_agent("Analyst, compare with Globex", agents) == "analyst"
    assert addressed_agent("analyst: compare", agents) == "analyst"
    assert addressed_agent("the analyst should compare", agents) is None
    assert addressed_agent("<@U0OTHER> hello", agents) is None
    assert without_address("<@U0RES> also check Initech") == "also check Initech"
    assert without_address("@analyst: compare with Globex") == "compare with Globex"


async def test_two_agents_addressed_at_the_same_instant_both_get_a_step(
    start: Callable[..., Any], empty_db: Database
) -> None:
    """Both commander turns see the same plan; the second one's new step is numbered after
    the first one's instead of being refused ("I could not change the plan as asked")."""
    writer = Gate("Write up")
    async with start(db=empty_db, model=gated(writer)) as run:
        root = run.ask(CHAIN)
        await writer.reached()  # the plan is at work
        steps = len((await run.plan(root)).steps)
        researcher = run.stack.agent_apps["researcher"]
        run.driver.post(
            "maya", "launch", f"<@{researcher.bot_user_id}> also check Initech", thread_ts=root.ts
        )
        run.driver.post("dev", "launch", "@analyst: compare with Globex", thread_ts=root.ts)
        await run.says(root, f"Plan ({steps + 2} steps)")
        writer.release.set()
        await run.quiesce()
        plan = await run.plan(root)
        assert plan.status == "completed", run.transcript(root)
        added = {s.assignee: s for s in plan.steps if s.title == "As asked in the thread"}
        assert set(added) == {"researcher", "analyst"}, run.transcript(root)
        assert {s.index for s in added.values()} == {steps + 1, steps + 2}
        assert all(s.status == "done" for s in added.values()), run.transcript(root)
        assert "could not change the plan" not in run.transcript(root)


async def test_two_additions_to_a_step_at_the_same_instant_are_both_kept(
    start: Callable[..., Any], empty_db: Database
) -> None:
    """Two people ask for more at once: both commander turns are shown the writer's input
    and each adds its request to it – the second edit is re-applied to the input as the
    first left it, instead of putting back the input it was shown (which lost the first)."""
    research = Gate("Research")
    async with start(db=empty_db, model=gated(research)) as run:
        root = run.ask(CHAIN)
        await research.reached()  # the writer's step is pending
        run.driver.post("maya", "launch", "also mention the free trial", thread_ts=root.ts)
        run.driver.post("dev", "launch", "also include the annual discount", thread_ts=root.ts)
        await run.driver.wait_for(
            lambda: sum("Noted" in m.text for m in run.messages(root)) == 2, what="two replies"
        )
        research.release.set()
        await run.quiesce()
        plan = await run.plan(root)
        assert plan.status == "completed", run.transcript(root)
        writer = next(s for s in plan.steps if s.assignee == "writer")
        assert "free trial" in writer.input and "annual discount" in writer.input, writer.input
