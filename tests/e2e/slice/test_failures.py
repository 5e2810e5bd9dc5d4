"""Failure paths as people see them: each on_failure policy, a transient retry, the card."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flotilla.agents.core.retry_policy import STEP, RetryPolicies
from tests.e2e.slice.conftest import scripted
from tests.e2e.slice.scripts import combine, flaky, plans


def two_steps(on_failure: str, first_input: str) -> list[dict[str, Any]]:
    return [
        {
            "index": 1,
            "title": "Find the numbers",
            "assignee": "researcher",
            "input": first_input,
            "on_failure": on_failure,
        },
        {
            "index": 2,
            "title": "Write it up",
            "assignee": "writer",
            "input": "Write up: {{step_1.output_summary}}",
        },
    ]


async def test_abort_plan_stops_everything_after_a_real_failure(
    start: Callable[..., Any],
) -> None:
    model = scripted(plans({"ABORT": two_steps("abort_plan", "[fail] find the numbers")}))
    async with start(model=model) as run:
        root = run.ask("ABORT please")
        await run.says(root, "The plan was stopped")
        await run.quiesce()
        plan = await run.plan(root)
        assert plan.status == "aborted"
        assert [s.status for s in plan.steps] == ["failed", "skipped"]
        # people read a sentence, never the provider's status line
        reason = plan.steps[0].failure_reason or ""
        assert reason and "400" not in reason and "Traceback" not in reason
        transcript = run.transcript(root)
        assert "1 ❌" in transcript and "2 ⏭" in transcript
        # nothing was built on the missing foundation: the writer was never addressed
        assert not [m for m in run.messages(root) if m.text.startswith("@writer")]


async def test_continue_skips_an_optional_step(start: Callable[..., Any]) -> None:
    model = scripted(plans({"OPTIONAL": two_steps("continue", "[fail] find the numbers")}))
    async with start(model=model) as run:
        root = run.ask("OPTIONAL please")
        await run.says(root, "[offline model] writer:")
        await run.quiesce()
        plan = await run.plan(root)
        assert plan.status == "completed", run.transcript(root)
        assert [s.status for s in plan.steps] == ["skipped", "done"]
        assert "skipped:" in run.transcript(root)


async def test_ask_commander_lets_the_commander_retry(start: Callable[..., Any]) -> None:
    model = scripted(plans({"DECIDE": two_steps("ask_commander", "[fail] find the numbers")}))
    async with start(model=model) as run:
        root = run.ask("DECIDE please")
        await run.says(root, "[offline model] writer:")
        await run.quiesce()
        plan = await run.plan(root)
        assert plan.status == "completed", run.transcript(root)
        first = plan.steps[0]
        assert first.status == "done" and first.attempts == 2
        assert "[fail]" not in first.input  # the commander retried it with a new input
        assert [d for d in run.dispatches(root) if d[0] == 1] == [(1, 1), (1, 2)]


async def test_transient_failure_is_retried_quietly_then_succeeds(
    start: Callable[..., Any],
) -> None:
    model = scripted(
        combine(
            plans({"FLAKY": two_steps("abort_plan", "FLAKY find the numbers")}),
            flaky("FLAKY", failures=1),
        )
    )
    async with start(model=model) as run:
        root = run.ask("FLAKY please")
        await run.says(root, "retrying (2/3)")
        plan = await run.plan(root)
        first = plan.steps[0]
        assert first.status == "pending" and first.transient_failures == 1
        assert first.not_before is not None and first.not_before > run.clock()

        run.clock.advance(31)  # past the first backoff; no real waiting
        run.service.wake()
        await run.says(root, "[offline model] writer:")
        await run.quiesce()
        plan = await run.plan(root)
        assert plan.status == "completed", run.transcript(root)
        assert plan.steps[0].attempts == 2
        # quiet: no failure message in the thread, only the card said it was retrying
        assert "failed" not in run.transcript(root).lower()


async def test_a_truly_broken_step_stops_at_the_cap(start: Callable[..., Any]) -> None:
    model = scripted(
        combine(
            plans({"BROKEN": two_steps("abort_plan", "BROKEN find the numbers")}),
            flaky("BROKEN", failures=99),
        )
    )
    async with start(model=model, retry=RetryPolicies(step=STEP.with_attempts(2))) as run:
        root = run.ask("BROKEN please")
        await run.says(root, "retrying (2/2)")
        run.clock.advance(31)
        run.service.wake()
        await run.says(root, "The plan was stopped")
        await run.quiesce()
        plan = await run.plan(root)
        assert plan.status == "aborted"
        assert plan.steps[0].attempts == 2
        assert "gave up after 2 attempts" in (plan.steps[0].failure_reason or "")
