"""The locked, idempotent reconciler and the outbox, on a real SQLite file and PostgreSQL."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from sqlalchemy import func, select

from flotilla.agents.core.errors import (
    OperationRejected,
    PermanentError,
    PlanValidationError,
    TransientError,
)
from flotilla.agents.planning.effects import Effect, PostDispatch, ShowForm, UpdatePlanCard
from flotilla.agents.planning.plan import (
    AddSteps,
    CommanderOperation,
    Question,
    SkipStep,
    StepAnswered,
    StepBlocked,
    StepFailed,
    StepProposal,
    StepSucceeded,
)
from flotilla.agents.reconciling.outbox import OutboxSender
from flotilla.agents.reconciling.reconciler import Reconciler
from flotilla.storage.db import Database
from flotilla.storage.outbox import outbox_t
from flotilla.storage.plan_steps import steps_t
from tests.fakes.clock import FakeClock
from tests.integration.reconcile_support import (
    AGENTS,
    T0,
    RecordingPort,
    chain,
    diamond,
    finish_running,
    new_conversation,
    outbox_keys,
    proposal,
)


async def test_start_plan_stores_steps_and_dispatches_the_first(db: Database) -> None:
    cid = await new_conversation(db, "1.1", text="launch note")
    reconciler = Reconciler(db, clock=FakeClock(T0))
    decision = await reconciler.start_plan(
        cid, proposal({}, {"input": "for {{request}}: {{step_1.output_summary}}"}), assignees=AGENTS
    )
    plan = await reconciler.plan(cid)
    assert plan is not None and plan == decision.plan
    assert [s.status for s in plan.steps] == ["in_progress", "pending"]
    assert plan.request == "launch note"
    assert await outbox_keys(db) == [f"plan:{plan.id}:step:1:attempt:1", f"plan:{plan.id}:card:v1"]


async def test_a_chain_runs_to_completion_with_one_dispatch_per_step(db: Database) -> None:
    cid = await new_conversation(db, "1.2")
    reconciler = Reconciler(db, clock=FakeClock(T0))
    await reconciler.start_plan(cid, chain(4), assignees=AGENTS)
    for _ in range(4):
        await finish_running(reconciler, cid)
    plan = await reconciler.plan(cid)
    assert plan is not None and plan.status == "completed"
    assert [s.output_summary for s in plan.steps] == ["done 1", "done 2", "done 3", "done 4"]
    keys = await outbox_keys(db, "post_dispatch")
    assert keys == [f"plan:{plan.id}:step:{i}:attempt:1" for i in range(1, 5)]
    assert await outbox_keys(db, "plan_finished") == [f"plan:{plan.id}:finished"]


async def test_reconciling_again_changes_nothing_and_enqueues_nothing(db: Database) -> None:
    cid = await new_conversation(db, "1.3")
    reconciler = Reconciler(db, clock=FakeClock(T0))
    started = await reconciler.start_plan(cid, diamond(), assignees=AGENTS)
    done = StepSucceeded(index=1, attempt=1, summary="x")
    first = await reconciler.reconcile(cid, event_key="Ev1", outcomes=[done])
    assert first is not None and first.changed
    rows = await outbox_keys(db)
    for again in (
        await reconciler.reconcile(cid, event_key="Ev1", outcomes=[done]),  # same event
        await reconciler.reconcile(cid, event_key="Ev2", outcomes=[done]),  # same outcome
        await reconciler.reconcile(cid),  # nothing new
    ):
        assert again is not None and not again.changed and again.effects == []
    assert await outbox_keys(db) == rows
    plan = await reconciler.plan(cid)
    assert plan is not None and plan.version == started.plan.version + 1


async def test_stale_attempts_are_ignored(db: Database) -> None:
    cid = await new_conversation(db, "1.4")
    clock = FakeClock(T0)
    reconciler = Reconciler(db, clock=clock)
    await reconciler.start_plan(cid, chain(2), assignees=AGENTS)
    fail = StepFailed(index=1, attempt=1, reason="overloaded", retryable=True)
    await reconciler.reconcile(cid, outcomes=[fail])
    clock.advance(timedelta(minutes=5))
    await reconciler.reconcile(cid)  # the backoff is over: attempt 2
    late = StepSucceeded(index=1, attempt=1, summary="late result of attempt 1")
    decision = await reconciler.reconcile(cid, outcomes=[late])
    assert decision is not None and not decision.changed
    plan = await reconciler.plan(cid)
    assert plan is not None
    assert (plan.steps[0].status, plan.steps[0].attempts) == ("in_progress", 2)


async def test_validation_errors_store_nothing_and_one_running_plan_per_thread(
    db: Database,
) -> None:
    cid = await new_conversation(db, "1.5")
    reconciler = Reconciler(db, clock=FakeClock(T0))
    with pytest.raises(PlanValidationError):
        await reconciler.start_plan(cid, proposal({"assignee": "ghost"}), assignees=AGENTS)
    assert await reconciler.plan(cid) is None
    await reconciler.start_plan(cid, chain(1), assignees=AGENTS)
    with pytest.raises(OperationRejected, match="already has a running plan"):
        await reconciler.start_plan(cid, chain(1), assignees=AGENTS)


async def test_card_refreshes_coalesce_while_one_is_waiting(db: Database) -> None:
    cid = await new_conversation(db, "1.6")
    clock = FakeClock(T0)
    reconciler = Reconciler(db, clock=clock)
    port = RecordingPort()
    sender = OutboxSender(db, port, clock=clock)
    await reconciler.start_plan(cid, chain(5), assignees=AGENTS)
    for _ in range(3):
        await finish_running(reconciler, cid)
    assert len(await outbox_keys(db, "update_plan_card")) == 1  # three changes, one row
    await sender.drain()
    (card,) = [e for e in port.performed if e.kind == "update_plan_card"]
    plan = await reconciler.plan(cid)  # the card renders the plan as stored when it is sent
    assert isinstance(card, UpdatePlanCard) and plan is not None and plan.version == 4
    await finish_running(reconciler, cid)
    assert len(await outbox_keys(db, "update_plan_card")) == 2


async def test_outbox_delivers_each_effect_once(db: Database) -> None:
    cid = await new_conversation(db, "1.7")
    clock = FakeClock(T0)
    port = RecordingPort()
    sender = OutboxSender(db, port, clock=clock)
    reconciler = Reconciler(db, clock=clock)
    await reconciler.start_plan(cid, chain(3), assignees=AGENTS)
    for _ in range(3):
        await sender.drain()
        await finish_running(reconciler, cid)
    await sender.drain()
    assert await sender.drain() == 0
    performed = [e.key for e in port.performed]
    assert len(performed) == len(set(performed))
    assert set(performed) == set(await outbox_keys(db))
    first = port.performed[0]
    assert first.kind == "post_dispatch"
    assert isinstance(first, PostDispatch) and (first.step, first.attempt) == (1, 1)
    assert port.checked == []  # nothing was redelivered, so nothing had to be checked


async def test_transient_failure_backs_off_through_an_outbox_timer(db: Database) -> None:
    cid = await new_conversation(db, "1.8")
    clock = FakeClock(T0)
    reconciler = Reconciler(db, clock=clock)
    sender = OutboxSender(db, RecordingPort(on_retry_due=reconciler.reconcile), clock=clock)
    await reconciler.start_plan(cid, chain(1), assignees=AGENTS)
    await sender.drain()
    fail = StepFailed(index=1, attempt=1, reason="429", retryable=True)
    await reconciler.reconcile(cid, outcomes=[fail])
    await sender.drain()  # the timer is not due yet
    plan = await reconciler.plan(cid)
    assert plan is not None and plan.steps[0].status == "pending"
    clock.advance(timedelta(seconds=30))
    await sender.drain()  # the timer fires a reconcile, which dispatches attempt 2
    plan = await reconciler.plan(cid)
    assert plan is not None
    assert (plan.steps[0].status, plan.steps[0].attempts) == ("in_progress", 2)
    assert f"plan:{plan.id}:step:1:attempt:2" in await outbox_keys(db, "post_dispatch")


@pytest.mark.parametrize("shared_locks", [True, False])
async def test_fifty_concurrent_reconciles_dispatch_each_ready_step_once(
    db: Database, shared_locks: bool
) -> None:
    """50 deliveries of the same result at once; without shared in-process locks the
    database lock alone must serialise them."""
    cid = await new_conversation(db, "1.9")
    shared = Reconciler(db, clock=FakeClock(T0))
    fan_out = proposal({}, *({"wait_for": [1]} for _ in range(5)))
    await shared.start_plan(cid, fan_out, assignees=AGENTS, max_parallel=5)
    done = StepSucceeded(index=1, attempt=1, summary="x")

    async def deliver(i: int) -> None:
        reconciler = shared if shared_locks else Reconciler(db, clock=FakeClock(T0))
        await reconciler.reconcile(cid, event_key=f"Ev{i}", outcomes=[done])

    await asyncio.gather(*(deliver(i) for i in range(50)))
    plan = await shared.plan(cid)
    assert plan is not None
    keys = await outbox_keys(db, "post_dispatch")
    assert sorted(keys) == sorted(f"plan:{plan.id}:step:{i}:attempt:1" for i in range(1, 7))
    assert [s.attempts for s in plan.steps] == [1] * 6
    async with db.read() as conn:
        in_progress = await conn.scalar(
            select(func.count()).select_from(steps_t).where(steps_t.c.status == "in_progress")
        )
        total = await conn.scalar(select(func.count()).select_from(outbox_t))
    assert in_progress == 5
    assert total == 6 + 1  # six dispatches; the change coalesced into the waiting card row


async def test_blocked_step_and_user_form_survive_storage(db: Database) -> None:
    cid = await new_conversation(db, "1.10")
    reconciler = Reconciler(db, clock=FakeClock(T0))
    form = {
        "fields": [
            {"name": "region", "label": "Which region?", "kind": "select", "options": ["EU", "US"]}
        ]
    }
    await reconciler.start_plan(
        cid, proposal({}, {"assignee": "user", "form": form}), assignees=AGENTS
    )
    blocked = StepBlocked(index=1, attempt=1, question="Budget?")
    await reconciler.reconcile(cid, outcomes=[blocked])
    fresh = Reconciler(db)  # nothing cached: everything comes from the database
    plan = await fresh.plan(cid)
    assert plan is not None and plan.status == "paused"
    assert plan.steps[0].question == Question(text="Budget?", round=1)
    answer = StepAnswered(index=1, values={"answer": "10k"}, answered_by="U1")
    decision = await fresh.reconcile(cid, outcomes=[answer])
    assert decision is not None
    assert [e.kind for e in decision.effects] == ["resume_step", "update_plan_card"]
    decision = await fresh.reconcile(cid, outcomes=[StepSucceeded(index=1, attempt=1, summary="s")])
    assert decision is not None
    (show,) = [e for e in decision.effects if e.kind == "show_form"]
    assert isinstance(show, ShowForm) and show.form is not None
    assert show.form.fields[0].options == ["EU", "US"]
    plan = await Reconciler(db).plan(cid)
    assert plan is not None and plan.status == "paused"
    assert plan.steps[0].question is not None and plan.steps[0].question.answer == {"answer": "10k"}
    submitted = StepAnswered(index=2, values={"region": "EU"}, answered_by="U2")
    await fresh.reconcile(cid, outcomes=[submitted])
    plan = await Reconciler(db).plan(cid)
    assert plan is not None and plan.status == "completed"
    assert plan.steps[1].output_summary == "region: EU"


async def test_commander_operations_are_stored(db: Database) -> None:
    cid = await new_conversation(db, "1.11")
    reconciler = Reconciler(db, clock=FakeClock(T0))
    await reconciler.start_plan(cid, chain(2), assignees=AGENTS)
    failed = StepFailed(index=1, attempt=1, reason="no access", retryable=False)
    decision = await reconciler.reconcile(cid, outcomes=[failed])
    assert decision is not None
    # people are told of the failure once, then the commander decides
    assert [e.kind for e in decision.effects[:2]] == ["step_failure_notice", "ask_commander"]
    extra = StepProposal(index=3, title="use the archive", assignee="writer", wait_for=[])
    skip = SkipStep(index=1, reason="route around")
    ops: list[CommanderOperation] = [skip, AddSteps(steps=[extra])]
    with pytest.raises(PlanValidationError):  # an unknown agent: nothing of the call is kept
        bad = StepProposal(index=3, title="x", assignee="ghost")
        await reconciler.reconcile(cid, operations=[skip, AddSteps(steps=[bad])], assignees=AGENTS)
    plan = await Reconciler(db).plan(cid)
    assert plan is not None and plan.steps[0].status == "failed"
    await reconciler.reconcile(cid, operations=ops, assignees=AGENTS)
    plan = await Reconciler(db).plan(cid)
    assert plan is not None
    assert [(s.index, s.status) for s in plan.steps] == [
        (1, "skipped"),
        (2, "in_progress"),
        (3, "pending"),
    ]


class FlakyPort(RecordingPort):
    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error: Exception | None = error

    async def perform(self, effect: Effect) -> None:
        if self.error is not None:
            raise self.error
        await super().perform(effect)


async def test_outbox_retries_transient_port_failures_and_gives_up_on_permanent(
    db: Database,
) -> None:
    cid = await new_conversation(db, "1.12")
    clock = FakeClock(T0)
    await Reconciler(db, clock=clock).start_plan(cid, chain(1), assignees=AGENTS)
    port = FlakyPort(TransientError("Slack answered 503"))
    sender = OutboxSender(db, port, clock=clock)
    assert await sender.drain() == 2
    assert await sender.drain() == 0  # both wait for their retry time
    port.error = None
    clock.advance(timedelta(minutes=1))
    assert await sender.drain() == 2
    assert len(port.performed) == 2
    cid2 = await new_conversation(db, "1.13")
    await Reconciler(db, clock=clock).start_plan(cid2, chain(1), assignees=AGENTS)
    hopeless = FlakyPort(PermanentError("channel_not_found"))
    assert await OutboxSender(db, hopeless, clock=clock).drain() == 2
    clock.advance(timedelta(hours=1))
    assert await OutboxSender(db, hopeless, clock=clock).drain() == 0
