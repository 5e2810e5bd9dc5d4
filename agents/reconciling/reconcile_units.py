"""The reconciler's units of work: what one reconcile reads, decides and writes, as functions
over a connection (the reconciler runs each as one hop, `agents/reconciling/reconciler.py`).

Two ways to run the same decision:
- `locked_reconcile` – inside a transaction that holds the conversation's lock (SQLite's
  `BEGIN IMMEDIATE`; the locked path on PostgreSQL): record the event, load the plan,
  decide, write the steps, the plan row and the outbox rows, statement by statement;
- `optimistic_reconcile` – PostgreSQL, a coroutine function awaited on asyncpg's connection
  outside any transaction: one read (plan, lock version, event seen), the pure decision, one
  version-checked write of everything (`storage/optimistic.py`); a conflict makes the
  caller run it again.
Both write the rows `plan_write` computes from the decision. Which one runs is the
storage's choice (`storage/locks.py` `ConversationLocks.run_unit`): the callers build both.
A reporting attempt's writes (`AttemptWrites`, below) come as data in the call; the locked
unit writes them all, the optimistic one none (the storage writes what it can ahead of it).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Executable
from sqlalchemy.engine import Connection

from flotilla.agents.core.retry_policy import STEP, RetryPolicy
from flotilla.agents.planning.decisions import Decision, decide
from flotilla.agents.planning.effects import to_row
from flotilla.agents.planning.plan import CommanderOperation, Outcome, Plan
from flotilla.agents.planning.plan_store import plan_from_rows, step_row
from flotilla.agents.reconciling.final_texts import FinalText
from flotilla.storage import plans as store
from flotilla.storage.conversations import message_update
from flotilla.storage.events import record_event
from flotilla.storage.optimistic import PlanWrite, load_versioned, write_versioned
from flotilla.storage.outbox import claimed_record, enqueue_claimed, enqueue_effects
from flotilla.storage.outbox_marks import mark_sent
from flotilla.storage.plan_steps import insert_steps, update_steps
from flotilla.storage.prepared import DriverConnection
from flotilla.storage.records import OutboxRecord
from flotilla.storage.run_request_leases import finish_held_request

# --- what a reporting attempt writes beside its reconcile, as data ----------------------
#
# What an attempt writes as it reports, as data: the reconcile's unit of work writes it.
#
# An attempt – a step's run, or a commander turn that starts a plan – ends by reporting: its
# outcome (or the plan it starts) is reconciled, and up to three writes belong with it:
# - its streamed answer's final text (`final_texts.FinalText`);
# - its run's close: the tokens it spent and its finished history (`RunSession` statements);
# - its release: its run request finished while this process still holds it (the slot
#   freed, the run's lease let go) and its outbox row marked sent.
#
# The reporting code hands them over as an `AttemptWrites` (`Reconciler.report`); how they
# are written is the storage's choice (`ConversationLocks.run_unit`). Where writes run one at
# a time (SQLite) all of them go into the reconcile's own transaction: the outcome and its
# writes commit together, so a process killed between them leaves neither or both. Where
# a reconcile is one version-checked statement (PostgreSQL), the final text and the close are
# written before it, in a transaction of their own, and the release is left to the job
# (`Reported.others_wait` is None), which lets go of its lease on its own right after. A
# plan's start is a locked transaction on every database: it carries them all.
#
# Why a later step never sees a text that is not final, and why a release is conditional on
# the grant still being held: `final_texts.py` and `storage/run_request_leases.py`.


@dataclass(frozen=True, slots=True)
class Release:
    """A scheduled attempt's run request, to be finished while `owner` holds its grant, and
    its outbox row, to be marked sent."""

    run_key: str  # its run request (its lease)
    row_key: str  # its outbox row
    owner: str  # this process


@dataclass(frozen=True, slots=True)
class AttemptWrites:
    """What an attempt's report writes beside its reconcile (each part optional)."""

    final: FinalText | None = None  # its answer's final text
    close: Sequence[Executable] = ()  # its run's close (usage, then history)
    release: Release | None = None  # its run request and outbox row

    def ahead(self) -> list[Executable]:
        """The statements that may be written ahead of the reconcile: all but the release."""
        final = self.final
        texts = (
            []
            if final is None
            else [message_update(final.channel_id, final.ts, final.text, final.metadata)]
        )
        return [*texts, *self.close]


NO_WRITES = AttemptWrites()


@dataclass(frozen=True, slots=True)
class Reported:
    """A reported attempt: the decision stored (None: no plan – nothing of it written) and
    whether its release committed with it: then whether other runs wait for the slot it
    freed; None when it did not (the job releases its run request itself)."""

    decision: Decision | None
    others_wait: bool | None = None


def write_with_reconcile(
    conn: Connection, writes: AttemptWrites, now: datetime
) -> tuple[Sequence[str], bool | None]:
    """Every part, in the reconcile's (synchronous, locked) transaction: the final text, the
    close, the release. The outbox rows to be marked sent with the reconcile's own marks
    (one statement, `storage/outbox_marks.py`), and the release's answer (None: the grant
    was not held any more – a lost lease is its new holder's to settle – nothing released)."""
    if writes is NO_WRITES:  # most reconciles: nothing to build
        return (), None
    for statement in writes.ahead():
        conn.execute(statement)
    release = writes.release
    if release is None:
        return (), None
    others_wait = finish_held_request(conn, release.run_key, release.owner, now)
    return ((), None) if others_wait is None else ((release.row_key,), others_wait)


