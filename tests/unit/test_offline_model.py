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
from flotilla.agents.running.offline_content import note_text
from flotilla.agents.running.offline_plans import COMPETITOR_PRICES, DRAFT_NOTE, RESEARCH
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
    assert turn.reply == (
        "[offline model] I wrote a plan of 5 steps: the researcher and the analyst at once, "
        "then you (a form), then the writer, then I review it and answer."
    )


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


RESEARCHER = AgentSpec("researcher", "Researcher", "Finds facts.", "research", tools=("ask_user",))
NOTE_INPUT = (
    f"{DRAFT_NOTE}\nCompetitors: Acme €12/€35/€120\nOur pricing: Starter €9\n"
    "Tiers to cover: tiers: Starter\nnotes: the annual discount\n"
    "Also, as asked in the thread: can we also mention the free trial?"
)


async def test_the_plans_steps_do_canned_work_not_an_echo_of_their_input() -> None:
    prices = await run_as_step(RESEARCHER, f"{COMPETITOR_PRICES}\nRequest: compare pricing")
    assert isinstance(prices.output, StepReport)
    lines = prices.output.message.splitlines()
    assert lines[0].startswith("[offline model] researcher: competitors' list prices a month")
    assert lines[1:] == [
        "- Acme: Starter €12, Pro €35, Enterprise €120; 10 % off when paid yearly",
        "- Globex: Starter €10, Pro €32, Enterprise on request; 15 % off when paid yearly",
        "- Initech: Starter €8, Pro €39, Enterprise €110; a 30-day free trial",
    ]
    assert prices.output.summary.startswith("Acme €12/€35/€120, Globex €10/€32/on request")
    assert "compare pricing" not in prices.output.message  # the request is not echoed


async def test_the_note_follows_the_tiers_chosen_and_what_the_thread_asked_for() -> None:
    note = await run_as_step(WRITER, NOTE_INPUT)
    assert isinstance(note.output, StepReport)
    assert note.output.message.splitlines()[1:] == [
        "How our Starter pricing compares",
        "Hi team – where we stand against the three competitors you hear about most:",
        "- Starter (€9 a month) is 25 % below Acme (€12), 10 % below Globex (€10) and 13 % "
        "above Initech (€8).",
        "- Paying yearly takes two months off (about 17 %).",  # the form's notes
        "- We offer a 14-day free trial on every tier, no card needed.",  # the thread's ask
        "Lead with the price; questions about the figures go to this thread.",
    ]
    assert note.output.summary == (
        "Starter is 25 % below Acme, 10 % below Globex and 13 % above Initech; the note also "
        "mentions the annual discount and the free trial"
    )
    every_tier = note_text(NOTE_INPUT.replace("tiers: Starter", "tiers: All tiers"))
    assert every_tier.startswith("# How our Starter, Pro and Enterprise pricing compares\n")
    assert "- Enterprise (€99 a month) is 18 % below Acme (€120), Globex quotes on request" in (
        every_tier
    )


async def test_a_plain_answer_to_the_agents_question_is_used_once_as_said() -> None:
    asked = await run_as_step(RESEARCHER, f"{RESEARCH} [ask]\nRequest: research our emails")
    assert isinstance(asked.output, DeferredToolRequests)
    call = asked.output.calls[0]
    answered = await build_step_agent(RESEARCHER).run(
        model=offline_model(),
        deps=RunDeps(job=RunJob(run_key="s", team_id="T", input="x")),
        message_history=asked.all_messages(),
        deferred_tool_results=DeferredToolResults(
            calls={call.tool_call_id: {"answer": "the open rates"}}
        ),
    )
    assert isinstance(answered.output, StepReport)
    message = answered.output.message
    assert "key findings on our emails" in message.splitlines()[0]
    assert "- Focused as you asked: the open rates" in message and "answer:" not in message
