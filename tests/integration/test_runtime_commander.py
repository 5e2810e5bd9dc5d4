"""Commander turns scripted with FunctionModel: plans validated by agents.planning.plan,
operations."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from flotilla.agents.core.errors import PermanentError
from flotilla.agents.planning.plan import AbortPlan, RetryStep, SkipStep
from flotilla.agents.running.commander import CommanderWake, commander_turn
from flotilla.agents.running.runtime import RunJob
from flotilla.agents.tools.registry import AgentSpec
from flotilla.storage.db import Database
from flotilla.storage.runs import load_run

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
AGENTS = [
    AgentSpec("researcher", "Researcher", "Finds facts and sources.", "research"),
    AgentSpec("writer", "Writer", "Drafts notes for people.", "write"),
]


def clock() -> datetime:
    return NOW


def job(key: str = "commander:1:100.1", text: str = "research X and write a note") -> RunJob:
    return RunJob(run_key=key, team_id="T1", input=text, request=text, channel_id="C1")


def step(
    index: int, assignee: str, wait_for: list[int] | None = None, **extra: Any
) -> dict[str, Any]:
    data: dict[str, Any] = {"index": index, "title": f"step {index}", "assignee": assignee, **extra}
    if wait_for is not None:
        data["wait_for"] = wait_for
    return data


GOOD = [
    step(1, "researcher", input="Research {{request}}"),
    step(2, "writer", input="Write from {{step_1.output_summary}}"),
]


def returned(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    return [p for p in messages[-1].parts if isinstance(p, ToolReturnPart)]


async def test_a_request_becomes_a_validated_plan(db: Database) -> None:
    seen: list[AgentInfo] = []

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(info)
        if isinstance(messages[-1].parts[0], UserPromptPart):
            return ModelResponse(parts=[ToolCallPart("create_plan", {"steps": GOOD})])
        return ModelResponse(parts=[TextPart("I made a plan.")])

    turn = await commander_turn(db, job(), AGENTS, model=FunctionModel(script), now=clock)

    assert turn.plan is not None
    assert [(s.index, s.assignee) for s in turn.plan.steps] == [(1, "researcher"), (2, "writer")]
    assert turn.plan.steps[1].wait_for == [1]  # normalised by validate_plan
    assert turn.reply == "I made a plan." and turn.operations == []
    tools = {t.name for t in seen[0].function_tools}
    assert tools == {"reply", "create_plan"}
    assert "- researcher: Finds facts and sources." in (seen[0].instructions or "")
    assert "- writer: Drafts notes for people." in (seen[0].instructions or "")


async def test_an_invalid_plan_goes_back_to_the_model_and_the_correction_is_kept(
    db: Database,
) -> None:
    problems: list[str] = []
    bad = [step(1, "researcher", wait_for=[2]), step(2, "ghost")]

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        parts = returned(messages)
        if not parts:
            return ModelResponse(parts=[ToolCallPart("create_plan", {"steps": bad})])
        if parts[0].outcome != "success":
            problems.append(str(parts[0].content))
            return ModelResponse(parts=[ToolCallPart("create_plan", {"steps": GOOD})])
        return ModelResponse(parts=[TextPart("fixed")])

    turn = await commander_turn(db, job(), AGENTS, model=FunctionModel(script), now=clock)

    assert turn.plan is not None and len(turn.plan.steps) == 2
    assert len(problems) == 1
    # the model is told precisely what to fix: the forward wait and the unknown assignee
    assert "step 1" in problems[0] and "ghost" in problems[0]


async def test_a_plan_still_invalid_after_the_bounded_retries_is_a_real_failure(
    db: Database,
) -> None:
    calls: list[int] = []

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append(1)
        return ModelResponse(parts=[ToolCallPart("create_plan", {"steps": [step(1, "ghost")]})])

    with pytest.raises(PermanentError) as failure:
        await commander_turn(
            db, job(), AGENTS, model=FunctionModel(script), plan_retries=2, now=clock
        )
    assert len(calls) == 3  # first try + 2 corrections
    # people are told what was still wrong, not pydantic-ai's retry internals
    assert str(failure.value).startswith("I could not write a valid plan.")
    assert "ghost" in str(failure.value) and "max retries" not in str(failure.value)
    async with db.read() as conn:
        run = await load_run(conn, "commander:1:100.1")
    assert run is not None and run.status == "failed"


async def test_a_short_request_is_answered_with_reply(db: Database) -> None:
    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not returned(messages):
            return ModelResponse(parts=[ToolCallPart("reply", {"text": "Paris."})])
        return ModelResponse(parts=[TextPart("done")])

    turn = await commander_turn(
        db, job(text="capital of France?"), AGENTS, model=FunctionModel(script), now=clock
    )
    assert turn.reply == "Paris." and turn.plan is None and turn.operations == []


async def test_woken_after_a_failure_it_proposes_operations_in_order(db: Database) -> None:
    seen: list[AgentInfo] = []
    prompts: list[str] = []

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(info)
        if not returned(messages):
            prompts.append(str(getattr(messages[-1].parts[0], "content", "")))
            return ModelResponse(
                parts=[
                    ToolCallPart("retry_step", {"index": 2, "input": "try again simpler"}),
                    ToolCallPart("skip_step", {"index": 3, "reason": "not needed"}),
                    ToolCallPart("abort_plan", {"reason": "actually no"}),
                ]
            )
        return ModelResponse(parts=[TextPart("Retrying step 2.")])

    class S:
        def __init__(self, index: int, status: str, failure: str | None = None) -> None:
            self.index, self.status, self.failure_reason = index, status, failure
            self.title, self.assignee, self.input, self.output_summary = (
                "t",
                "researcher",
                "in",
                None,
            )

    wake = CommanderWake(
        event="Step 2 (researcher) failed: provider refused",
        steps=[S(1, "done"), S(2, "failed", "provider refused"), S(3, "pending")],
        failed_step=2,
    )
    turn = await commander_turn(
        db, job(text="(plan event)"), AGENTS, model=FunctionModel(script), wake=wake, now=clock
    )

    assert turn.operations == [
        RetryStep(index=2, input="try again simpler"),
        SkipStep(index=3, reason="not needed"),
        AbortPlan(reason="actually no"),
    ]
    assert turn.plan is None and turn.reply == "Retrying step 2."
    tools = {t.name for t in seen[0].function_tools}
    assert "create_plan" not in tools
    assert {
        "retry_step",
        "skip_step",
        "add_steps",
        "edit_step",
        "abort_plan",
        "cancel_plan",
    } <= tools
    assert "Failed step: 2" in prompts[0] and "- step 2 [failed]" in prompts[0]


async def test_a_finished_turn_run_again_returns_the_same_proposals_without_a_model_call(
    db: Database,
) -> None:
    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not returned(messages):
            return ModelResponse(parts=[ToolCallPart("create_plan", {"steps": GOOD})])
        return ModelResponse(parts=[TextPart("ok")])

    first = await commander_turn(db, job(), AGENTS, model=FunctionModel(script), now=clock)

    def never(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise AssertionError("called again")

    again = await commander_turn(db, job(), AGENTS, model=FunctionModel(never), now=clock)
    assert again == first


async def test_runtime_fields_and_disabled_agents_are_explained_in_sentences(db: Database) -> None:
    problems: list[str] = []
    sneaky = [
        step(1, "researcher", status="done", output_summary="all done already"),
        step(2, "sleepy"),
    ]
    agents = [*AGENTS, AgentSpec("sleepy", "Sleepy", "naps", "zzz", enabled=False)]

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        assert "sleepy" not in (info.instructions or "")  # only enabled agents are listed
        parts = returned(messages)
        if not parts:
            return ModelResponse(parts=[ToolCallPart("create_plan", {"steps": sneaky})])
        if parts[0].outcome != "success":
            problems.append(str(parts[0].content))
            if len(problems) == 1:
                clean = [step(1, "researcher"), step(2, "sleepy")]
                return ModelResponse(parts=[ToolCallPart("create_plan", {"steps": clean})])
            return ModelResponse(parts=[ToolCallPart("create_plan", {"steps": GOOD})])
        return ModelResponse(parts=[TextPart("ok")])

    turn = await commander_turn(db, job(), agents, model=FunctionModel(script), now=clock)

    assert turn.plan is not None and [s.assignee for s in turn.plan.steps] == [
        "researcher",
        "writer",
    ]
    assert "only the orchestrator writes" in problems[0]
    assert "sleepy" in problems[1] and "disabled" in problems[1]


async def test_added_steps_are_checked_against_the_stored_plan(db: Database) -> None:
    from flotilla.agents.planning.plan import AddSteps, Step

    stored = [
        Step(index=1, title="a", assignee="researcher", status="done", output_summary="x"),
        Step(index=2, title="b", assignee="writer", wait_for=(1,), status="failed"),
    ]
    problems: list[str] = []

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        parts = returned(messages)
        if not parts:  # index 1 exists already
            return ModelResponse(parts=[ToolCallPart("add_steps", {"steps": [step(1, "writer")]})])
        if parts[0].outcome != "success":
            problems.append(str(parts[0].content))
            fixed = [step(3, "writer", wait_for=[1], input="{{step_1.output_summary}}")]
            return ModelResponse(parts=[ToolCallPart("add_steps", {"steps": fixed})])
        return ModelResponse(parts=[TextPart("added")])

    wake = CommanderWake(event="Step 2 failed", steps=stored, failed_step=2)
    turn = await commander_turn(
        db, job(), AGENTS, model=FunctionModel(script), wake=wake, now=clock
    )

    assert problems and "step" in problems[0]
    assert len(turn.operations) == 1
    added = turn.operations[0]
    assert isinstance(added, AddSteps) and [s.index for s in added.steps] == [3]
