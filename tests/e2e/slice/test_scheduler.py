"""The scheduler end to end, through the real Bolt app: why a step waits is on its plan's
card and in `/flotilla plans` and `/flotilla queue` ("waiting: 3rd in line", "waiting:
researcher busy (1/1)", "waiting: channel budget (resets 00:00 UTC)", "paused for urgent
work") and goes when the step starts; a budget refuses a run by policy; urgent work pauses
a batch run at a model-turn boundary and the run resumes without re-paying; `/flotilla
quota` shows and changes the limits (audited)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel

from flotilla.agents.core import telemetry
from flotilla.agents.running import offline
from flotilla.agents.running.offline import first_prompt
from flotilla.agents.scheduling.admission_policy import SchedulerOptions
from flotilla.agents.scheduling.scheduler import URGENT as URGENT_PRIORITY
from flotilla.local_slack import Message
from flotilla.storage.agents import update_agent
from flotilla.storage.audit import audit_trail
from flotilla.storage.run_requests import queued_requests
from flotilla.storage.usage import record_usage
from tests.e2e.slice.conftest import Run
from tests.e2e.slice.faults import Gate
from tests.e2e.slice.scripts import Script, answered, call, combine, plans, tools_of
from tests.e2e.slice.test_admin_command import command
from tests.e2e.slice.test_admin_home import home_text
from tests.eventually import eventually


def step(
    index: int, agent: str, text: str, after: list[int] | None = None, **more: Any
) -> dict[str, Any]:
    return {
        "index": index,
        "title": f"Step {index}",
        "assignee": agent,
        "input": text,
        "wait_for": after or [],
        **more,
    }


def model_with(script: Script, *gates: Gate) -> FunctionModel:
    """The offline model, except where `script` answers; runs the gates hold wait."""

    async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            for gate in gates:
                if gate.holds(messages, info):
                    await gate.wait()
        return script(messages, info) or offline.respond(messages, info)

    return FunctionModel(respond, model_name="scripted")


def card_blocks(run: Run, root: Message) -> str:
    card = next(m for m in run.messages(root) if m.text.startswith("Plan ("))
    return json.dumps(card.blocks or [], ensure_ascii=False)


async def card_shows(run: Run, root: Message, text: str) -> None:
    await run.driver.wait_for(
        lambda: any(
            m.text.startswith("Plan (") and text in json.dumps(m.blocks or [], ensure_ascii=False)
            for m in run.messages(root)
        ),
        what=f"the card to show {text!r}",
    )


FOUR = [
    step(1, "researcher", "HOLD the first"),
    step(2, "analyst", "second"),
    step(3, "writer", "third"),
    step(4, "researcher", "fourth"),
]


# The tests hold every step that could start first: whichever is admitted first holds the
# slot while the others wait. Steps are not admitted in their order: an agent with a Slack app
# of its own starts from its mention's event, the others right after their post – under load
# @analyst's and @writer's steps ran before @researcher's step 1 (3 failures in 10 runs).
def held(steps: list[dict[str, Any]], assignee: str | None = None) -> list[dict[str, Any]]:
    """`steps` with the inputs of `assignee`'s (or all) starting with HOLD (held by the gate)."""
    return [
        {**s, "input": f"HOLD {s['input'].removeprefix('HOLD ')}"}
        if assignee in (None, s["assignee"])
        else s
        for s in steps
    ]


def task_details(run: Run, root: Message) -> dict[str, str]:
    """What the native plan display's tasks say beside their status (task id -> details)."""
    [shown] = [m for m in run.messages(root) if m.task_display_mode == "plan"]
    return {key: str(t["details"]) for key, t in shown.tasks.items() if t.get("details")}


def waiting_third(blocks: str) -> int:
    """The step the card shows 3rd in line (its line, then the waiting note under it)."""
    lines = "\n".join(
        b["text"]["text"] for b in json.loads(blocks) if b.get("type") == "section"
    ).splitlines()
    for above, line in zip(lines, lines[1:], strict=False):
        if "waiting: 3rd in line" in line:
            found = re.search(r"\*Step (\d+)\*", above)
            assert found is not None, blocks
            return int(found[1])
    raise AssertionError(f"no step 3rd in line: {blocks}")


