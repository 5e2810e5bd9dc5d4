"""The reconciler: what a conversation's plan does next, decided (pure) and stored.

`Reconciler.reconcile` is the thin async layer around the pure `decide`
(`agents/planning/decisions.py`): it de-duplicates the event, loads the plan, decides, and stores
the changed steps and the effects (outbox rows) all or nothing; the effects are performed
after commit (`agents/reconciling/outbox.py`). On SQLite that is one transaction under the
database's
write lock, on one worker-thread hop; on PostgreSQL a read and one version-checked write
(optimistic concurrency, `storage/optimistic.py`): two round trips, and a retry when
another writer changed the conversation in between (`agents/reconciling/reconcile_units.py`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Executable
from sqlalchemy.engine import Connection

from flotilla.agents.core.clock import Clock, utcnow
from flotilla.agents.core.errors import OperationRejected
from flotilla.agents.core.lru import LRUCache
from flotilla.agents.core.retry_policy import STEP, RetryPolicy
from flotilla.agents.planning.decisions import Decision, decide_agent_gone, start
from flotilla.agents.planning.effects import Effect
from flotilla.agents.planning.plan import (
    DEFAULT_MAX_TRANSIENT_FAILURES,
    TERMINAL_PLAN,
    CommanderOperation,
    Outcome,
    Plan,
    PlanProposal,
    Step,
    new_steps,
)
from flotilla.agents.planning.plan_store import plan_from_rows
from flotilla.agents.planning.plan_validation import validate_plan
from flotilla.agents.reconciling.outbox import OutboxSender
from flotilla.agents.reconciling.reconcile_units import (
    NO_WRITES,
    AttemptWrites,
    DriverUnit,
    PreClaim,
    ReconcileCall,
    Reported,
    Stored,
    Unit,
    locked_reconcile,
    optimistic_reconcile,
    plan_write,
    store_write,
    write_with_reconcile,
)
from flotilla.storage import plans as store
from flotilla.storage.conversations import request_text
from flotilla.storage.db import Also, Database
from flotilla.storage.locks import ConversationLocks
from flotilla.storage.outbox import hold_effect
from flotilla.storage.plans import CARD_POSTING, PlanCard

# --- the thin async layer: lock, load, decide, store ------------------------------------

AfterCommit = Callable[[list[Effect]], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class PlanStart:
    """A plan to start (`Reconciler.start_plan`'s arguments, as a commander turn reports it)."""

    proposal: PlanProposal
    assignees: Collection[str]
    disabled: Collection[str] = ()
    max_parallel: int = 1
    max_transient_failures: int = DEFAULT_MAX_TRANSIENT_FAILURES
    intro: str = ""


# what a reconcile hands its process's outbox sender at once (plan-card refreshes coalesce
# in the sender, `OutboxSender.deliver_handed`); timers wait in the outbox until due
HANDED_OVER_KINDS = frozenset(
    {
        "update_plan_card",
        "post_dispatch",
        "show_form",
        "run_commander_step",
        "ask_commander",
        "ask_user",
        "resume_step",
        "step_failure_notice",
        "retry_due",
        "plan_finished",
        "plan_stopped",
        "plan_stalled",
    }
)


class Reconciler:
    """Runs `decide` for one conversation under its lock and stores the result.

    One transaction per call: de-duplicate the event, load the plan, decide, write the
    changed steps, the plan row and the outbox rows, commit. `after_commit` (e.g. the
    outbox sender's wake-up) is called with the new effects once they are committed.

    The plans this process last wrote are kept in memory by version: the load then
    skips the step rows when the stored version is still the one held (every change of
    a plan bumps its version, under the lock).

    With `outbox` (this process's sender), the effects of `handed_over`
    kinds that are due now are inserted already claimed for it in the reconcile's own
    transaction and handed to it after commit, and the rows it delivered since are marked
    sent in that same transaction: no claim transaction of their own. `after_commit` is
    then told only of the effects left in the outbox for any sender (timers, PostgreSQL).
    """

    def __init__(
        self,
        db: Database,
        *,
        locks: ConversationLocks | None = None,
        clock: Clock = utcnow,
        after_commit: AfterCommit | None = None,
        cache_size: int = 1000,
        outbox: OutboxSender | None = None,
        handed_over: frozenset[str] = HANDED_OVER_KINDS,
        step_retry: RetryPolicy = STEP,
    ) -> None:
        self.db = db
        self.step_retry = step_retry  # when a step's transient failure is tried again
        self.locks = locks or ConversationLocks()
        self.clock = clock
        self.after_commit = after_commit
        self.cache_size = cache_size
        self._cache: dict[int, Plan] = {}  # conversation id -> last plan written here
        # plans started here whose card's first post this process took as it stored them
        self._cards_taken: LRUCache[int, PlanCard] = LRUCache(cache_size)
        self.outbox = outbox
        self.handed_over = handed_over

    async def start_plan(
        self,
        conversation_id: int,
        proposal: PlanProposal,
        *,
        assignees: Collection[str],
        disabled: Collection[str] = (),
        max_parallel: int = 1,
        max_transient_failures: int = DEFAULT_MAX_TRANSIENT_FAILURES,
        intro: str = "",
    ) -> Decision:
        """Validate and store a new plan, and dispatch its first step(s), in one transaction.
        `intro`: the commander's words about the plan, which its card opens with.

        Raises `PlanValidationError` (nothing stored) or `OperationRejected` when the
        conversation already has a plan that is not finished.
        """
        start = PlanStart(
            proposal, assignees, disabled, max_parallel, max_transient_failures, intro
        )
        reported = await self.report_start(conversation_id, start)
        assert reported.decision is not None  # a started plan always has a decision
        return reported.decision

    async def report_start(
        self, conversation_id: int, start: PlanStart, writes: AttemptWrites = NO_WRITES
    ) -> Reported:
        """`start_plan` for a commander turn that reports: the plan it starts, with its
        writes (`reconcile_units.AttemptWrites`) in the plan's transaction – the plan's is a locked
        transaction on every database, so it carries them all, its release included."""
        checked = validate_plan(start.proposal, assignees=start.assignees, disabled=start.disabled)
        stored = await self._start(
            conversation_id,
            new_steps(checked),
            max_parallel=start.max_parallel,
            max_transient_failures=start.max_transient_failures,
            intro=start.intro,
            writes=writes,
        )
        return Reported(stored.decision, stored.others_wait)

    async def start_steps(
        self,
        conversation_id: int,
        steps: Sequence[Step],
        *,
        max_parallel: int = 1,
        max_transient_failures: int = DEFAULT_MAX_TRANSIENT_FAILURES,
        intro: str = "",
    ) -> Decision:
        """`start_plan` for steps that are already valid (no limits checked here)."""
        stored = await self._start(
            conversation_id,
            steps,
            max_parallel=max_parallel,
            max_transient_failures=max_transient_failures,
            intro=intro,
        )
        return stored.decision

    async def _start(
        self,
        conversation_id: int,
        steps: Sequence[Step],
        *,
        max_parallel: int,
        max_transient_failures: int,
        intro: str,
        writes: AttemptWrites = NO_WRITES,
    ) -> Stored:
        now = self.clock()
        preclaim = self._preclaim(now)

        def work(conn: Connection) -> Stored:
            current = store.load_latest_plan(conn, conversation_id)
            if current is not None and current.plan["status"] not in TERMINAL_PLAN:
                raise OperationRejected(
                    f"this conversation already has a {current.plan['status']} plan; revise it "
                    "(add_steps, edit_step, retry_step, skip_step) or cancel it first"
                )
            plan_id = store.insert_plan(
                conn,
                conversation_id,
                max_parallel=max_parallel,
                max_transient_failures=max_transient_failures,
                now=now,
                intro=intro,
                card_taken=preclaim is not None,  # its first step's dispatch shows it here
            )
            plan = Plan(
                id=plan_id,
                conversation_id=conversation_id,
                max_parallel=max_parallel,
                max_transient_failures=max_transient_failures,
                request=request_text(conn, conversation_id),
                steps=tuple(steps),
            )
            decision = start(plan, now)
            settled, others_wait = write_with_reconcile(conn, writes, now)
            write = plan_write(decision, now, card_waiting=False, preclaim=preclaim)
            claimed = store_write(conn, write, now, preclaim=preclaim, settled=settled)
            return Stored(decision, claimed, others_wait=others_wait)

        stored = await self._run(conversation_id, preclaim, work)
        assert stored is not None  # a started plan always has a decision
        await self._committed(stored, preclaim)
        if preclaim is not None:
            self._cards_taken.put(
                stored.decision.plan.id, PlanCard(CARD_POSTING, intro, taken=True)
            )
        return stored

    def card_taken(self, plan_id: int) -> PlanCard | None:
        """The card of a plan started here, whose first post this process took as it stored
        the plan (no write of its own to take it); once: a later look reads the plan row."""
        return self._cards_taken.pop(plan_id)

    async def reconcile(
        self,
        conversation_id: int,
        *,
        event_key: str | None = None,
        outcomes: Sequence[Outcome] = (),
        operations: Sequence[CommanderOperation] = (),
        assignees: Collection[str] = (),
        disabled: Collection[str] = (),
        actor: str | None = None,
    ) -> Decision | None:
        """Apply what happened and dispatch what is ready; idempotent. None: no plan.

        `event_key` (a Slack event id, or channel+ts) is recorded in the same
        transaction: a repeated delivery of the same event applies nothing.
        Raises `OperationRejected`/`PlanValidationError` for a commander operation that
        is not allowed (then nothing of this call is stored).
        """
        reported = await self._reconcile(
            conversation_id,
            event_key=event_key,
            outcomes=outcomes,
            operations=operations,
            assignees=assignees,
            disabled=disabled,
            actor=actor,
        )
        return reported.decision

    async def report(
        self,
        conversation_id: int,
        *,
        outcomes: Sequence[Outcome],
        assignees: Collection[str],
        writes: AttemptWrites,
    ) -> Reported:
        """`reconcile` a step attempt's outcome with its writes (`AttemptWrites`): all of
        them in the reconcile's transaction where the database allows it, else the final
        text and close ahead of it and the release left to the job (`others_wait` None)."""
        return await self._reconcile(
            conversation_id, outcomes=outcomes, assignees=assignees, writes=writes
        )

    async def _reconcile(
        self,
        conversation_id: int,
        *,
        event_key: str | None = None,
        outcomes: Sequence[Outcome] = (),
        operations: Sequence[CommanderOperation] = (),
        assignees: Collection[str] = (),
        disabled: Collection[str] = (),
        actor: str | None = None,
        writes: AttemptWrites = NO_WRITES,
    ) -> Reported:
        now = self.clock()
        preclaim = self._preclaim(now)
        call = ReconcileCall(
            conversation_id,
            now,
            event_key=event_key,
            outcomes=outcomes,
            operations=operations,
            assignees=assignees,
            disabled=disabled,
            actor=actor,
            retry=self.step_retry,
            held=self._cache.get(conversation_id),
            preclaim=preclaim,
            writes=writes,
        )
        units = locked_reconcile(call), optimistic_reconcile(call)
        ahead = writes.ahead() if writes is not NO_WRITES else ()
        stored = await self._run(conversation_id, preclaim, *units, ahead=ahead)
        decision = await self._committed(stored, preclaim)
        return Reported(decision, stored.others_wait if stored is not None else None)

    async def fail_steps_of(self, conversation_id: int, agent: str, reason: str) -> Decision | None:
        """`decide_agent_gone` under the conversation's lock, stored like `reconcile`."""
        now = self.clock()

        def work(conn: Connection) -> Stored | None:
            loaded = store.load_latest_plan(conn, conversation_id)
            if loaded is None or loaded.plan["status"] in TERMINAL_PLAN:
                return None
            before = plan_from_rows(loaded.plan, loaded.steps or [])
            decision = decide_agent_gone(before, now, agent, reason)
            if decision.changed:
                store_write(conn, plan_write(decision, now, card_waiting=loaded.card_waiting), now)
            return Stored(decision)

        return await self._committed(await self._run(conversation_id, None, work))

    def _preclaim(self, now: datetime) -> PreClaim | None:
        if self.outbox is None:
            return None
        return PreClaim(now + self.outbox.lease, self.handed_over, self.outbox.take_sent())

    async def _run(
        self,
        conversation_id: int,
        preclaim: PreClaim | None,
        locked: Unit,
        optimistic: DriverUnit | None = None,
        *,
        ahead: Sequence[Executable] = (),
    ) -> Stored | None:
        """Run a unit of work: `locked` in one transaction under the conversation's lock,
        or – given `optimistic` – as the storage runs a reconcile best
        (`ConversationLocks.run_unit`). The conversation's remembered plan is forgotten
        until the commit is announced (`_committed`): a commit this coroutine never sees
        (cancelled while it waits) leaves none older to be taken unread (`remembered`)."""
        self._cache.pop(conversation_id, None)
        try:
            if optimistic is None:
                stored = await self.locks.run(self.db, conversation_id, locked)
            else:
                stored = await self.locks.run_unit(
                    self.db, conversation_id, locked, optimistic, ahead=ahead
                )
        except BaseException:
            self._restore_sent(preclaim)
            raise
        if stored is None or not stored.sent_marked:  # nothing written: marked later
            self._restore_sent(preclaim)
        return stored

    def _restore_sent(self, preclaim: PreClaim | None) -> None:
        """The sender's delivered rows were not marked: a later transaction marks them."""
        if preclaim is not None and preclaim.sent and self.outbox is not None:
            self.outbox.restore_sent(list(preclaim.sent))

    async def _committed(
        self, stored: Stored | None, preclaim: PreClaim | None = None
    ) -> Decision | None:
        if stored is None:
            return None
        decision = stored.decision
        handed = {r.idempotency_key for r in stored.claimed}
        if stored.claimed and self.outbox is not None and preclaim is not None:
            self.outbox.hand_over(stored.claimed, decision.effects, preclaim.lease_until)
        elif stored.claimed:  # the sender stopped meanwhile: any sender may take them now
            async with self.db.write() as conn:
                for record in stored.claimed:
                    await hold_effect(conn, record.idempotency_key, self.clock())
            handed = set()
        self._remember(decision.plan)
        left = [e for e in decision.effects if e.key not in handed]
        if self.after_commit is not None and left:
            await self.after_commit(left)
        return decision

    async def plan(
        self,
        conversation_id: int,
        also: Also | None = None,
    ) -> Plan | None:
        """The conversation's newest plan as stored (a read; no lock); `also`: the caller's
        other reads, in the same read transaction."""
        async with self.db.read() as conn:
            loaded = await conn.run_sync(store.load_latest_plan, conversation_id)
            if also is not None:
                await also(conn)
        return plan_from_rows(loaded.plan, loaded.steps or []) if loaded is not None else None

    def remembered(self, conversation_id: int) -> Plan | None:
        """The conversation's plan as last written in this process (no read), if any."""
        return self._cache.get(conversation_id)

    def _remember(self, plan: Plan) -> None:
        """Keep the plan just committed for the next load of its conversation (not over a
        newer one another reconcile committed and remembered first)."""
        known = self._cache.pop(plan.conversation_id, None)
        if known is not None and (known.id, known.version) > (plan.id, plan.version):
            plan = known
        self._cache[plan.conversation_id] = plan
        if len(self._cache) > self.cache_size:
            del self._cache[next(iter(self._cache))]  # the least recently used
