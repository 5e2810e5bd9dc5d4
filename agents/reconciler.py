"""The reconciler: decide (pure) what a conversation's plan does next, then store it.

`decide(plan, now, outcomes=…, operations=…)` is a pure function from the stored plan and
what just happened to the new plan and the effects to perform. `Reconciler.reconcile`
is the thin async layer around it: under the conversation's lock it de-duplicates the
event, loads the plan, decides, and stores the changed steps and the effects (outbox
rows) in one transaction; the effects are performed after commit (`agents/outbox.py`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy.engine import Connection

from agents.clock import Clock, utcnow
from agents.commander_operations import apply_operation
from agents.effects import (
    AskCommander,
    Effect,
    PlanFinished,
    PlanStalled,
    PlanStopped,
    UpdatePlanCard,
    card_key,
    finished_key,
    stalled_key,
    stopped_key,
    to_row,
)
from agents.errors import OperationRejected
from agents.plan import (
    DEFAULT_MAX_TRANSIENT_FAILURES,
    TERMINAL_PLAN,
    AbortPlan,
    CancelPlan,
    CommanderOperation,
    Outcome,
    Plan,
    PlanProposal,
    Step,
    new_steps,
)
from agents.plan_store import plan_from_rows, step_row
from agents.plan_transitions import apply_outcome, dispatch, fail_step, stalled, with_status
from agents.plan_validation import validate_plan
from storage import plans as store
from storage.conversations import request_text
from storage.db import Database
from storage.events import record_event
from storage.locks import ConversationLocks
from storage.outbox import enqueue_effects


@dataclass(frozen=True, slots=True)
class Decision:
    """What one reconcile decided: the new plan, the rows to write, the effects."""

    before: Plan | None
    plan: Plan
    effects: list[Effect] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return self.before is None or self.plan is not self.before

    def changed_steps(self) -> list[Step]:
        """Steps whose stored row must be written (changed or added)."""
        old = self.before.steps if self.before is not None else ()
        return [s for i, s in enumerate(self.plan.steps) if i >= len(old) or s is not old[i]]


def decide(
    plan: Plan,
    now: datetime,
    *,
    outcomes: Sequence[Outcome] = (),
    operations: Sequence[CommanderOperation] = (),
    assignees: Collection[str] = (),
    disabled: Collection[str] = (),
    actor: str | None = None,
) -> Decision:
    """Apply commander operations, then outcomes, then choose dispatches. Pure.

    `actor`: the Slack user on whose behalf the operations are applied (a person who
    cancels from the card or with `/flotilla cancel`), named in the stop notice.

    Nothing new (or only stale/repeated outcomes) gives a decision with the same plan
    and no effects. A change bumps the plan's version and adds one plan-card refresh,
    and – when it left the plan stalled with no commander asked – a `PlanStalled`.
    Raises `OperationRejected`/`PlanValidationError` for an operation that is not allowed.
    """
    current = plan
    effects: list[Effect] = []
    for op in operations:
        if isinstance(op, CancelPlan) and actor is None:
            # the commander's own cancel: its words are said as its own, never as a
            # person's ("cancelled by <@U…>" is written only for a person who cancelled)
            op = CancelPlan(reason=f"by the commander: {op.reason}")
        was = current
        current = apply_operation(current, op, assignees=assignees, disabled=disabled)
        effects.extend(_stopped(was, current, op, actor))
    for outcome in outcomes:
        current, more = apply_outcome(current, outcome, now)
        effects.extend(more)
    current, more = dispatch(current, now)
    effects.extend(more)
    if current is plan:
        return Decision(plan, plan)
    return _versioned(plan, current, effects)


def decide_agent_gone(plan: Plan, now: datetime, agent: str, reason: str) -> Decision:
    """Fail the pending steps assigned to `agent` (removed or disabled), each under its
    `on_failure` policy, then dispatch what is ready. Pure; no change when none is pending."""
    current = plan
    effects: list[Effect] = []
    for index in [s.index for s in plan.steps if s.assignee == agent and s.status == "pending"]:
        step = current.steps[index - 1]
        if step.status == "pending":  # an earlier failure may have aborted the plan
            current, more = fail_step(current, step, reason)
            effects.extend(more)
    if current is plan:
        return Decision(plan, plan)
    current, more = dispatch(current, now)
    effects.extend(more)
    return _versioned(plan, current, effects)


def _stopped(before: Plan, after: Plan, op: CommanderOperation, actor: str | None) -> list[Effect]:
    """The effects of an operation that ended the plan: stop its runs, say why, once."""
    if after.status == before.status:
        return []
    if isinstance(op, CancelPlan):
        stop = PlanStopped(
            key=stopped_key(after.id),
            conversation_id=after.conversation_id,
            plan_id=after.id,
            reason=op.reason,
            by=actor,
        )
        return [stop]
    if after.status == "aborted":
        finished = PlanFinished(
            key=finished_key(after.id),
            conversation_id=after.conversation_id,
            plan_id=after.id,
            status="aborted",
            reason=op.reason if isinstance(op, AbortPlan) else None,
        )
        return [finished]
    return []


def _versioned(before: Plan | None, plan: Plan, effects: list[Effect]) -> Decision:
    version = (before.version if before is not None else plan.version) + 1
    plan = plan.model_copy(update={"version": version})
    card = UpdatePlanCard(
        key=card_key(plan.id, version),
        conversation_id=plan.conversation_id,
        plan_id=plan.id,
        version=version,
    )
    return Decision(before, plan, [*effects, card, *_stall_check(before, plan, effects)])


def _stall_check(before: Plan | None, after: Plan, effects: list[Effect]) -> list[Effect]:
    """Ask the commander when this change left the plan stalled – e.g. the last run in
    flight ended while a failed step blocks the rest – unless it is being asked already."""
    if before is None or stalled(before) or not stalled(after):
        return []
    if any(isinstance(e, AskCommander) for e in effects):
        return []  # the failure just decided asks the commander itself
    check = PlanStalled(
        key=stalled_key(after.id, after.version),
        conversation_id=after.conversation_id,
        plan_id=after.id,
        version=after.version,
    )
    return [check]


def start(plan: Plan, now: datetime) -> Decision:
    """A freshly stored plan (version 0): dispatch its first step(s). Pure."""
    current, effects = dispatch(with_status(plan), now)
    return _versioned(None, current, effects)


# --- the thin async layer: lock, load, decide, store ------------------------------------

AfterCommit = Callable[[list[Effect]], Awaitable[None]]


class Reconciler:
    """Runs `decide` for one conversation under its lock and stores the result.

    One transaction per call: de-duplicate the event, load the plan, decide, write the
    changed steps, the plan row and the outbox rows, commit. `after_commit` (e.g. the
    outbox sender's wake-up) is called with the new effects once they are committed.

    The plans this process last wrote are kept in memory by version: the load then
    skips the step rows when the stored version is still the one held (every change of
    a plan bumps its version, under the lock).
    """

    def __init__(
        self,
        db: Database,
        *,
        locks: ConversationLocks | None = None,
        clock: Clock = utcnow,
        after_commit: AfterCommit | None = None,
        cache_size: int = 1000,
    ) -> None:
        self.db = db
        self.locks = locks or ConversationLocks()
        self.clock = clock
        self.after_commit = after_commit
        self.cache_size = cache_size
        self._cache: dict[int, Plan] = {}  # conversation id -> last plan written here

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
        checked = validate_plan(proposal, assignees=assignees, disabled=disabled)
        return await self.start_steps(
            conversation_id,
            new_steps(checked),
            max_parallel=max_parallel,
            max_transient_failures=max_transient_failures,
            intro=intro,
        )

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
        now = self.clock()

        def work(conn: Connection) -> Decision:
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
            store.insert_steps(conn, plan_id, [step_row(s, None, now) for s in decision.plan.steps])
            _write_plan_and_effects(conn, decision, now, card_waiting=False)
            return decision

        decision = await self._locked(conversation_id, work)
        assert decision is not None  # a started plan always has a decision
        return decision

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
        now = self.clock()
        held = self._cache.get(conversation_id)

        def work(conn: Connection) -> Decision | None:
            nonlocal outcomes, operations
            if event_key is not None and not record_event(conn, event_key, now):
                outcomes, operations = (), ()
            known = (held.id, held.version) if held is not None else None
            loaded = store.load_latest_plan(conn, conversation_id, known=known)
            if loaded is None:
                return None
            if loaded.steps is None and held is not None:
                before = held
            else:
                before = plan_from_rows(loaded.plan, loaded.steps or [])
            decision = decide(
                before,
                now,
                outcomes=outcomes,
                operations=operations,
                assignees=assignees,
                disabled=disabled,
                actor=actor,
            )
            if decision.changed:
                _store(conn, decision, now, card_waiting=loaded.card_waiting)
            return decision

        return await self._locked(conversation_id, work)

    async def fail_steps_of(self, conversation_id: int, agent: str, reason: str) -> Decision | None:
        """`decide_agent_gone` under the conversation's lock, stored like `reconcile`."""
        now = self.clock()

        def work(conn: Connection) -> Decision | None:
            loaded = store.load_latest_plan(conn, conversation_id)
            if loaded is None or loaded.plan["status"] in TERMINAL_PLAN:
                return None
            before = plan_from_rows(loaded.plan, loaded.steps or [])
            decision = decide_agent_gone(before, now, agent, reason)
            if decision.changed:
                _store(conn, decision, now, card_waiting=loaded.card_waiting)
            return decision

        return await self._locked(conversation_id, work)

    async def _locked(
        self, conversation_id: int, work: Callable[[Connection], Decision | None]
    ) -> Decision | None:
        """Run `work` in one transaction under the conversation's lock; remember and
        announce what it committed."""
        decision = await self.locks.run(self.db, conversation_id, work)
        if decision is None:
            return None
        self._remember(decision.plan)
        await self._after(decision)
        return decision

    async def plan(self, conversation_id: int) -> Plan | None:
        """The conversation's newest plan as stored (a read; no lock)."""
        async with self.db.read() as conn:
            loaded = await conn.run_sync(store.load_latest_plan, conversation_id)
        return plan_from_rows(loaded.plan, loaded.steps or []) if loaded is not None else None

    def remembered(self, conversation_id: int) -> Plan | None:
        """The conversation's plan as last written in this process (no read), if any."""
        return self._cache.get(conversation_id)

    def _remember(self, plan: Plan) -> None:
        """Keep the plan just committed for the next load of its conversation."""
        self._cache.pop(plan.conversation_id, None)
        self._cache[plan.conversation_id] = plan
        if len(self._cache) > self.cache_size:
            del self._cache[next(iter(self._cache))]  # the least recently used

    async def _after(self, decision: Decision) -> None:
        if self.after_commit is not None and decision.effects:
            await self.after_commit(decision.effects)


def _store(conn: Connection, decision: Decision, now: datetime, *, card_waiting: bool) -> None:
    before = decision.before
    assert before is not None
    old = before.steps
    changed = decision.changed_steps()
    updates = [
        (step_row(s, old[s.index - 1], now), old[s.index - 1].status, old[s.index - 1].attempts)
        for s in changed
        if s.index <= len(old)
    ]
    store.update_steps(conn, before.id, updates)
    added = [step_row(s, None, now) for s in changed if s.index > len(old)]
    store.insert_steps(conn, before.id, added)
    _write_plan_and_effects(conn, decision, now, card_waiting=card_waiting)


def _write_plan_and_effects(
    conn: Connection, decision: Decision, now: datetime, *, card_waiting: bool
) -> None:
    plan = decision.plan
    was = decision.before.version if decision.before is not None else 0
    store.update_plan(
        conn, plan.id, status=plan.status, version=plan.version, was_version=was, now=now
    )
    rows = [
        to_row(e) for e in decision.effects if not (card_waiting and e.kind == "update_plan_card")
    ]
    enqueue_effects(conn, rows, now)
