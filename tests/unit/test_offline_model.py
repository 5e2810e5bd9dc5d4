"""The offline model drives the real pydantic-ai loop: real tool calls, deterministic answers."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults

from flotilla.agents.core.errors import PermanentError, TransientError
from flotilla.agents.running.commander import (
    CommanderDeps,
    CommanderWake,
    build_commander,
    commander_prompt,
    turn_from_history,
)
from flotilla.agents.running.offline import offline_model
from flotilla.agents.running.runtime import (
    RunDeps,
    RunJob,
    StepReport,
    build_step_agent,
    classify_error,
    step_prompt,
)
from flotilla.agents.tools.registry import AgentSpec

AGENTS = [
    AgentSpec("analyst", "Analyst", "Compares numbers.", "analyse"),
    AgentSpec("researcher", "Researcher", "Finds facts.", "research"),
    AgentSpec("writer", "Writer", "Drafts notes.", "write"),
]
NAMES = tuple(a.name for a in AGENTS)
WRITER = AgentSpec("writer", "Writer", "Drafts notes.", "write", tools=("ask_user",))


async def plan_turn(text: str) -> Any:
    job = RunJob(run_key="k", team_id="T", input=text, request=text)
    agent = build_commander(AGENTS, woken=False)
    result = await agent.run(
        commander_prompt(job, [], None), model=offline_model(), deps=CommanderDeps(assignees=NAMES)
    )
    return turn_from_history(result.all_messages()), result.all_messages()


async def test_a_comparison_request_gets_the_diamond_plan() -> None:
    turn, _ = await plan_turn(
        "compare our pricing with the top three competitors and draft a note for sales"
    )
    assert turn.plan is not None
    shape = [(s.index, s.assignee, s.wait_for) for s in turn.plan.steps]
    assert shape == [
        (1, "researcher", []),
        (2, "analyst", []),
        (3, "user", [1, 2]),
        (4, "writer", [3]),
        (5, "commander", [4]),
    ]
    form = turn.plan.steps[2].form
    assert form is not None and form.fields[0].options
    assert "{{step_1.output_summary}}" in turn.plan.steps[3].input
    assert turn.reply is not None and turn.reply.startswith("[offline model]")


async def test_a_research_request_gets_a_chain_and_markers_go_to_the_first_step() -> None:
    turn, _ = await plan_turn("research heat pumps and write a report [fail transient]")
    assert turn.plan is not None
    assert [s.assignee for s in turn.plan.steps] == ["researcher", "writer", "commander"]
    assert "[fail transient]" in turn.plan.steps[0].input
    assert "[fail transient]" not in turn.plan.steps[1].input


async def test_a_bad_plan_is_corrected_after_the_validation_errors() -> None:
    turn, messages = await plan_turn("compare pricing and draft a note [bad plan]")
    calls = [p for m in messages for p in m.parts if getattr(p, "tool_name", "") == "create_plan"]
    outcomes = [p.outcome for p in calls if p.part_kind == "tool-return"]
    assert len(outcomes) == 2 and outcomes[0] != "success" and outcomes[1] == "success"
    assert turn.plan is not None and turn.plan.steps[1].wait_for == []


async def test_a_short_request_gets_a_reply() -> None:
    turn, _ = await plan_turn("hi, who are you?")
    assert turn.plan is None
    assert turn.reply is not None and "offline model" in turn.reply and "who are you" in turn.reply


async def run_as_step(spec: AgentSpec, text: str, **kwargs: Any) -> Any:
    job = RunJob(run_key="s", team_id="T", input=text, request="the request")
    return await build_step_agent(spec).run(
        step_prompt(job, []), model=offline_model(), deps=RunDeps(job=job), **kwargs
    )


async def test_a_step_answer_is_derived_from_its_input() -> None:
    result = await run_as_step(
        WRITER, "Draft the note for sales.\nCompetitors: Acme charges 12 per seat"
    )
    assert isinstance(result.output, StepReport)
    assert result.output.message.startswith("[offline model] writer: Draft the note for sales.")
    assert "Acme charges 12 per seat" in result.output.message
    assert "Draft the note" in result.output.summary


@pytest.mark.parametrize(
    ("marker", "kind"), [("[fail transient]", TransientError), ("[fail]", PermanentError)]
)
async def test_failure_markers_raise_provider_errors_of_each_class(
    marker: str, kind: type[Exception]
) -> None:
    with pytest.raises(Exception) as raised:
        await run_as_step(WRITER, f"Draft it {marker}")
    assert type(classify_error(raised.value)) is kind


async def test_the_ask_marker_asks_the_user_and_uses_the_answer() -> None:
    first = await run_as_step(WRITER, "Draft it [ask]")
    assert isinstance(first.output, DeferredToolRequests)
    call = first.output.calls[0]
    assert call.tool_name == "ask_user"
    answered = await build_step_agent(WRITER).run(
        model=offline_model(),
        deps=RunDeps(job=RunJob(run_key="s", team_id="T", input="x")),
        message_history=first.all_messages(),
        deferred_tool_results=DeferredToolResults(calls={call.tool_call_id: {"focus": "Pro tier"}}),
    )
    assert isinstance(answered.output, StepReport)
    assert "focus: Pro tier" in answered.output.message


class S:
    def __init__(self, index: int, status: str, text: str, failure: str | None = None) -> None:
        self.index, self.status, self.input, self.failure_reason = index, status, text, failure
        self.title, self.assignee, self.output_summary = f"step {index}", "researcher", None


async def steer(event: str, failed: int | None, steps: list[S]) -> Any:
    job = RunJob(run_key="k", team_id="T", input=event, request="compare pricing")
    wake = CommanderWake(event=event, steps=steps, failed_step=failed)
    result = await build_commander(AGENTS, woken=True).run(
        commander_prompt(job, [], wake), model=offline_model(), deps=CommanderDeps(assignees=NAMES)
    )
    return turn_from_history(result.all_messages())


async def test_woken_after_a_marked_failure_it_retries_without_the_marker() -> None:
    turn = await steer(
        "Step 1 (researcher) failed",
        1,
        [S(1, "failed", "Find prices [fail]\nRequest: x", "HTTP 400")],
    )
    assert [o.op for o in turn.operations] == ["retry_step"]
    assert turn.operations[0].input == "Find prices\nRequest: x"


async def test_woken_after_another_failure_it_skips_and_on_cancel_it_cancels() -> None:
    turn = await steer("Step 2 failed", 2, [S(1, "done", "a"), S(2, "failed", "b", "boom")])
    assert [o.op for o in turn.operations] == ["skip_step"]
    turn = await steer("alice wrote: please cancel this", None, [S(1, "pending", "a")])
    assert [o.op for o in turn.operations] == ["cancel_plan"]
    turn = await steer("alice wrote: looks good", None, [S(1, "pending", "a")])
    assert turn.operations == [] and turn.reply is not None
