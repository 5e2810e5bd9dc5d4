"""An agent removed or disabled: its pending steps fail under their on_failure policy.

The pure decision on literal plans, then the locked reconciler on a real SQLite file and
PostgreSQL (the `db` fixture).
"""

from __future__ import annotations

from flotilla.agents.planning.decisions import decide_agent_gone
from flotilla.agents.planning.effects import AskCommander
from flotilla.agents.reconciling.reconciler import Reconciler
from flotilla.storage.db import Database
from flotilla.storage.plans import conversations_waiting_on_agent
from tests.fakes.clock import FakeClock
from tests.integration import reconcile_support as support
from tests.unit.reconcile_helpers import T0, make_plan, started

REASON = "the agent writer was disabled by <@U1>"


def test_a_pending_step_fails_and_asks_the_commander() -> None:
    plan, _ = started(make_plan({}, {"assignee": "writer", "wait_for": [1]}, {"wait_for": [2]}))
    decision = decide_agent_gone(plan, T0, "writer", REASON)
    step = decision.plan.steps[1]
    assert step.status == "failed" and step.failure_reason == REASON
    assert [s.status for s in decision.plan.steps] == ["in_progress", "failed", "pending"]
    wakes = [e for e in decision.effects if isinstance(e, AskCommander)]
    assert len(wakes) == 1 and wakes[0].failure_reason == REASON
    assert wakes[0].waiting == [3]
    assert decision.plan.version == plan.version + 1
    assert any(e.kind == "update_plan_card" for e in decision.effects)


def test_continue_skips_the_step_and_dispatches_what_follows() -> None:
    plan = make_plan({"assignee": "writer", "on_failure": "continue"}, {"wait_for": [1]})
    decision = decide_agent_gone(plan, T0, "writer", REASON)
    assert [s.status for s in decision.plan.steps] == ["skipped", "in_progress"]
    assert [e.kind for e in decision.effects if e.kind == "post_dispatch"] == ["post_dispatch"]


def test_abort_plan_stops_the_plan() -> None:
    plan, _ = started(
        make_plan(
            {},
            {"assignee": "writer", "wait_for": [1], "on_failure": "abort_plan"},
            {"assignee": "writer", "wait_for": [2]},
        )
    )
    decision = decide_agent_gone(plan, T0, "writer", REASON)
    assert decision.plan.status == "aborted"
    # step 1's run in flight is cancelled by the executor: skipped, not left in progress
    assert [s.status for s in decision.plan.steps] == ["skipped", "failed", "skipped"]


def test_running_steps_and_other_agents_are_left_alone() -> None:
    plan, _ = started(make_plan({"assignee": "writer"}, {"wait_for": [1]}))
    decision = decide_agent_gone(plan, T0, "writer", REASON)  # step 1 is already running
    assert decision.plan is plan and not decision.effects and not decision.changed
    assert decide_agent_gone(plan, T0, "analyst", REASON).plan is plan


async def test_reconciler_fails_stored_steps_once(db: Database) -> None:
    cid = await support.new_conversation(db, "9.1")
    reconciler = Reconciler(db, clock=FakeClock(support.T0))
    await reconciler.start_plan(
        cid, support.proposal({}, {"assignee": "writer", "wait_for": [1]}), assignees=support.AGENTS
    )
    async with db.read() as conn:
        assert await conversations_waiting_on_agent(conn, "T1", "writer") == [cid]
        assert await conversations_waiting_on_agent(conn, "T1", "researcher") == []
        assert await conversations_waiting_on_agent(conn, "T2", "writer") == []

    decision = await reconciler.fail_steps_of(cid, "writer", REASON)
    assert decision is not None and decision.changed
    stored = await Reconciler(db).plan(cid)  # a fresh reconciler reads the rows
    assert stored is not None
    assert [s.status for s in stored.steps] == ["in_progress", "failed"]
    assert stored.steps[1].failure_reason == REASON
    wake = f"plan:{stored.id}:step:2:attempt:0:failed"
    assert wake in await support.outbox_keys(db, "ask_commander")
    async with db.read() as conn:
        assert await conversations_waiting_on_agent(conn, "T1", "writer") == []

    again = await reconciler.fail_steps_of(cid, "writer", REASON)
    assert again is not None and not again.changed
    no_plan = await support.new_conversation(db, "9.2")
    assert await reconciler.fail_steps_of(no_plan, "writer", REASON) is None
