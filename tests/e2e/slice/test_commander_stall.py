"""The commander cannot stall a plan: after a failed step under `ask_commander`, a
commander that only replies, that errors every time, or that retries the step for ever is
given a bounded number of turns; then the plan stops with a sentence saying why, nothing
is left in progress and nothing is left waiting in the outbox."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic_ai.exceptions import ModelHTTPError, ModelRequestRejectedError
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo
from sqlalchemy import select

from flotilla.agents.core.retry_policy import COMMANDER
from flotilla.agents.planning.plan import MAX_COMMANDER_RETRIES, Plan
from flotilla.bot.views.forms import INLINE_ACTION
from flotilla.local_slack import Message
from flotilla.storage.tables import OutboxEntry
from tests.e2e.slice.conftest import Run, scripted
from tests.e2e.slice.scripts import Script, answered, call, combine, plans, text, tools_of

STEPS = [
    {
        "index": 1,
        "title": "Find the numbers",
        "assignee": "researcher",
        "input": "[fail] find the numbers",
        "on_failure": "ask_commander",
    },
    {
        "index": 2,
        "title": "Write it up",
        "assignee": "writer",
        "input": "Write up: {{step_1.output_summary}}",
    },
]
GAVE_UP = "I could not decide how to continue after step 1 failed"


class Woken:
    """The commander's turns after a failure (the tools it gets then include retry_step),
    answered by `respond`; every such turn is counted."""

    def __init__(self, respond: Callable[[list[ModelMessage]], ModelResponse]) -> None:
        self.respond = respond
        self.turns = 0

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse | None:
        if "retry_step" not in tools_of(info):
            return None
        if not answered(messages):
            self.turns += 1
        return self.respond(messages)


def only_replies(messages: list[ModelMessage]) -> ModelResponse:
    return text("Hmm, that is unfortunate. Let me think about it.")


def errors(messages: list[ModelMessage]) -> ModelResponse:
    raise ModelHTTPError.for_category(
        ModelRequestRejectedError,
        status_code=400,
        model_name="scripted",
        body={"error": "the commander's model refused"},
    )


def retries_for_ever(messages: list[ModelMessage]) -> ModelResponse:
    if answered(messages):
        return text("Trying step 1 once more.")
    return call("retry_step", {"index": 1})


def model_for(woken: Woken) -> Any:
    script: Script = combine(plans({"STALL": STEPS}), woken)
    return scripted(script)


async def pending_rows(run: Run) -> list[tuple[str, str]]:
    """(kind, key) of every outbox row still waiting to be performed."""
    async with run.service.db.read() as conn:
        rows = await conn.execute(
            select(OutboxEntry.kind, OutboxEntry.idempotency_key).where(
                OutboxEntry.state == "pending"
            )
        )
    return [(kind, key) for kind, key in rows]


async def past_the_backoff(run: Run) -> None:
    """Move the service's clock past the commander's retry backoff and let it act."""
    run.clock.advance(COMMANDER.cap.total_seconds() + 1)
    run.service.wake()
    await run.quiesce()


async def stops_after_bounded_turns(
    run: Run, woken: Woken, first_turns: int
) -> tuple[Plan, Message]:
    """Step 1 failed and the commander had `first_turns` turns on it: the stall handling
    asks again `commander_retries` times (each after the backoff), then stops the plan."""
    root = run.ask("STALL please")
    await run.quiesce()
    retries = run.service.executor.context.options.commander_retries
    assert woken.turns == first_turns, run.transcript(root)
    for n in range(retries):
        plan = await run.plan(root)
        assert plan.status == "running", run.transcript(root)  # not stopped early
        await past_the_backoff(run)
        assert woken.turns == first_turns + n + 1
    await run.says(root, GAVE_UP)
    plan = await run.plan(root)
    assert plan.status == "aborted", run.transcript(root)
    assert [s.status for s in plan.steps] == ["failed", "skipped"]
    assert not [s for s in plan.steps if s.status in ("pending", "in_progress", "blocked")]
    # the stop is said once, with the reason, and nothing else is asked afterwards
    closing = [m for m in run.messages(root) if m.text.startswith("The plan was stopped")]
    assert len(closing) == 1 and GAVE_UP in closing[0].text, run.transcript(root)
    # a turn's row may still be held when the abort's own cancel reached its job as it
    # settled (agents/delivering/executor.py cancel_runs): within one lease it is dropped, unasked
    run.clock.advance(run.service.executor.context.options.lease.total_seconds() + 1)
    run.service.wake()
    await run.quiesce()
    assert woken.turns == first_turns + retries
    assert await pending_rows(run) == []
    assert not [m for m in run.messages(root) if m.text.startswith("@writer")]
    return plan, root


async def test_a_commander_that_only_replies_cannot_stall_the_plan(
    start: Callable[..., Any],
) -> None:
    woken = Woken(only_replies)
    async with start(model=model_for(woken)) as run:
        plan, root = await stops_after_bounded_turns(run, woken, first_turns=1)
        assert plan.steps[0].attempts == 1
        assert "Let me think about it" in run.transcript(root)  # its replies were posted


async def test_a_commander_that_errors_every_time_cannot_stall_the_plan(
    start: Callable[..., Any],
) -> None:
    woken = Woken(errors)
    async with start(model=model_for(woken)) as run:
        plan, root = await stops_after_bounded_turns(run, woken, first_turns=1)
        assert plan.steps[0].attempts == 1
        # people read sentences, never a traceback or the provider's raw answer
        transcript = run.transcript(root)
        assert "Traceback" not in transcript and "the commander's model refused" not in transcript


async def test_a_commander_that_retries_for_ever_is_refused_at_the_cap(
    start: Callable[..., Any],
) -> None:
    woken = Woken(retries_for_ever)
    async with start(model=model_for(woken)) as run:
        # the first failure and each retry's failure wake the commander; the turn after
        # the last allowed retry is refused, and the stall handling takes over from there
        plan, root = await stops_after_bounded_turns(
            run, woken, first_turns=MAX_COMMANDER_RETRIES + 1
        )
        first = plan.steps[0]
        assert (first.attempts, first.retries) == (MAX_COMMANDER_RETRIES + 1, MAX_COMMANDER_RETRIES)
        assert run.dispatches(root) == [(1, n) for n in range(1, MAX_COMMANDER_RETRIES + 2)]
        # the refusals are the commander's own business (the log): people never read them
        refusals = [m for m in run.messages(root) if "already retried" in m.text]
        assert refusals == [], run.transcript(root)


WITH_A_FORM = [
    {
        "index": 1,
        "title": "Find the numbers",
        "assignee": "researcher",
        "input": "[fail] find the numbers",
        "on_failure": "ask_commander",
    },
    {
        "index": 2,
        "title": "Pick the tiers",
        "assignee": "user",
        "wait_for": [],
        "form": {"fields": [{"name": "tiers", "label": "Which tiers?"}]},
    },
    {
        "index": 3,
        "title": "Write it up",
        "assignee": "writer",
        "wait_for": [1, 2],
        "input": "Write up: {{step_1.output_summary}} for {{step_2.output_summary}}",
    },
]


async def test_a_plan_that_stalls_later_is_decided_on_again(start: Callable[..., Any]) -> None:
    """Step 1 fails while a person is asked (step 2's form): the commander's reply changes
    nothing and the plan is not stuck yet. Once the form is answered nothing can run –
    the commander is asked again at once, then the stall handling stops the plan."""
    woken = Woken(only_replies)
    async with start(model=scripted(combine(plans({"LATER": WITH_A_FORM}), woken))) as run:
        root = run.ask("LATER please")
        form = await run.says(root, "needs your input")
        await run.quiesce()
        plan = await run.plan(root)
        assert [s.status for s in plan.steps] == ["failed", "in_progress", "pending"]
        assert plan.status == "paused" and woken.turns == 1, run.transcript(root)
        await past_the_backoff(run)
        assert woken.turns == 1  # a person is asked: the commander is not pressed meanwhile

        await run.driver.click("maya", form, INLINE_ACTION, value="Pro")  # one field: inline
        await run.says(root, "Answered by")
        await run.quiesce()
        assert woken.turns == 2, run.transcript(root)  # stuck now: asked again at once
        for _ in range(run.service.executor.context.options.commander_retries):
            await past_the_backoff(run)
        await run.says(root, GAVE_UP)
        await run.quiesce()
        plan = await run.plan(root)
        assert plan.status == "aborted", run.transcript(root)
        assert [s.status for s in plan.steps] == ["failed", "done", "skipped"]
        assert woken.turns == 2 + run.service.executor.context.options.commander_retries
        assert not [m for m in run.messages(root) if m.text.startswith("@writer")]