# --- the units of work -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PreClaim:
    """Hand the effects just decided to this process's outbox sender: rows of `kinds` due
    now are inserted already claimed until `lease_until` (no claim transaction of their
    own), and the rows the sender delivered since (`sent`) are marked in the same
    transaction."""

    lease_until: datetime
    kinds: frozenset[str]
    sent: Sequence[int] = ()


@dataclass(frozen=True, slots=True)
class Stored:
    """A committed decision, and the outbox rows it claimed for this process's sender."""

    decision: Decision
    claimed: list[OutboxRecord] = field(default_factory=list)
    sent_marked: bool = True  # False: the sender's delivered rows are still to be marked
    others_wait: bool | None = None  # an attempt's release written with it: runs wait?


Unit = Callable[[Connection], Stored | None]
DriverUnit = Callable[[DriverConnection], Awaitable[Stored | None]]


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
    retry: RetryPolicy = STEP  # when a step's transient failure is tried again
    held: Plan | None = None  # the plan last written by this process (its steps are skipped)
    preclaim: PreClaim | None = None
    # a reporting attempt's writes (`AttemptWrites`): all of them in the locked unit; the
    # optimistic one leaves them to the storage (`ConversationLocks.run_unit`) and the job
    writes: AttemptWrites = NO_WRITES

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
            retry=self.retry,
        )


def locked_reconcile(call: ReconcileCall) -> Unit:
    """The reconcile as one transaction under the conversation's lock."""

    def work(conn: Connection) -> Stored | None:
        fresh = call.event_key is None or record_event(conn, call.event_key, call.now)
        loaded = store.load_latest_plan(conn, call.conversation_id, known=call.known)
        if loaded is None:
            return None
        decision = call.decide(loaded, apply=fresh)
        settled, others_wait = write_with_reconcile(conn, call.writes, call.now)
        if not decision.changed:
            sent = call.preclaim.sent if call.preclaim is not None else ()
            mark_sent(conn, sent, call.now, keys=settled)
            return Stored(decision, others_wait=others_wait)
        write = plan_write(
            decision, call.now, card_waiting=loaded.card_waiting, preclaim=call.preclaim
        )
        claimed = store_write(conn, write, call.now, preclaim=call.preclaim, settled=settled)
        return Stored(decision, claimed, others_wait=others_wait)

    return work


def optimistic_reconcile(call: ReconcileCall) -> DriverUnit:
    """The reconcile as a read and one version-checked write (PostgreSQL, autocommit);
    raises `storage.optimistic.VersionConflict` when the conversation moved on."""

    async def work(conn: DriverConnection) -> Stored | None:
        read = await load_versioned(
            conn, call.conversation_id, known=call.known, event_key=call.event_key
        )
        if read is None:
            return None
        decision = call.decide(read.loaded, apply=not read.event_seen)
        record = None if read.event_seen else call.event_key
        sent = call.preclaim.sent if call.preclaim is not None else ()
        if decision.changed:
            write = plan_write(
                decision, call.now, card_waiting=read.loaded.card_waiting, preclaim=call.preclaim
            )
        elif record is not None:  # nothing changed, but the event is applied: remember it
            write = PlanWrite(plan_id=decision.plan.id, sent=sent)
        else:
            return Stored(decision, sent_marked=not sent)
        ids = await write_versioned(
            conn, call.conversation_id, read.lock_version, write, event_key=record, now=call.now
        )
        claimed = [
            claimed_record(row, ids[row["idempotency_key"]], call.now) for row in write.claimed
        ]
        return Stored(decision, claimed)

    return work


def plan_write(
    decision: Decision, now: datetime, *, card_waiting: bool, preclaim: PreClaim | None = None
) -> PlanWrite:
    """The rows a changed decision writes. A plan-card refresh is left out while one is
    waiting, unclaimed, in the outbox (it renders the plan as it is when delivered).
    With `preclaim`, the effects of its kinds that are due now go to `claimed`."""
    plan = decision.plan
    rows = [
        to_row(e) for e in decision.effects if not (card_waiting and e.kind == "update_plan_card")
    ]
    claimed: list[dict[str, Any]] = []
    if preclaim is not None:
        left: list[dict[str, Any]] = []
        for row in rows:
            (claimed if _claimable(row, preclaim, now) else left).append(row)
        rows = left
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
        was_status=before.status if before is not None else None,
        version=plan.version,
        was_version=before.version if before is not None else 0,
        effects=rows,
        claimed=claimed,
        sent=preclaim.sent if preclaim is not None else (),
        lease_until=preclaim.lease_until if preclaim is not None else None,
    )


def _claimable(row: dict[str, Any], preclaim: PreClaim, now: datetime) -> bool:
    due = row.get("available_at")
    return row["kind"] in preclaim.kinds and (due is None or due <= now)


def store_write(
    conn: Connection,
    write: PlanWrite,
    now: datetime,
    *,
    preclaim: PreClaim | None = None,
    settled: Sequence[str] = (),
) -> list[OutboxRecord]:
    """`write` statement by statement, in the caller's (locked) transaction; the rows it
    inserted claimed (`preclaim`); `settled`: the keys of rows a job's settle ended, marked
    sent with the rows delivered."""
    mark_sent(conn, write.sent, now, keys=settled)
    update_steps(conn, write.plan_id, write.changed)
    insert_steps(conn, write.plan_id, write.added)
    if write.status is not None:
        store.update_plan(
            conn,
            write.plan_id,
            status=write.status,
            version=write.version,
            was_version=write.was_version,
            now=now,
            was_status=write.was_status,
        )
    enqueue_effects(conn, write.effects, now)
    if preclaim is None or not write.claimed:
        return []
    return enqueue_claimed(conn, write.claimed, now, lease_until=preclaim.lease_until)