async def test_steps_in_line_say_their_place_and_lose_it_when_they_start(
    start: Callable[..., Any],
) -> None:
    gate = Gate("HOLD")
    model = model_with(plans({"FOUR": held(FOUR)}), gate)
    scheduler = SchedulerOptions(capacity=1, poll_seconds=0.05)
    # with the default settings: Slack's native plan display shows the plan's progress
    native = dict(native_plan_display=True)
    async with start(model=model, max_parallel=4, scheduler=scheduler, **native) as run:
        root = run.ask("FOUR things at once")
        await gate.reached()
        await card_shows(run, root, "waiting: 3rd in line")
        blocks = card_blocks(run, root)
        assert "waiting: next in line" in blocks and "waiting: 2nd in line" in blocks
        third = waiting_third(blocks)
        await run.driver.wait_for(  # the native display's task says it too
            lambda: task_details(run, root).get(f"step-{third}") == "waiting: 3rd in line",
            what="the native display to say why the step waits",
        )
        assert sorted(task_details(run, root).values()) == [
            "waiting: 2nd in line",
            "waiting: 3rd in line",
            "waiting: next in line",
        ]
        plans_answer = await command(run, "maya", "plans")
        assert f"step {third} waiting: 3rd in line" in plans_answer, plans_answer
        queue = await command(run, "maya", "queue")
        assert "*Running* (1)" in queue and "*Waiting* (3)" in queue, queue
        assert f"plan 1 step {third} – @" in queue and "waiting: 3rd in line" in queue

        gate.release.set()
        await run.says(root, "What the team found", from_="Flotilla")
        await run.quiesce()
        assert (await run.plan(root)).status == "completed"
        assert "waiting:" not in card_blocks(run, root)  # gone once they started
        assert set(task_details(run, root).values()) <= {"done"}  # no step says it waits
        assert await command(run, "maya", "queue") == "Nothing is waiting and nothing is running."


async def test_a_step_waits_while_its_agent_is_at_its_quota(start: Callable[..., Any]) -> None:
    gate = Gate("HOLD")  # both @researcher steps held: whichever starts first holds the quota
    model = model_with(plans({"FOUR": held(FOUR, "researcher")}), gate)
    scheduler = SchedulerOptions(capacity=4, agent_caps={"researcher": 1}, poll_seconds=0.05)
    async with start(model=model, max_parallel=4, scheduler=scheduler) as run:
        root = run.ask("FOUR things at once")
        await gate.reached()
        await card_shows(run, root, "waiting: researcher busy (1/1)")
        await card_shows(run, root, "2 of 4 done")  # the others ran meanwhile
        assert "waiting: researcher busy (1/1)" in card_blocks(run, root)
        plan = await run.plan(root)
        assert [s.status for s in plan.steps] == ["in_progress", "done", "done", "in_progress"]
        gate.release.set()
        await run.says(root, "What the team found", from_="Flotilla")
        await run.quiesce()
        assert "busy" not in card_blocks(run, root)


async def test_a_web_fetch_cap_holds_for_agents_given_domains(start: Callable[..., Any]) -> None:
    # an agent given web domains has the tool as `http_fetch:<domain>`: a cap on `http_fetch`
    # counts it (it once did not, and a cap of 1 granted both)
    gate = Gate("HOLD")
    web = [step(1, "researcher", "HOLD look up"), step(2, "analyst", "HOLD look up too")]
    model = model_with(plans({"WEB": web}), gate)
    scheduler = SchedulerOptions(capacity=4, tool_caps={"http_fetch": 1}, poll_seconds=0.05)
    async with start(model=model, max_parallel=4, scheduler=scheduler) as run:
        service = run.service
        async with service.db.write() as conn:
            for name, domain in (("researcher", "example.com"), ("analyst", "example.org")):
                await update_agent(
                    conn, service.team_id, name, run.clock(), tools=[f"http_fetch:{domain}"]
                )
        service.roster.forget()
        root = run.ask("WEB pages, both at once")
        await gate.reached()
        await card_shows(run, root, "waiting: http_fetch busy (1/1)")
        plan = await run.plan(root)
        assert sorted(s.status for s in plan.steps) == ["in_progress", "in_progress"]
        gate.release.set()
        await run.says(root, "What the team found", from_="Flotilla")
        await run.quiesce()
        assert "busy" not in card_blocks(run, root)


