"""The executor: performs the decided effects – posts, runs steps, commander turns, stops.

One per process. Its loop claims due outbox rows (`agents/outbox.py`) and performs each
typed effect: posting ones through the `SlackPort`, long ones (an agent's run, a commander
turn) as jobs with no lock held. A job holds a lease – the run's lease and its outbox
row's, renewed together in one transaction by a heartbeat every few seconds – so after a
crash another process takes the work over as soon as that one lease expired. The
heartbeat also notices when the step is no longer the job's to finish (the plan was
cancelled or aborted, in this process or another) and stops the job at once.

Every job ends by reporting: an outcome (or commander operations) to the reconciler. A job
that dies of a bug reports the step failed with a sentence (its `on_failure` applies);
nothing is retried blindly for ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from agents import commander_turns, step_runs
from agents.effects import (
    AskCommander,
    AskUser,
    Effect,
    MessageForCommander,
    PlanFinished,
    PlanStalled,
    PlanStopped,
    PostDispatch,
    ResumeStep,
    RetryDue,
    RunCommanderStep,
    ShowForm,
    UpdatePlanCard,
)
from agents.errors import TransientError
from agents.outbox import Claimed, OutboxSender
from agents.plan import StepFailed
from agents.ports import ChooseModel, NoObserver, RunObserver, SlackPort
from agents.reconciler import Reconciler
from agents.registry import enabled_agent_names
from storage.conversations import get_conversation
from storage.db import Database
from storage.outbox import finish_effect, hold_effect, next_effect_due
from storage.plans import load_plan
from storage.records import ConversationRecord
from storage.runs import claim_run, release_run, release_runs_of, renew_run, run_lease_until

log = logging.getLogger(__name__)
Clock = Callable[[], datetime]
Work = Callable[[], Awaitable[None]]
RETRY_AFTER = timedelta(seconds=15)  # long work that met a transient failure is retried
FINISH_BATCH_SECONDS = 5.0  # a stopping process still delivers the rows it claimed


@dataclass(frozen=True, slots=True)
class ExecutorOptions:
    """How the executor runs work (read from the settings in bot/)."""

    max_parallel: int = 1
    max_transient_failures: int = 3
    lease: timedelta = timedelta(seconds=30)  # a crashed process's work waits at most this
    heartbeat: timedelta = timedelta(seconds=5)  # renews the lease, notices a cancel
    poll_seconds: float = 5.0  # look at the outbox at least this often (expired leases)
    commander_retries: int = 2  # a commander turn that fails or stalls the plan: retries


@dataclass(slots=True)
class Job:
    """Long work of this process: one agent run or commander turn."""

    key: str  # the outbox row it holds
    kind: str  # the kind of effect that started it
    plan_id: int | None
    step: int | None
    attempt: int | None
    conversation_id: int | None = None
    task: asyncio.Task[None] | None = None
    cancelled: bool = False  # the plan was stopped: the work is over, not handed on
    lease_lost: bool = False  # another process took the lease: it settles the row
    working: bool = True  # False once the work ended: its heartbeat then cancels nothing


@dataclass(slots=True)
class Context:
    """What a job needs: handed to `step_runs` and `commander_turns`."""

    db: Database
    reconciler: Reconciler
    port: SlackPort
    choose_model: ChooseModel
    clock: Clock
    options: ExecutorOptions
    observer: RunObserver
    team_id: str = ""
    conversations: dict[int, ConversationRecord] = field(default_factory=dict)

    async def conversation(self, conversation_id: int) -> ConversationRecord:
        known = self.conversations.get(conversation_id)
        if known is None:
            async with self.db.read() as conn:
                known = await get_conversation(conn, conversation_id)
            self.conversations[conversation_id] = known
        return known

    async def enabled_names(self) -> list[str]:
        async with self.db.read() as conn:
            return await enabled_agent_names(conn, self.team_id)


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
            on_give_up=self._given_up,
        )
        self.jobs: dict[str, Job] = {}
        self._wake = asyncio.Event()
        self._draining = asyncio.Lock()
        self._loop: asyncio.Task[None] | None = None
        self._abandoned = False  # see `abandon`
        self._stopping = False  # see `stop`

    @property
    def observer(self) -> RunObserver:
        return self.context.observer or NoObserver()

    # --- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        """Start delivering (work a dead process left is claimed once its lease expired)."""
        self._stopping = False
        self._loop = asyncio.create_task(self._deliver_forever(), name="outbox")

    async def stop(self, grace: float = 0.0) -> list[str]:
        """Stop delivering: the rows already claimed are still delivered (a claimed row
        left undelivered would wait a whole lease), no more are claimed. Within `grace`
        seconds in all (the batch gets at least FINISH_BATCH_SECONDS), running jobs may
        finish; the rest is handed over (their leases released, so any process takes
        them at once). Returns the keys handed over."""
        self._stopping = True
        if self._loop is not None:
            began = asyncio.get_running_loop().time()
            with contextlib.suppress(TimeoutError):  # the drain under way ends its batch
                async with asyncio.timeout(max(grace, FINISH_BATCH_SECONDS)), self._draining:
                    pass
            grace = max(0.0, grace - (asyncio.get_running_loop().time() - began))
            self._loop.cancel()
            await asyncio.gather(self._loop, return_exceptions=True)
            self._loop = None
        tasks = [j.task for j in self.jobs.values() if j.task is not None]
        if tasks and grace > 0:
            await asyncio.wait(tasks, timeout=grace)
        handed = [key for key, job in self.jobs.items() if job.task and not job.task.done()]
        for job in list(self.jobs.values()):
            if job.task is not None:
                job.task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # a job cancelled before its task ran never got to its own hand-over: done here
        self.jobs = {k: j for k, j in self.jobs.items() if j.task and not j.task.done()}
        if handed:
            with contextlib.suppress(Exception):
                async with self.context.db.write() as conn:
                    await release_runs_of(conn, self.owner)
                    for key in handed:
                        await hold_effect(conn, key, self.context.clock())
            log.info("handed over %d job(s) to other processes: %s", len(handed), handed)
        return handed

    async def abandon(self) -> None:
        """Die as a killed process would (kill -9): stop the loop and every job, release
        nothing and hand nothing over, so another process takes the work only once the
        lease expired. A seam for the tests (bench/resume.py kills real processes); a
        service never calls it."""
        self._abandoned = True
        tasks = [j.task for j in self.jobs.values() if j.task is not None]
        if self._loop is not None:
            tasks.append(self._loop)
            self._loop = None
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def wake(self) -> None:
        """Look at the outbox now (after a commit, or when a timer may have come due)."""
        self._wake.set()

    async def drain(self) -> int:
        """Deliver what is due now; waits for a delivery already under way here. Once
        stopping, no further batch is claimed."""
        async with self._draining:
            total = 0
            while not self._stopping and (claimed := await self.outbox.deliver_due()):
                total += claimed
            return total

    async def settle(self) -> None:
        """Deliver everything due and wait for every job (the demo and tests use it)."""
        while True:
            await self.drain()
            tasks = [j.task for j in self.jobs.values() if j.task is not None]
            if not tasks:
                return
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _deliver_forever(self) -> None:
        while True:
            self._wake.clear()
            due: datetime | None = None
            try:
                await self.drain()
                async with self.context.db.read() as conn:
                    due = await next_effect_due(conn)
            except Exception:  # the loop must survive a database hiccup
                log.exception("outbox delivery failed; retrying")
            timeout = self.context.options.poll_seconds
            if due is not None:
                wait = (due - self.context.clock()).total_seconds()
                timeout = min(timeout, max(0.0, wait))
            with contextlib.suppress(TimeoutError):  # a timer came due: look again
                await asyncio.wait_for(self._wake.wait(), timeout)

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
            await self._show_card(conversation, effect.plan_id, first=False)
            return False
        if isinstance(effect, ShowForm | AskUser):
            await self._post_form(conversation, effect, redelivered=redelivered)
            return False
        if isinstance(effect, PlanStopped):
            await self._stopped(conversation, effect, redelivered=redelivered)
            return False
        if isinstance(effect, PlanFinished):
            await self._finished(conversation, effect, redelivered=redelivered)
            return False
        if isinstance(effect, PostDispatch | RunCommanderStep | ResumeStep):
            if not await step_runs.still_current(ctx, effect):
                return False  # cancelled or aborted before it ran: nothing to post or run
        if isinstance(effect, PostDispatch):
            await self._post_dispatch(conversation, effect, redelivered=redelivered)
        if isinstance(effect, PostDispatch | RunCommanderStep):  # a step waited to run
            self._queued(claimed)
        return self._start_long(claimed, conversation)

    async def _post_form(
        self, conversation: ConversationRecord, effect: ShowForm | AskUser, *, redelivered: bool
    ) -> None:
        ctx = self.context
        if not await step_runs.still_current(ctx, effect):
            return  # the plan moved on (cancelled, aborted): no form to show
        if redelivered and await ctx.port.thread_has_key(conversation, effect.key):
            return
        plan = await ctx.reconciler.plan(effect.conversation_id)
        await self._show_card(conversation, effect.plan_id, first=True)
        await ctx.port.post_form(conversation, effect, plan)
        if isinstance(effect, ShowForm):
            self.observer.dispatched("user")

    async def _post_dispatch(
        self, conversation: ConversationRecord, effect: PostDispatch, *, redelivered: bool
    ) -> None:
        ctx = self.context
        await self._show_card(conversation, effect.plan_id, first=True)
        # after a crash the message may be there already: never post twice
        if not (redelivered and await ctx.port.thread_has_key(conversation, effect.key)):
            await ctx.port.post_dispatch(conversation, effect)
            self.observer.dispatched("agent")

    def _start_long(self, claimed: Claimed, conversation: ConversationRecord) -> bool:
        effect = claimed.effect
        ctx = self.context
        redelivered = claimed.delivery > 1
        if isinstance(effect, PostDispatch):
            self._hold(
                effect, effect.key, lambda: step_runs.run(ctx, conversation, effect, redelivered)
            )
        elif isinstance(effect, RunCommanderStep):
            self.observer.dispatched("commander")
            self._hold(
                effect, effect.key, lambda: step_runs.run(ctx, conversation, effect, redelivered)
            )
        elif isinstance(effect, ResumeStep):
            self._hold(
                effect,
                step_runs.run_key_of(effect),
                lambda: step_runs.run(ctx, conversation, effect, redelivered),
            )
        elif isinstance(effect, AskCommander | MessageForCommander | PlanStalled):
            self._hold(effect, None, lambda: commander_turns.take(ctx, conversation, effect))
        else:  # pragma: no cover - every kind is handled above
            raise TypeError(f"no performer for {type(effect).__name__}")
        return True

    def _queued(self, claimed: Claimed) -> None:
        if claimed.created_at is not None and claimed.delivery == 1:
            waited = (self.context.clock() - claimed.created_at).total_seconds()
            self.observer.queued(max(0.0, waited))

    async def _show_card(
        self, conversation: ConversationRecord, plan_id: int, *, first: bool
    ) -> None:
        plan = await step_runs.load(self.context, conversation.id, plan_id)
        if plan is not None:
            await self.context.port.show_card(conversation, plan, first=first)

    async def _stopped(
        self, conversation: ConversationRecord, effect: PlanStopped, *, redelivered: bool
    ) -> None:
        """A cancelled plan: stop its runs here, close its forms, say so once."""
        await self.cancel_runs(effect.plan_id, conversation_id=conversation.id)
        plan = await step_runs.load(self.context, conversation.id, effect.plan_id)
        if plan is not None:
            await self.context.port.close_forms(conversation, plan, "The plan was cancelled.")
        if redelivered and await self.context.port.thread_has_key(conversation, effect.key):
            return  # said already (Slack's answer was lost, or this process stopped)
        who = f" by <@{effect.by}>" if effect.by else ""
        await self.context.port.say(
            conversation, f"Plan cancelled{who}. Nothing else will run.", key=effect.key
        )

    async def _finished(
        self, conversation: ConversationRecord, effect: PlanFinished, *, redelivered: bool
    ) -> None:
        if effect.status == "aborted":
            await self.cancel_runs(effect.plan_id, conversation_id=conversation.id)
        plan = await step_runs.load(self.context, conversation.id, effect.plan_id)
        if plan is None:
            return
        if effect.status == "aborted":
            await self.context.port.close_forms(conversation, plan, "The plan was stopped.")
        if redelivered and await self.context.port.thread_has_key(conversation, effect.key):
            return
        note = step_runs.closing_note(plan, effect.reason)
        if note:
            await self.context.port.say(conversation, note, key=effect.key)

    # --- jobs, leases, cancellation -----------------------------------------------------

    def _hold(self, effect: Effect, run_key: str | None, work: Work) -> None:
        """Run `work` as a job holding `effect`'s outbox row (and `run_key`'s lease)."""
        if effect.key in self.jobs:
            return  # already running here
        plan_id = getattr(effect, "plan_id", None)
        job = Job(
            effect.key,
            kind=effect.kind,
            plan_id=plan_id,
            step=getattr(effect, "step", None),
            attempt=getattr(effect, "attempt", None),
            conversation_id=effect.conversation_id,
        )
        self.jobs[effect.key] = job
        job.task = asyncio.create_task(self._job(job, run_key, work), name=effect.key)
        self.observer.jobs_running(len(self.jobs))

    async def _job(self, job: Job, run_key: str | None, work: Work) -> None:
        lease_key = run_key or f"turn:{job.key}"
        try:
            if not await self._claim(lease_key, job.key):
                log.info("%s runs in another process", lease_key)
                return
            heartbeat = asyncio.create_task(self._heartbeat(job, lease_key))
            ended: BaseException | None = None
            try:
                await work()
            except (asyncio.CancelledError, Exception) as exc:
                ended = exc
            finally:
                job.working = False
                heartbeat.cancel()
            # the heartbeat is over before the lease is let go: it cannot renew it after
            await asyncio.gather(heartbeat, return_exceptions=True)
            await self._release(job, lease_key, ended)
            if isinstance(ended, asyncio.CancelledError):
                raise ended
        finally:
            self.jobs.pop(job.key, None)
            self.observer.jobs_running(len(self.jobs))

    async def _release(self, job: Job, lease_key: str, ended: BaseException | None) -> None:
        """Let go of a job's lease and row as its work ended (`ended`: why, None: done)."""
        if self._abandoned or job.lease_lost:
            return  # a killed process releases nothing; a lost lease is another's now
        if isinstance(ended, asyncio.CancelledError):
            if job.cancelled:  # the plan was stopped: the work is over, not handed on
                await self._settle(lease_key, job.key)
            else:  # this process stops: any process takes it now
                await self._hand_over(lease_key, job.key)
        elif isinstance(ended, TransientError):  # e.g. Slack 5xx on the answer: try again
            log.info("%s will be tried again: %s", job.key, ended)
            await self._hand_over(lease_key, job.key, after=RETRY_AFTER)
        elif isinstance(ended, Exception):
            log.error("%s failed", job.key, exc_info=ended)
            await self._crashed(job, ended)
            await self._settle(lease_key, job.key)
        else:
            await self._settle(lease_key, job.key)

    async def _crashed(self, job: Job, exc: Exception) -> None:
        """A job died of a bug: its step fails with a sentence, under its on_failure."""
        if job.plan_id is None or job.step is None or job.attempt is None:
            return
        effect_conversation = await self._conversation_of(job.plan_id)
        if effect_conversation is None:
            return
        failed = StepFailed(
            index=job.step,
            attempt=job.attempt,
            reason="an internal error stopped this step (the details are in the log)",
            retryable=False,
        )
        with contextlib.suppress(Exception):
            await step_runs.report(self.context, effect_conversation, failed)

    async def _conversation_of(self, plan_id: int) -> int | None:
        async with self.context.db.read() as conn:
            loaded = await conn.run_sync(load_plan, plan_id)
        return int(loaded.plan["conversation_id"]) if loaded is not None else None

    async def _claim(self, lease_key: str, row_key: str) -> bool:
        """Take the run's lease and hold its outbox row until the same instant, in one
        transaction: after a crash both come free together, so whoever claims the row
        takes the run in the same pass. Refused (another process runs it): the row is
        looked at again when that lease ends, or within a heartbeat if sooner."""
        options = self.context.options
        now = self.context.clock()
        until = now + options.lease
        async with self.context.db.write() as conn:
            mine = await claim_run(conn, lease_key, self.owner, now=now, until=until)
            if mine:
                await hold_effect(conn, row_key, until)
            else:
                held = await run_lease_until(conn, lease_key) or now
                await hold_effect(conn, row_key, min(held, now + options.heartbeat))
        return mine

    async def _heartbeat(self, job: Job, lease_key: str) -> None:
        """Renew the run's lease and its row's together; stop the job when its step is
        no longer in progress (cancelled or aborted elsewhere) or the lease was lost."""
        ctx = self.context
        while True:
            await asyncio.sleep(ctx.options.heartbeat.total_seconds())
            try:
                until = ctx.clock() + ctx.options.lease
                async with ctx.db.write() as conn:
                    kept = await renew_run(conn, lease_key, self.owner, until)
                    if kept:
                        await hold_effect(conn, job.key, until)
                wanted = kept and await step_runs.job_still_wanted(ctx, job)
            except Exception:  # a database hiccup: the lease outlives a few missed beats
                log.warning("could not renew the lease on %s", lease_key, exc_info=True)
                continue
            if wanted:
                continue
            if not kept:
                log.warning("lost the lease on %s (this process was too slow)", lease_key)
                job.lease_lost = True
            else:
                job.cancelled = True
            if job.working and job.task is not None:
                job.task.cancel()
            return

    async def _settle(self, lease_key: str, row_key: str) -> None:
        async with self.context.db.write() as conn:  # lease, then row: as `_claim` locks
            await release_run(conn, lease_key, self.owner)
            await finish_effect(conn, row_key, self.context.clock())

    async def _hand_over(
        self, lease_key: str, row_key: str, *, after: timedelta = timedelta(0)
    ) -> None:
        with contextlib.suppress(Exception):  # a stopping process: best effort
            async with self.context.db.write() as conn:
                await release_run(conn, lease_key, self.owner)
                await hold_effect(conn, row_key, self.context.clock() + after)

    async def cancel_runs(self, plan_id: int, *, conversation_id: int | None = None) -> int:
        """Stop this process's jobs of a plan at once (other processes' heartbeats notice
        within one heartbeat), and the commander's answers to people's messages in its
        thread (`conversation_id`): nothing is said after the plan's stop. A job whose
        work already ended is waited for, not cut while it settles. How many were stopped."""

        def of_plan(job: Job) -> bool:
            if job.plan_id == plan_id:
                return True
            # the commander answering a person's message in the plan's thread
            return job.kind == "commander_turn" and job.conversation_id == conversation_id

        jobs = [j for j in self.jobs.values() if of_plan(j) and j.task is not None]
        stopped = [j for j in jobs if j.working]
        for job in stopped:
            job.cancelled = True
            assert job.task is not None
            job.task.cancel()
        await asyncio.gather(*(j.task for j in jobs if j.task), return_exceptions=True)
        return len(stopped)

    async def _given_up(self, effect: Effect, reason: str) -> None:
        """The outbox gave an effect up: a step waiting on it fails (its on_failure applies)."""
        await step_runs.fail_given_up(self.context, effect, reason)
