"""The commander's retries of a step are stored with the step (plan_steps.retries) and
capped, on a real SQLite file and PostgreSQL; a stall is queued in the same transaction."""

from __future__ import annotations

import pytest

from flotilla.agents.core.errors import OperationRejected
from flotilla.agents.planning.plan import (
    MAX_COMMANDER_RETRIES,
    RetryStep,
    StepFailed,
    StepSucceeded,
)
from flotilla.agents.reconciling.reconciler import Reconciler
from flotilla.storage.db import Database
from tests.fakes.clock import FakeClock
from tests.integration.reconcile_support import (
    AGENTS,
    T0,
    new_conversation,
    outbox_keys,
    proposal,
)


async def test_retries_are_stored_loaded_and_capped(db: Database) -> None:
    cid = await new_conversation(db, "9.1")
    reconciler = Reconciler(db, clock=FakeClock(T0))
    await reconciler.start_plan(cid, proposal({"on_failure": "ask_commander"}), assignees=AGENTS)
    for attempt in range(1, MAX_COMMANDER_RETRIES + 2):
        failed = StepFailed(index=1, attempt=attempt, reason="bad", retryable=False)
        await reconciler.reconcile(cid, outcomes=[failed])
        if attempt <= MAX_COMMANDER_RETRIES:
            await reconciler.reconcile(cid, operations=[RetryStep(index=1)], assignees=AGENTS)
            # read back by a reconciler that holds nothing in memory: from the rows
            plan = await Reconciler(db, clock=FakeClock(T0)).plan(cid)
            assert plan is not None and plan.steps[0].retries == attempt
    with pytest.raises(OperationRejected, match="already retried 3 times"):
        await reconciler.reconcile(cid, operations=[RetryStep(index=1)], assignees=AGENTS)
    plan = await Reconciler(db, clock=FakeClock(T0)).plan(cid)
    assert plan is not None
    step = plan.steps[0]
    assert (step.status, step.attempts, step.retries) == ("failed", 4, MAX_COMMANDER_RETRIES)


async def test_a_change_that_leaves_the_plan_stalled_queues_a_stall_check(db: Database) -> None:
    cid = await new_conversation(db, "9.2")
    reconciler = Reconciler(db, clock=FakeClock(T0))
    steps = proposal({"on_failure": "ask_commander"}, {"wait_for": []}, {"wait_for": [1, 2]})
    started = await reconciler.start_plan(cid, steps, assignees=AGENTS, max_parallel=2)
    plan_id = started.plan.id
    failed = StepFailed(index=1, attempt=1, reason="bad", retryable=False)
    await reconciler.reconcile(cid, outcomes=[failed])
    assert await outbox_keys(db, "plan_stalled") == []  # step 2 still runs
    done = await reconciler.reconcile(
        cid, outcomes=[StepSucceeded(index=2, attempt=1, summary="x")]
    )
    assert done is not None
    assert await outbox_keys(db, "plan_stalled") == [f"plan:{plan_id}:stalled:v{done.plan.version}"]