async def test_a_plans_final_answer_waits_its_turn_like_any_model_run(
    start: Callable[..., Any],
) -> None:
    # every model request is admitted: with one slot, a final answer being written holds it,
    # and another thread's request waits for it (the final answer once ran beside anything)
    final = Gate("Write the final answer")
    one = [step(1, "researcher", "look it up")]
    model = model_with(plans({"ONE": one}), final)
    scheduler = SchedulerOptions(capacity=1, poll_seconds=0.05)
    async with start(model=model, scheduler=scheduler) as run:
        first = run.ask("ONE lookup, please")
        await final.reached()  # the first plan's final answer is being written
        second = run.ask("ONE more lookup")

        async def waits() -> bool:
            queue = await command(run, "maya", "queue")
            return "*Running* (1)" in queue and "*Waiting* (1)" in queue

        await eventually(waits, what="the second request to wait for the only slot")
        queue = await command(run, "maya", "queue")
        assert "plan 1 final answer – the commander" in queue, queue
        assert final.calls == 1  # nothing else asked the model meanwhile
        final.release.set()
        await run.says(first, "What the team found", from_="Flotilla")
        await run.says(second, "What the team found", from_="Flotilla")
        await run.quiesce()
        assert (await run.plan(second)).status == "completed"


async def spend(run: Run, tokens: int) -> None:
    """The channel spent `tokens` today (in the usage ledger)."""
    service = run.service
    async with service.db.write() as conn:
        await record_usage(
            conn,
            team_id=service.team_id,
            channel_id=run.stack.channel.id,
            agent_name="researcher",
            model="offline",
            input_tokens=tokens,
            output_tokens=0,
            now=run.clock(),
        )


TWO = [step(1, "researcher", "HOLD first"), step(2, "writer", "then", [1], on_failure="abort_plan")]


async def test_a_step_over_the_channel_budget_waits_and_says_when_it_resets(
    start: Callable[..., Any],
) -> None:
    gate = Gate("HOLD")
    model = model_with(plans({"TWO": TWO}), gate)
    scheduler = SchedulerOptions(budgets={"channel_day": 5_000}, poll_seconds=0.05)
    async with start(model=model, scheduler=scheduler) as run:
        root = run.ask("TWO steps")
        await gate.reached()
        await spend(run, 5_000)  # the day's budget is spent while step 1 runs
        gate.release.set()
        await card_shows(run, root, "waiting: channel budget (resets 00:00 UTC)")
        await run.quiesce()
        plan = await run.plan(root)
        assert [s.status for s in plan.steps][:2] == ["done", "in_progress"]
        assert not any(m.text.startswith("[offline model] writer") for m in run.messages(root))
        queue = await command(run, "maya", "queue")
        assert "waiting: channel budget (resets 00:00 UTC)" in queue, queue


async def test_a_run_over_budget_fails_its_step_when_the_policy_says_so(
    start: Callable[..., Any],
) -> None:
    gate = Gate("HOLD")
    model = model_with(plans({"TWO": TWO}), gate)
    scheduler = SchedulerOptions(
        budgets={"channel_day": 5_000},
        budget_policy="fail",
        poll_seconds=0.05,
    )
    async with start(model=model, scheduler=scheduler) as run:
        root = run.ask("TWO steps")
        await gate.reached()
        await spend(run, 5_000)
        gate.release.set()
        await run.says(root, "it would exceed the channel budget (resets 00:00 UTC)")
        await run.quiesce()
        plan = await run.plan(root)
        assert plan.status == "aborted"
        assert plan.steps[1].status == "failed"
        assert "channel budget" in (plan.steps[1].failure_reason or "")


class ReadsTheThreadFirst:
    """A run whose input has `marker` calls read_thread once, then answers: it passes a
    model-turn boundary (where a pause is taken) between its two model requests. Counts
    the model requests it was paid for."""

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.requests = 0

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse | None:
        tools = tools_of(info)
        if "create_plan" in tools or not first_prompt(messages).startswith(self.marker):
            return None
        self.requests += 1
        return None if answered(messages) else call("read_thread", {"last": 5})


