"""The executor: performs the decided effects – posts, runs steps, commander turns, stops.

One per process. Its loop claims due outbox rows (`agents/reconciling/outbox.py`) and performs each
typed effect: posting ones through the `SlackPort`, long ones (an agent's run, a commander
turn) as jobs with no lock held. A job holds a lease – the run's lease and its outbox
row's, renewed together in one transaction by a heartbeat every few seconds – so after a
crash another process takes the work over as soon as that one lease expired. The
heartbeat also notices when the step is no longer the job's to finish (the plan was
cancelled or aborted, in this process or another) and stops the job at once.

Every job ends by reporting: an outcome (or commander operations) to the reconciler. A job
that dies of a bug reports the step failed with a sentence (its `on_failure` applies);
nothing is retried blindly for ever. Jobs and their leases: `agents/running/jobs.py`; a run's slot
(the scheduler's side of a job): `agents/running/slot_requests.py`; the card and the effects that
close a plan: `agents/delivering/plan_notices.py`; a step's form or dispatch message and the work of
a long effect: `agents/delivering/step_dispatch.py`; what they share:
`agents/running/run_context.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import replace
from datetime import datetime

from flotilla.agents.core.clock import woken
from flotilla.agents.core.failures import is_storage_error
from flotilla.agents.delivering import form_answers, plan_notices, step_dispatch
from flotilla.agents.planning.effects import (
    AskUser,
    Effect,
    FormAnswer,
    PlanFinished,
    PlanStopped,
    PostDispatch,
    ResumeStep,
    RetryDue,
    RunCommanderStep,
    ShowForm,
    StepFailureNotice,
    UpdatePlanCard,
    from_row,
)
from flotilla.agents.planning.plan import Plan
from flotilla.agents.reconciling.outbox import Claimed, OutboxSender
from flotilla.agents.reconciling.ports import RunObserver
from flotilla.agents.running import plan_reads, step_runs
from flotilla.agents.running.jobs import JobRunner
from flotilla.agents.running.run_context import Context, Job
from flotilla.agents.running.slot_requests import (
    SCHEDULED,
    claim_slot,
    fail_refused,
    in_line,
    let_go_unrun,
    slot_request,
)
from flotilla.agents.scheduling.admission import AdmissionLoop
from flotilla.storage.outbox import next_effect_due
from flotilla.storage.records import ConversationRecord, MessageRecord, RunRequestRecord

log = logging.getLogger(__name__)
FINISH_BATCH_SECONDS = 5.0  # a stopping process still delivers the rows it claimed


class Executor:
    """Performs effects: the acting half of Flotilla in one process."""

    def __init__(self, context: Context, *, owner: str) -> None:
        self.context = context
        self.owner = owner
        options = context.options
        self.outbox = OutboxSender(
            context.db,
            self.perform,
            clock=context.clock,
            lease=options.lease,
            retry=options.retry.delivery,
            on_give_up=self._given_up,
        )
        self.admission = AdmissionLoop(
            context.db,
            owner=owner,
            team_id=lambda: context.team_id,
            clock=context.clock,
            options=options.scheduler,
            lease=options.lease,
            start=self._start_granted,
            show_waits=self._show_waits,
            refuse=self._refused,
            roster=context.agents,  # one cache of the agents table, forgotten on admins' edits
            waits=context.waits,
        )
        self.runner = JobRunner(
            context,
            owner=owner,
            on_slot_freed=self._slot_freed,
            on_queued=self.admission.wake,
            start_passed=self._start_granted,
        )
        self._wake = asyncio.Event()
        self._claim = True  # woken for something a claim must find (not a handover)
        self._draining = asyncio.Lock()
        self._loop: asyncio.Task[None] | None = None
        self._stopping = False  # see `stop`
        self._background: set[asyncio.Task[None]] = set()  # card updates after a pause

    @property
    def jobs(self) -> dict[str, Job]:
        """This process's running jobs, by the key of the outbox row each holds."""
        return self.runner.jobs

    async def cancel_runs(self, plan_id: int, *, conversation_id: int | None = None) -> int:
        """Stop this process's jobs of a plan at once (see `JobRunner.cancel_runs`)."""
        return await self.runner.cancel_runs(plan_id, conversation_id=conversation_id)

    @property
    def observer(self) -> RunObserver:
        return self.context.observer

    # --- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        """Start delivering (work a dead process left is claimed once its lease expired)."""
        self._stopping = False
        # while this loop delivers, the reconciler hands its sender the effects it decides
        # (claimed in its own transaction; the sender coalesces a plan's card refreshes)
        self.context.reconciler.outbox = self.outbox
        self.outbox.on_handed = self._wake.set  # delivered without a claim (see `drain`)
        self._loop = asyncio.create_task(self._deliver_forever(), name="outbox")
        self.admission.start()

    async def stop(self, grace: float = 0.0) -> list[str]:
        """Stop delivering: the rows already claimed are still delivered (a claimed row
        left undelivered would wait a whole lease), no more are claimed. Within `grace`
        seconds in all (the batch gets at least FINISH_BATCH_SECONDS), running jobs may
        finish; the rest is handed over (their leases released, so any process takes
        them at once). Returns the keys handed over."""
        self._stopping = True
        self._no_more_handed()
        await self.admission.stop()  # grants nothing more here
        if self._loop is not None:
            began = asyncio.get_running_loop().time()
            with contextlib.suppress(TimeoutError):  # the drain under way ends its batch
                async with asyncio.timeout(max(grace, FINISH_BATCH_SECONDS)), self._draining:
                    pass
            grace = max(0.0, grace - (asyncio.get_running_loop().time() - began))
            self._loop.cancel()
            await asyncio.gather(self._loop, return_exceptions=True)
            self._loop = None
        await self.outbox.release_handed()  # any process may deliver them at once
        tasks = [j.task for j in self.jobs.values() if j.task is not None]
        if tasks and grace > 0:
            await asyncio.wait(tasks, timeout=grace)
        handed = [key for key, job in self.jobs.items() if job.task and not job.task.done()]
        for job in list(self.jobs.values()):
            if job.task is not None:
                job.task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # a job cancelled before its task ran never got to its own hand-over: done here
        self.runner.jobs = {k: j for k, j in self.jobs.items() if j.task and not j.task.done()}
        if handed:
            await self.runner.hand_over_all(handed)
            log.info("handed over %d job(s) to other processes: %s", len(handed), handed)
        return handed

    async def abandon(self) -> None:
        """Die as a killed process would (kill -9): stop the loop and every job, release
        nothing and hand nothing over, so another process takes the work only once the
        lease expired. A seam for the tests (bench/resume.py kills real processes); a
        service never calls it."""
        self.runner.abandoned = True
        self._no_more_handed()
        await self.admission.stop()
        tasks = [j.task for j in self.jobs.values() if j.task is not None]
        if self._loop is not None:
            tasks.append(self._loop)
            self._loop = None
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _no_more_handed(self) -> None:
        """Effects decided from now on wait in the outbox for any process's sender."""
        if self.context.reconciler.outbox is self.outbox:
            self.context.reconciler.outbox = None

    def wake(self) -> None:
        """Look at the outbox now (after a commit, or when a timer may have come due)."""
        self._claim = True
        self._wake.set()

    async def drain(self, *, claim: bool = True) -> int:
        """Deliver what is due now; waits for a delivery already under way here. Once
        stopping, no further batch is claimed. `claim=False`: only the rows a reconcile
        handed over (woken by nothing else, the outbox holds nothing new for this process
        but timers and other processes' rows, which the next claim or poll finds)."""
        async with self._draining:
            total = 0
            try:
                if not claim:
                    total = await self.outbox.deliver_handed()
                while (
                    claim and not self._stopping and (delivered := await self.outbox.deliver_due())
                ):
                    total += delivered
                    if self.outbox.exhausted and not self.outbox.handed:
                        break  # what comes due next wakes the loop (or its poll finds it)
            finally:
                if claim or self._stopping:  # else the next transaction marks them sent
                    await self.outbox.flush()  # (a reconcile, or the poll's claim)
            return total  # runs ask for their slots as their jobs claim them

    async def settle(self) -> None:
        """Deliver everything due, grant what may start, and wait for every job (the demo
        and tests use it); runs that must wait (a quota, a budget) are left waiting."""
        while True:
            await self.drain()
            granted = await self.admission.run_pass()
            tasks = [j.task for j in self.jobs.values() if j.task is not None]
            if not tasks and not granted:
                # rows a job's last reconcile handed over after the drain above are not
                # due (they are claimed for this process), and the loop may be delivering
                # them: those come first
                busy = self.outbox.handed or self._draining.locked()
                if self._stopping or not (busy or await self._due_now()):
                    return
                continue  # committed meanwhile (a reconcile that was under way)
            await asyncio.gather(*tasks, return_exceptions=True)

    async def quiet(self) -> None:
        """Wait, reading nothing, until nothing is under way here: no job, no row handed
        over undelivered, no delivery; then mark sent what was delivered (as the loop's
        next claim would). `settle` probes the database for more (due rows, admission):
        benchmarks count a plan's work up to this instead."""
        while True:
            tasks = [j.task for j in self.jobs.values() if j.task is not None]
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)
            elif self.outbox.handed or self._draining.locked():
                await self.drain(claim=False)  # or waits for the delivery under way
            else:
                break
        async with self._draining:
            await self.outbox.flush()

    async def _due_now(self) -> bool:
        async with self.context.db.read() as conn:
            due = await next_effect_due(conn)
        return due is not None and due <= self.context.clock()

    async def _deliver_forever(self) -> None:
        due: datetime | None = None
        claim = True
        while True:
            self._wake.clear()
            claim, self._claim = claim or self._claim, False
            try:
                await self.drain(claim=claim)
                if claim:  # handed rows alone change nothing in what is due next
                    async with self.context.db.read() as conn:
                        due = await next_effect_due(conn)
            except Exception as exc:  # the loop must survive a database hiccup
                self._claim = True  # the next pass looks at the outbox again
                due = None  # not the due time read before it: that would spin, not wait a poll
                if is_storage_error(exc):  # an outage: one line a poll, not a traceback
                    log.warning("outbox delivery waits for the database: %s", exc)
                else:
                    log.exception("outbox delivery failed; retrying")
            timeout = self.context.options.poll_seconds
            if due is not None:
                wait = (due - self.context.clock()).total_seconds()
                timeout = min(timeout, max(0.0, wait))
            # woken by a handover only: deliver it without a claim; a timer or poll claims
            claim = not await woken(self._wake, timeout)

    # --- performing effects -------------------------------------------------------------

    async def perform(self, claimed: Claimed) -> bool:
        """Perform one claimed effect; True when a job now holds its outbox row."""
        effect = claimed.effect
        ctx = self.context
        redelivered = claimed.delivery > 1
        if isinstance(effect, RetryDue):
            await ctx.reconciler.reconcile(
                effect.conversation_id, assignees=await ctx.enabled_names()
            )
            return False
        conversation = await ctx.conversation(effect.conversation_id)
        if isinstance(effect, UpdatePlanCard):
            await plan_notices.show_card(self.context, conversation, effect.plan_id, first=False)
            return False
        if isinstance(effect, ShowForm | AskUser):
            handed = claimed.handed and not redelivered  # decided here a moment ago
            await step_dispatch.post_form(
                ctx, conversation, effect, redelivered=redelivered, handed=handed
            )
            return False
        if isinstance(effect, FormAnswer):
            await form_answers.perform(ctx, conversation, effect)
            return False
        if isinstance(effect, PlanStopped):
            await plan_notices.stopped(
                self.context, self.runner, conversation, effect, redelivered=redelivered
            )
            return False
        if isinstance(effect, PlanFinished):
            return await self._finished(claimed, conversation, effect)
        if isinstance(effect, StepFailureNotice):
            await plan_notices.failure(self.context, conversation, effect, redelivered=redelivered)
            return False
        plan = None
        if isinstance(effect, PostDispatch | RunCommanderStep | ResumeStep):
            handed = claimed.handed and not redelivered  # decided here a moment ago
            plan = await step_dispatch.current_plan(
                ctx, self.admission, effect, conversation, handed=handed
            )
            if plan is None:
                return False  # cancelled or aborted before it ran: nothing to post or run
        dispatch = None  # the step's dispatch message, kept as its run claims its slot
        if isinstance(effect, PostDispatch):
            dispatch = await step_dispatch.post_dispatch(
                ctx, conversation, effect, redelivered=redelivered
            )
        if isinstance(effect, PostDispatch | RunCommanderStep):  # a step waited to run
            self._queued(claimed)
        return await self._start_long(claimed, conversation, plan, dispatch)

    async def _finished(
        self, claimed: Claimed, conversation: ConversationRecord, effect: PlanFinished
    ) -> bool:
        """A finished plan: said at once, or its final answer asks the scheduler for a slot
        like any model run. True: the row is held."""
        redelivered = claimed.delivery > 1
        plan = await plan_notices.finished(
            self.context, self.runner, conversation, effect, redelivered=redelivered
        )
        return plan is not None and await self._start_long(claimed, conversation, plan)

    async def _start_long(
        self,
        claimed: Claimed,
        conversation: ConversationRecord,
        plan: Plan | None = None,
        dispatch: MessageRecord | None = None,
    ) -> bool:
        """Ask the scheduler for a slot for a step run or a commander turn (it starts when
        granted); the other long work starts at once. True: the row is held. `plan`: the
        step's plan, as just read or remembered; `dispatch`: its dispatch message, posted and
        kept by the claim (`SlotRequest.keep`)."""
        effect = claimed.effect
        redelivered = claimed.delivery > 1
        run_key, work, at_claim = step_dispatch.work_of(
            self.context, effect, conversation, redelivered, plan
        )
        if isinstance(effect, SCHEDULED):
            slot = await slot_request(self.context, self.admission, effect, conversation, plan)
            slot = replace(slot, keep=dispatch)
            if self._stopping:  # it waits in line: a running process grants it
                now = self.context.clock()
                queued = in_line(slot)
                until = now + self.context.options.lease
                await claim_slot(self.context.db, queued, self.owner, now=now, until=until)
                return True
            self.runner.hold(
                effect, slot.run_key, work, slot=slot, at_claim=at_claim, row_until=claimed.until
            )
            return True
        self.runner.hold(effect, run_key, work, row_until=claimed.until)
        return True

    async def _start_granted(self, record: RunRequestRecord) -> None:
        """A run the scheduler granted here starts (resumed from its stored history when
        it ran before: after a preemption or a crash)."""
        effect = from_row(
            record.effect_key, record.effect_kind, record.conversation_id or 0, record.effect
        )
        if isinstance(effect, PostDispatch | RunCommanderStep | ResumeStep):
            if not await plan_reads.still_current(self.context, effect):
                await self._not_wanted(record)  # cancelled or aborted while it waited
                return
        conversation = await self.context.conversation(effect.conversation_id)
        _, work, _ = step_dispatch.work_of(self.context, effect, conversation, record.grants > 0)
        self.runner.hold(effect, record.run_key, work, granted=True)

    async def _not_wanted(self, record: RunRequestRecord) -> None:
        """A granted run whose step moved on: its slot, lease and row are let go unrun."""
        await let_go_unrun(self.context, record, self.owner)
        self.admission.wake()

    def _slot_freed(self, job: Job, preempted: bool) -> None:
        """A job let its slot go: another run may start now (and a paused one says so)."""
        self.admission.wake()
        if preempted and job.plan_id is not None and job.conversation_id is not None:
            conversation_id, plan_id = job.conversation_id, job.plan_id
            task = asyncio.create_task(self._show_waits(conversation_id, plan_id))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    async def _show_waits(self, conversation_id: int, plan_id: int) -> None:
        conversation = await self.context.conversation(conversation_id)
        await plan_notices.show_card(self.context, conversation, plan_id, first=False)

    async def _refused(self, record: RunRequestRecord, reason: str) -> None:
        await fail_refused(self.context, record, reason)

    def _queued(self, claimed: Claimed) -> None:
        if claimed.created_at is not None and claimed.delivery == 1:
            waited = (self.context.clock() - claimed.created_at).total_seconds()
            self.observer.queued(max(0.0, waited))

    async def _given_up(self, effect: Effect, reason: str) -> None:
        """The outbox gave an effect up: a step waiting on it fails (its on_failure applies)."""
        await step_runs.fail_given_up(self.context, effect, reason)
