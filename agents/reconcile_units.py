"""The reconciler's units of work: what one reconcile reads, decides and writes, as synchronous
functions over a connection (the reconciler runs each as one hop, `agents/reconciler.py`).

Two ways to run the same decision:
- `locked_reconcile` – inside a transaction that holds the conversation's lock (SQLite's
  `BEGIN IMMEDIATE`; the locked path on PostgreSQL): record the event, load the plan,
  decide, write the steps, the plan row and the outbox rows, statement by statement;
- `optimistic_reconcile` – PostgreSQL on an autocommit connection: one read (plan, lock
  version, event seen), the pure decision, one version-checked write of everything
  (`storage/optimistic.py`); a conflict makes the caller run it again.
Both write the rows `plan_write` computes from the decision.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.engine import Connection

from agents.decisions import Decision, decide
from agents.effects import to_row
from agents.plan import CommanderOperation, Outcome, Plan
from agents.plan_store import plan_from_rows, step_row
from storage import plans as store
from storage.events import record_event
from storage.optimistic import PlanWrite, load_versioned, write_versioned
from storage.outbox import enqueue_effects

Unit = Callable[[Connection], Decision | None]


@dataclass(frozen=True, slots=True)
class ReconcileCall:
    """One `Reconciler.reconcile` call: what happened, and the plan this process holds."""

    conversation_id: int
    now: datetime
    event_key: str | None = None
    outcomes: Sequence[Outcome] = ()
    operations: Sequence[CommanderOperation] = ()
    assignees: Collection[str] = ()
    disabled: Collection[str] = ()
    actor: str | None = None
    held: Plan | None = None  # the plan last written by this process (its steps are skipped)

    @property
    def known(self) -> tuple[int, int] | None:
        return (self.held.id, self.held.version) if self.held is not None else None

    def decide(self, loaded: store.LoadedPlan, *, apply: bool) -> Decision:
        """The decision on the loaded plan (`apply`: False for an event applied already)."""
        if loaded.steps is None and self.held is not None:
            before = self.held
        else:
            before = plan_from_rows(loaded.plan, loaded.steps or [])
        return decide(
            before,
            self.now,
            outcomes=self.outcomes if apply else (),
            operations=self.operations if apply else (),
            assignees=self.assignees,
            disabled=self.disabled,
            actor=self.actor,
        )


def locked_reconcile(call: ReconcileCall) -> Unit:
    """The reconcile as one transaction under the conversation's lock."""

    def work(conn: Connection) -> Decision | None:
        fresh = call.event_key is None or record_event(conn, call.event_key, call.now)
        loaded = store.load_latest_plan(conn, call.conversation_id, known=call.known)
        if loaded is None:
            return None
        decision = call.decide(loaded, apply=fresh)
        if decision.changed:
            write = plan_write(decision, call.now, card_waiting=loaded.card_waiting)
            store_write(conn, write, call.now)
        return decision

    return work


def optimistic_reconcile(call: ReconcileCall) -> Unit:
    """The reconcile as a read and one version-checked write (PostgreSQL, autocommit);
    raises `storage.optimistic.VersionConflict` when the conversation moved on."""

    def work(conn: Connection) -> Decision | None:
        read = load_versioned(
            conn, call.conversation_id, known=call.known, event_key=call.event_key
        )
        if read is None:
            return None
        decision = call.decide(read.loaded, apply=not read.event_seen)
        record = None if read.event_seen else call.event_key
        if decision.changed:
            write = plan_write(decision, call.now, card_waiting=read.loaded.card_waiting)
        elif record is not None:  # nothing changed, but the event is applied: remember it
            write = PlanWrite(plan_id=decision.plan.id)
        else:
            return decision
        write_versioned(
            conn, call.conversation_id, read.lock_version, write, event_key=record, now=call.now
        )
        return decision

    return work


def plan_write(decision: Decision, now: datetime, *, card_waiting: bool) -> PlanWrite:
    """The rows a changed decision writes. A plan-card refresh is left out while one is
    waiting, unclaimed, in the outbox (it renders the plan as it is when delivered)."""
    plan = decision.plan
    before = decision.before
    old = before.steps if before is not None else ()
    changed = decision.changed_steps()
    return PlanWrite(
        plan_id=plan.id,
        changed=[
            (step_row(s, old[s.index - 1], now), old[s.index - 1].status, old[s.index - 1].attempts)
            for s in changed
            if s.index <= len(old)
        ],
        added=[step_row(s, None, now) for s in changed if s.index > len(old)],
        status=plan.status,
        version=plan.version,
        was_version=before.version if before is not None else 0,
        effects=[
            to_row(e)
            for e in decision.effects
            if not (card_waiting and e.kind == "update_plan_card")
        ],
    )


def store_write(conn: Connection, write: PlanWrite, now: datetime) -> None:
    """`write` statement by statement, in the caller's (locked) transaction."""
    store.update_steps(conn, write.plan_id, write.changed)
    store.insert_steps(conn, write.plan_id, write.added)
    if write.status is not None:
        store.update_plan(
            conn,
            write.plan_id,
            status=write.status,
            version=write.version,
            was_version=write.was_version,
            now=now,
        )
    enqueue_effects(conn, write.effects, now)