async def urgent_waits_for_a_slot(run: Run) -> None:
    """Until an urgent run waits only for a slot (a batch run gives it one at its next
    model-turn boundary)."""

    async def waits() -> bool:
        async with run.service.db.read() as conn:
            queue = await queued_requests(conn)
        return any(
            r.state == "waiting" and r.priority <= URGENT_PRIORITY and r.wait_kind == "capacity"
            for r in queue
        )

    await eventually(waits, 20, what="an urgent run waiting only for a slot")


class CommanderGate(Gate):
    """Holds the commander's turn on a person's message containing `prefix`."""

    def holds(self, messages: list[ModelMessage], info: AgentInfo) -> bool:
        return "create_plan" in tools_of(info) and self.prefix in first_prompt(messages)


LONG = [step(1, "researcher", "HOLD BATCHWORK"), step(2, "writer", "write", [1])]
URGENT = [step(1, "analyst", "URGENTWORK now")]


async def test_urgent_work_pauses_a_batch_run_at_a_turn_boundary_and_it_resumes(
    start: Callable[..., Any],
) -> None:
    gate = Gate("HOLD")
    urgent_gate = CommanderGate("HURRY")
    batch_run = ReadsTheThreadFirst("HOLD BATCHWORK")
    script = combine(plans({"BATCHPLAN": LONG, "HURRY": URGENT}), batch_run)
    model = model_with(script, gate, urgent_gate)
    # a slower beat and poll than the other tests: 20 Hz of both kept SQLite's write lock so
    # busy on a loaded machine that the batch step could miss its start
    scheduler = SchedulerOptions(capacity=1, batch_steps=1, poll_seconds=0.2)
    before = telemetry.PREEMPTIONS._value.get()
    async with start(model=model, scheduler=scheduler, heartbeat_seconds=0.2) as run:
        batch = run.ask("BATCHPLAN the archive")  # two steps: longer than batch_steps
        await gate.reached()
        assert "now urgent work" in await command(run, "alex", "urgent")  # the channel
        urgent = run.ask("HURRY please")
        await urgent_waits_for_a_slot(run)  # the urgent turn waits for the one slot
        gate.release.set()  # the batch run answers its first turn: a tool call, then it yields
        await urgent_gate.reached()  # the urgent turn runs in the one slot...
        await card_shows(run, batch, "paused for urgent work")  # ...the batch run waits
        assert "paused for urgent work" in await command(run, "maya", "queue")
        urgent_gate.release.set()
        await run.says(urgent, "What the team found", from_="Flotilla")
        await run.says(batch, "What the team found", from_="Flotilla")
        await run.quiesce()
        plan = await run.plan(batch)
        assert plan.status == "completed"
        assert plan.steps[0].attempts == 1  # resumed, not run again
        assert gate.calls == 1  # its first model turn was not paid for twice...
        assert batch_run.requests == 2  # ...nor any other: a tool call, then its answer
        # paused once at least (resumed in a free slot meanwhile, it may be paused again)
        assert telemetry.PREEMPTIONS._value.get() >= before + 1
        assert "paused" not in card_blocks(run, batch)


async def test_quota_shows_and_changes_the_limits_audited(start: Callable[..., Any]) -> None:
    async with start(scheduler=SchedulerOptions(capacity=6, agent_caps={"writer": 2})) as run:
        shown = await command(run, "maya", "quota")
        assert "6 runs at once across the deployment" in shown
        assert "writer 2 at a time" in shown and "*Budgets*: none" in shown
        refused = await command(run, "maya", "quota agent researcher 2")
        assert "only workspace admins" in refused
        changed = await command(run, "alex", "quota agent researcher 2")
        assert changed.startswith("Saved.") and "researcher 2 at a time" in changed
        budget = await command(run, "alex", "quota budget channel_day 50000")
        assert "channel per day 50,000 tokens" in budget
        assert "not a number" in await command(run, "alex", "quota capacity lots")
        assert "There is no budget" in await command(run, "alex", "quota budget weekly 5")
        home = await home_text(run, "alex")  # admins see the queue and limits at home
        assert "Nothing is waiting" in home and "researcher 2 at a time" in home
        assert "researcher 2 at a time" not in await home_text(run, "maya")
        async with run.service.db.read() as conn:
            trail = await audit_trail(conn, run.service.team_id)
        actions = [(a.action, a.target) for a in trail]
        assert ("quota.agent", "researcher") in actions
        assert ("quota.budget", "channel_day") in actions
