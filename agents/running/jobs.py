"""Long work of one process – agent runs and commander turns – as jobs under a lease.

A job holds its outbox row and its run's lease until the same instant, renewed together by
a heartbeat every few seconds, so after a crash another process takes the work over as
soon as that one lease expired. The heartbeat also notices when the step is no longer the
job's to finish (the plan was cancelled or aborted, in this process or another) and stops
the job at once.

What a failed job leads to (`JobFailures`, the end of this module): a transient failure
(e.g. Slack 5xx on the answer) hands the work over to be tried again under the `job` retry
policy (`agents/core/retry_policy.py`; a Retry-After Slack sent is honoured), counted on
its outbox row, and when the policy's tries are spent its step fails with a sentence, so a
step never waits for ever on Slack or a model that stays down; a storage outage counts
nothing against the step: the thread is told once per plan and the work is handed over
after the `storage` policy's backoff; a job that dies of a bug, or of a refusal for good,
fails its step with a sentence.

A scheduled run (a step or a commander turn) has no lease of its own: its granted run
request is its lease (`agents/running/slot_requests.py`), asked for as the job claims its work.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta

from flotilla.agents.core import telemetry
from flotilla.agents.core.errors import PermanentError, TransientError
from flotilla.agents.core.failures import PUBLIC_STORAGE, is_storage_error, storage_error
from flotilla.agents.core.lru import LRUCache
from flotilla.agents.core.retry_policy import retry_after
from flotilla.agents.planning.effects import Effect
from flotilla.agents.planning.plan import StepFailed
from flotilla.agents.running import step_runs
from flotilla.agents.running.attempt import Attempt, Work
from flotilla.agents.running.job_settling import settling_of
from flotilla.agents.running.preemption import Preempted, turn_boundary
from flotilla.agents.running.run_context import Context, Job
from flotilla.agents.running.slot_requests import SlotRequest, claim_slot
from flotilla.storage.db import Also
from flotilla.storage.outbox import (
    fail_held_effect,
    finish_effect,
    give_up_held_effect,
    hold_effect,
)
from flotilla.storage.records import RunRequestRecord
from flotilla.storage.run_request_leases import finish_request, renew_request
from flotilla.storage.run_requests import drop_request, requeue_request, requeue_requests_of
from flotilla.storage.runs import (
    claim_run,
    release_run,
    release_runs_of,
    renew_run,
    run_lease_until,
)

log = logging.getLogger(__name__)


class JobRunner:
    """This process's jobs, each under the lease of the work it does."""

    def __init__(
        self,
        context: Context,
        *,
        owner: str,
        on_slot_freed: Callable[[Job, bool], None] | None = None,
        on_queued: Callable[[], None] | None = None,
        start_passed: Callable[[RunRequestRecord], Awaitable[None]] | None = None,
    ) -> None:
        self.context = context
        self.owner = owner
        # told when a job let its run slot go to waiting runs (True: paused for urgent work)
        self.on_slot_freed = on_slot_freed
        self.on_queued = on_queued  # told when a job's run waits in line for a slot
        self.start_passed = start_passed  # starts the urgent run a paused one's slot went to
        self.jobs: dict[str, Job] = {}
        self.abandoned = False  # a killed process releases nothing (see Executor.abandon)
        self.failures = JobFailures(context, owner=owner)

    def hold(
        self,
        effect: Effect,
        run_key: str | None,
        work: Work,
        *,
        slot: SlotRequest | None = None,
        granted: bool = False,
        at_claim: Also | None = None,
        row_until: datetime | None = None,
    ) -> None:
        """Run `work` as a job holding `effect`'s outbox row (and `run_key`'s lease).

        A scheduled run asks for its `slot` as it claims its work (granted at once, or it
        waits in line and this job ends); one an admission pass `granted` here holds its
        request as its lease already. `at_claim`: the work's reads, made in the claim's
        transaction when it is granted there (`claim_slot`). `row_until`: the row's
        delivery claim, held by this process until then (see `_claim`)."""
        if (held := self.jobs.get(effect.key)) is not None:
            held.take_grant |= granted  # still claiming: it runs under this grant
            return  # already running here
        plan_id = getattr(effect, "plan_id", None)
        job = Job(
            effect.key,
            kind=effect.kind,
            plan_id=plan_id,
            step=getattr(effect, "step", None),
            attempt=getattr(effect, "attempt", None),
            conversation_id=effect.conversation_id,
            run_key=run_key or f"turn:{effect.key}",
            scheduled=slot is not None or granted,
            row_until=row_until,
        )
        self.jobs[effect.key] = job
        job.task = asyncio.create_task(
            self._job(job, work, slot, granted, at_claim), name=effect.key
        )
        self.context.observer.jobs_running(len(self.jobs))

    async def _job(
        self,
        job: Job,
        work: Work,
        slot: SlotRequest | None,
        granted: bool,
        at_claim: Also | None,
    ) -> None:
        lease_key = job.run_key or f"turn:{job.key}"
        try:
            try:
                claimed = "mine" if granted else await self._claim(job, lease_key, slot, at_claim)
            except Exception as exc:
                unsettled(job, exc)
                return
            if claimed == "granted_here" and job.take_grant:
                claimed = "mine"  # a pass here granted it as the row was delivered again
            if claimed == "waiting" and self.on_queued is not None:
                self.on_queued()  # an admission pass grants it (here or elsewhere)
            if claimed != "mine":
                log.info("%s: %s", lease_key, claimed)
                return
            heartbeat = asyncio.create_task(self._heartbeat(job, lease_key))
            ended: BaseException | None = None
            attempt = self._attempt(job, lease_key, heartbeat)
            settling = attempt.settles
            try:
                await work(attempt)  # a failure reported after it settles on its own
            except (asyncio.CancelledError, Exception) as exc:
                ended = exc
            finally:
                job.working = False
                heartbeat.cancel()
            # the heartbeat is over before the lease is let go: it cannot renew it after
            await asyncio.gather(heartbeat, return_exceptions=True)
            others_wait = True
            try:
                if ended is None and settling is not None and settling.others_wait is not None:
                    self.failures.outage_over(job)  # settled with its outcome's reconcile
                    others_wait = settling.others_wait
                else:
                    others_wait = await self._release(job, lease_key, ended)
            except Exception as exc:
                unsettled(job, exc)
            if self.on_slot_freed is not None and not self.abandoned and others_wait:
                self.on_slot_freed(job, isinstance(ended, Preempted))
            if isinstance(ended, asyncio.CancelledError) and not isinstance(ended, Preempted):
                raise ended
        finally:
            self.jobs.pop(job.key, None)
            self.context.observer.jobs_running(len(self.jobs))

    def _attempt(self, job: Job, lease_key: str, heartbeat: asyncio.Task[None]) -> Attempt:
        """The attempt this job's claim made: a scheduled run yields to urgent work at a
        model-turn boundary (when this process starts passed runs) and settles in its
        outcome's reconcile."""
        yields = job.scheduled and self.start_passed is not None
        settles = job.scheduled and not self.abandoned
        return Attempt(
            key=job.key,
            run_key=lease_key,
            plan_id=job.plan_id,
            step=job.step,
            attempt=job.attempt,
            conversation_id=job.conversation_id,
            yields=turn_boundary(self.context, job, self.owner) if yields else None,
            settles=settling_of(lease_key, job.key, self.owner, heartbeat) if settles else None,
        )

    async def _release(self, job: Job, lease_key: str, ended: BaseException | None) -> bool:
        """Let go of a job's lease and row as its work ended (`ended`: why, None: done);
        False when no run waits for the slot it freed (no admission pass needed)."""
        if self.abandoned or job.lease_lost:
            return False  # a killed process releases nothing; a lost lease is another's
        if ended is not None and not isinstance(ended, asyncio.CancelledError):
            if is_storage_error(ended):
                after = await self.failures.storage_away(job, ended)
                try:
                    await self._hand_over(job, lease_key, after=after, quietly=False)
                except Exception as exc:  # still away: the lease runs out, the outbox retakes it
                    log.info("%s: could not hand over while storage is away: %s", job.key, exc)
                return True
        self.failures.outage_over(job)
        if isinstance(ended, Preempted):  # its slot went to urgent work as it paused
            await self._pause(job)
            if job.cancelled:  # …and the plan was stopped meanwhile: over, not waiting
                await self._settle(job, lease_key)
        elif isinstance(ended, asyncio.CancelledError):
            if job.cancelled:  # the plan was stopped: the work is over, not handed on
                return await self._settle(job, lease_key)
            await self._hand_over(job, lease_key)  # this process stops: any takes it now
        elif isinstance(ended, TransientError):  # e.g. Slack 5xx on the answer: try again
            await self.failures.try_again(job, lease_key, ended)
        elif isinstance(ended, PermanentError):  # refused for good (e.g. Slack, the post)
            log.warning("%s failed for good: %s", job.key, ended)
            await self.failures.crashed(job, ended.public)
            return await self._settle(job, lease_key)
        elif isinstance(ended, Exception):
            log.error("%s failed", job.key, exc_info=ended)
            await self.failures.crashed(job)
            return await self._settle(job, lease_key)
        else:
            return await self._settle(job, lease_key)
        return True

    async def _claim(
        self, job: Job, lease_key: str, slot: SlotRequest | None, at_claim: Also | None = None
    ) -> str:
        """Take the run's lease and hold its outbox row until the same instant, in one
        transaction: after a crash both come free together, so whoever claims the row
        takes the run in the same pass. Refused (another process runs it): the row is
        looked at again when that lease ends, or within a heartbeat if sooner. A scheduled
        run's lease is its slot (`claim_slot`): "mine", "waiting" or "elsewhere".

        A row delivered a moment ago (less than a heartbeat of its claim spent) is held
        already: the lease then ends with the row's claim – at most a heartbeat early, the
        heartbeat renews both – and the row is not written again."""
        options = self.context.options
        now = self.context.clock()
        until, hold_row = now + options.lease, True
        if job.row_until is not None and job.row_until >= until - options.heartbeat:
            until, hold_row = min(until, job.row_until), False
        if slot is not None:
            return await claim_slot(
                self.context.db,
                slot,
                self.owner,
                now=now,
                until=until,
                also=at_claim,
                hold_row=hold_row,
            )
        async with self.context.db.write() as conn:
            mine = await claim_run(conn, lease_key, self.owner, now=now, until=until)
            if not mine:
                held = await run_lease_until(conn, lease_key) or now
                await hold_effect(conn, job.key, min(held, now + options.heartbeat))
            elif hold_row:
                await hold_effect(conn, job.key, until)
        return "mine" if mine else "elsewhere"

    async def _heartbeat(self, job: Job, lease_key: str) -> None:
        """Renew the run's lease and its row's together; stop the job when its step is
        no longer in progress (cancelled or aborted elsewhere) or the lease was lost."""
        ctx = self.context
        while True:
            await asyncio.sleep(ctx.options.heartbeat.total_seconds())
            if job.pause.is_set():
                return  # it gave its slot to urgent work: nothing left to renew
            try:
                until = ctx.clock() + ctx.options.lease
                async with ctx.db.write() as conn:
                    # the lease first: every transaction locks request, lease, row in turn
                    if job.scheduled:  # the granted request is the run's lease
                        kept = await renew_request(conn, lease_key, self.owner, until)
                    else:
                        kept = await renew_run(conn, lease_key, self.owner, until)
                    if kept:
                        await hold_effect(conn, job.key, until)
                wanted = kept and await step_runs.job_still_wanted(ctx, job)
            except Exception as exc:  # a database hiccup: the lease outlives a few missed beats
                outage = is_storage_error(exc)  # an outage: one line, not a traceback a beat
                log.warning(
                    "could not renew the lease on %s: %s", lease_key, exc, exc_info=not outage
                )
                continue
            if wanted:
                continue
            if job.pause.is_set():
                return  # it gave its slot away as this beat renewed: not a lost lease
            if not kept:
                log.warning("lost the lease on %s (this process was too slow)", lease_key)
                job.lease_lost = True
            else:
                job.cancelled = True
            if job.working and job.task is not None:
                job.task.cancel()
            return

    async def _settle(self, job: Job, lease_key: str) -> bool:
        """The work is over: lease and row let go; True when other runs wait for a slot."""
        now = self.context.clock()
        async with self.context.db.write() as conn:  # request, lease, row: as passes lock
            if job.scheduled:
                others_wait = await finish_request(conn, lease_key, now)
            else:
                others_wait = False
                await release_run(conn, lease_key, self.owner)
            await finish_effect(conn, job.key, now)
        return others_wait

    async def _pause(self, job: Job) -> None:
        """Paused for urgent work at a model-turn boundary: the run waits again in its
        place, its history stored (it resumes without re-paying); its slot went to the
        urgent run in the same transaction (`turn_boundary`), started here at once."""
        passed, job.passed = job.passed, None
        if passed is not None and self.start_passed is not None:
            telemetry.admitted(self.context.clock() - passed.enqueued_at)
            await self.start_passed(passed)
        telemetry.preempted()
        log.info("%s paused for urgent work", job.run_key)

    async def _hand_over(
        self, job: Job, lease_key: str, *, after: timedelta = timedelta(0), quietly: bool = True
    ) -> None:
        try:
            async with self.context.db.write() as conn:
                if job.scheduled:
                    await requeue_request(conn, lease_key, self.owner)
                else:
                    await release_run(conn, lease_key, self.owner)
                await hold_effect(conn, job.key, self.context.clock() + after)
        except Exception:
            if not quietly:
                raise  # a stopping process hands over on a best-effort basis

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

    async def hand_over_all(self, keys: list[str]) -> None:
        """A stopping process: every lease of this process released and the rows of
        `keys` free for any process now."""
        with contextlib.suppress(Exception):
            async with self.context.db.write() as conn:
                await requeue_requests_of(conn, self.owner)
                await release_runs_of(conn, self.owner)
                for key in keys:
                    await hold_effect(conn, key, self.context.clock())


