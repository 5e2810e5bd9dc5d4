"""The offline model plans a diamond and every step runs as a full agent run, in order.

There is no reconciler here on purpose: the test plays the orchestrator in the simplest
way (steps in index order, which respects `wait_for`; summaries passed on with
`agents.planning.plan_transitions.render_input`; the form answered in code) so the runtime, the
commander and
the offline model are shown end to end. Run with `-s` to see the transcript.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from flotilla.agents.core.errors import PermanentError, TransientError
from flotilla.agents.planning.plan import Plan, RetryStep, Step, new_steps
from flotilla.agents.planning.plan_transitions import render_input, replace_step
from flotilla.agents.running.commander import CommanderWake, commander_step_spec, commander_turn
from flotilla.agents.running.runtime import (
    RunJob,
    StepQuestion,
    StepRunResult,
    resume_step,
    run_step,
)
from flotilla.agents.tools.registry import enabled_agents, seed_default_agents
from flotilla.storage.conversations import open_conversation, store_message
from flotilla.storage.db import Database
from flotilla.storage.records import MessageRecord

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
REQUEST = "compare our pricing with the top three competitors and draft a note for sales [ask]"
FORM_ANSWER = {"tiers": "Pro", "notes": "mention the annual discount"}


def clock() -> datetime:
    return NOW


async def test_the_offline_model_plans_and_runs_a_diamond(db: Database) -> None:
    lines: list[str] = []
    async with db.write() as conn:
        await seed_default_agents(conn, "T1", NOW)
        agents = await enabled_agents(conn, "T1")
        conv = await open_conversation(
            conn,
            team_id="T1",
            channel_id="C1",
            thread_ts="100.1",
            requested_by="U1",
            request_text=REQUEST,
            now=NOW,
        )
    ts = iter(range(2, 100))

    async def post(author: str, text: str) -> None:
        lines.append(f"{author}: {text}")
        async with db.write() as conn:
            record = MessageRecord("C1", f"100.{next(ts)}", None, "B1", author, text, None)
            await store_message(conn, conv.id, record, NOW)

    await post("alice", f"@Flotilla {REQUEST}")
    turn = await commander_turn(
        db,
        RunJob(
            run_key="commander:1:100.1",
            team_id="T1",
            input=REQUEST,
            request=REQUEST,
            channel_id="C1",
            conversation_id=conv.id,
        ),
        agents,
        model="offline",
        now=clock,
    )
    assert turn.plan is not None and turn.reply is not None
    await post("commander", turn.reply)
    plan = Plan(id=1, conversation_id=conv.id, request=REQUEST, steps=new_steps(turn.plan))
    for s in plan.steps:
        lines.append(
            f"    plan step {s.index} {s.assignee:<10} wait_for={list(s.wait_for)} {s.title}"
        )

    by_name = {a.name: a for a in agents}
    for index in range(1, len(plan.steps) + 1):
        step = plan.steps[index - 1]
        assert all(plan.steps[w - 1].status == "done" for w in step.wait_for)
        text = render_input(step, plan)
        job = RunJob(
            run_key=f"plan:1:step:{index}:attempt:1",
            team_id="T1",
            input=text,
            request=REQUEST,
            channel_id="C1",
            conversation_id=conv.id,
            plan_id=None,
            step_index=index,
        )
        if step.assignee == "user":
            assert step.form is not None
            lines.append(
                f"commander: [form] {step.form.fields[0].label} {step.form.fields[0].options}"
            )
            await post("alice", f"[form answer] {FORM_ANSWER}")
            summary = "; ".join(f"{k}: {v}" for k, v in FORM_ANSWER.items())
            plan = replace_step(plan, done(step, summary))
            continue
        spec = commander_step_spec() if step.assignee == "commander" else by_name[step.assignee]
        if step.assignee != "commander":
            await post("commander", f"@{step.assignee} {text}")
        result = await run_step(db, job, spec, model="offline", now=clock)
        if isinstance(result, StepQuestion):
            lines.append(f"    (step {index} blocked: the run is suspended, its history stored)")
            await post(step.assignee, result.question)
            await post("alice", "[answer] focus on the per-seat list prices")
            result = await resume_step(
                db, job, spec, "focus on the per-seat list prices", model="offline", now=clock
            )
        assert isinstance(result, StepRunResult)
        await post(step.assignee, result.message)
        lines.append(f"    -> step {index} output_summary: {result.summary}")
        plan = replace_step(plan, done(step, result.summary))

    print("\n" + "\n".join(lines))
    assert all(s.status == "done" for s in plan.steps)
    transcript = "\n".join(lines)
    assert "step 1 blocked" in transcript  # the [ask] marker reached step 1's researcher
    # the writer's note follows the tiers chosen in the form and the notes given with them
    writer_summary = plan.steps[3].output_summary or ""
    assert writer_summary.startswith("Pro is 17 % below Acme, 9 % below Globex")
    assert writer_summary.endswith("the note also mentions the annual discount")
    assert "Focused as you asked: focus on the per-seat list prices" in transcript
    assert all(
        line.split(": ", 1)[1].startswith("[offline model]")
        for line in lines
        if line.startswith(("researcher:", "analyst:", "writer:"))
    )


def done(step: Step, summary: str) -> Step:
    return step.model_copy(update={"status": "done", "output_summary": summary})


async def test_offline_failure_markers_take_the_failure_paths_and_the_commander_recovers(
    db: Database,
) -> None:
    async with db.write() as conn:
        await seed_default_agents(conn, "T1", NOW)
        agents = await enabled_agents(conn, "T1")
    request = "research heat pumps and write a report [fail]"
    turn = await commander_turn(
        db,
        RunJob(run_key="c:2", team_id="T1", input=request, request=request),
        agents,
        model="offline",
        now=clock,
    )
    assert turn.plan is not None
    plan = Plan(id=2, conversation_id=1, request=request, steps=new_steps(turn.plan))
    first = plan.steps[0]
    spec = {a.name: a for a in agents}[first.assignee]
    job = RunJob(run_key="plan:2:step:1:attempt:1", team_id="T1", input=render_input(first, plan))
    with pytest.raises(PermanentError) as failed:
        await run_step(db, job, spec, model="offline", now=clock)

    plan = replace_step(
        plan, first.model_copy(update={"status": "failed", "failure_reason": str(failed.value)})
    )
    wake = CommanderWake(
        event=f"Step 1 ({first.assignee}) failed: {failed.value}", steps=plan.steps, failed_step=1
    )
    steer = await commander_turn(
        db,
        RunJob(run_key="c:3", team_id="T1", input="(step failed)", request=request),
        agents,
        model="offline",
        wake=wake,
        now=clock,
    )
    assert len(steer.operations) == 1
    retry = steer.operations[0]
    assert isinstance(retry, RetryStep) and retry.input is not None and "[fail]" not in retry.input

    again = RunJob(run_key="plan:2:step:1:attempt:2", team_id="T1", input=retry.input)
    assert isinstance(await run_step(db, again, spec, model="offline", now=clock), StepRunResult)

    transient = RunJob(
        run_key="t:1", team_id="T1", input="Find prices [fail transient]\nRequest: x"
    )
    with pytest.raises(TransientError):
        await run_step(db, transient, spec, model="offline", now=clock)