# --- what a failed job leads to -------------------------------------------------------------------


def unsettled(job: Job, exc: Exception) -> None:
    """Claiming or letting go of a job's lease failed: nothing is lost (the lease runs out
    and the outbox row comes due again), so one line says so – never a task's traceback."""
    if is_storage_error(exc):
        log.warning(
            "%s: the database is away (%s); taken again after its lease",
            job.key,
            storage_error(exc),
        )
    else:
        log.error("%s could not be settled; taken again after its lease", job.key, exc_info=exc)


class JobFailures:
    """The failures of this process's jobs: what each one leads to, and what is remembered
    of them (storage outages in a row by job, the plans whose thread was told of one)."""

    def __init__(self, context: Context, *, owner: str) -> None:
        self.context = context
        self.owner = owner
        # plans whose thread was told of a storage outage (once each); outages in a row by job
        self.told_of_storage: LRUCache[int, bool] = LRUCache(10_000)
        self.outages: LRUCache[str, int] = LRUCache(10_000)

    def outage_over(self, job: Job) -> None:
        """The job's work ended other than by a storage outage: its count starts again."""
        self.outages.pop(job.key)

    async def try_again(self, job: Job, lease_key: str, error: TransientError) -> None:
        """Hand the work over to be tried again under the `job` retry policy, counting the
        failure on its row; when its tries are spent its step fails with a sentence (a step
        never waits for ever on Slack or a model that stays down). The policy's wait is the
        same after each failure (its row's count and due time are written in one statement),
        longer when Slack asked for it."""
        policy = self.context.options.retry.job
        wait = policy.delay(1, retry_after(error))
        async with self.context.db.write() as conn:
            await drop_request(conn, lease_key)  # the row, due again later, asks anew
            if not job.scheduled:
                await release_run(conn, lease_key, self.owner)
            failures = await fail_held_effect(
                conn, job.key, error=str(error), available_at=self.context.clock() + wait
            )
            retrying = policy.retries(error, failures)
            if not retrying:
                await give_up_held_effect(conn, job.key, error=str(error))
        if retrying:
            log.info("%s will be tried again (%d): %s", job.key, failures, error)
            return
        log.warning("%s gave up after %d tries: %s", job.key, failures, error)
        await self.fail_step(job, f"its work kept failing and was given up ({error.public})")

    async def storage_away(self, job: Job, error: BaseException) -> timedelta:
        """The database was away: tell the thread once per plan; how long to wait before the
        work is handed over (counting nothing against the step, see the module)."""
        outages = (self.outages.get(job.key) or 0) + 1
        self.outages.put(job.key, outages)
        after = self.context.options.retry.storage.delay(outages)
        log.warning("%s: storage is away (%s); trying again in %s", job.key, error, after)
        await self._tell_storage_away(job)
        return after

    async def _tell_storage_away(self, job: Job) -> None:
        """ "I'm having trouble with my storage…" in the job's thread, once per plan."""
        told = job.plan_id if job.plan_id is not None else -(job.conversation_id or 0)
        if job.conversation_id is None or told in self.told_of_storage:
            return
        try:
            conversation = await self.context.conversation(job.conversation_id)
        except Exception as exc:  # not known in this process yet: said at the next outage
            log.info("could not say that storage is away: %s", exc)
            return
        self.told_of_storage.put(told, True)  # at most once: a post is not repeated
        try:
            await self.context.port.say(conversation, PUBLIC_STORAGE)
        except Exception as exc:  # posted, but not kept in the thread's store (it is away)
            log.info("saying that storage is away: %s", exc)

    async def crashed(self, job: Job, why: str = "") -> None:
        """A job died of a bug, or of a refusal that says `why` in a sentence: its step fails
        with a sentence, under its on_failure."""
        with contextlib.suppress(Exception):
            await self.fail_step(
                job, why or "an internal error stopped this step (the details are in the log)"
            )

    async def fail_step(self, job: Job, reason: str) -> None:
        """Report the job's step attempt (if it runs one) failed for good with `reason`."""
        if job.step is None or job.attempt is None or job.conversation_id is None:
            return
        failed = StepFailed(index=job.step, attempt=job.attempt, reason=reason, retryable=False)
        await step_runs.report(self.context, job.conversation_id, failed)
