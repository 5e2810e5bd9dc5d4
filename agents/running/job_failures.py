"""What happens to a job whose work failed: tried again, handed over after a backoff, or
its step failed with a sentence.

A transient failure (e.g. Slack 5xx on the answer) hands the work over to be tried again
under the `job` retry policy (`agents/core/retry_policy.py`; a Retry-After Slack sent is
honoured), counted on its outbox row; when the policy's tries are spent its step fails with
a sentence, so a step never waits for ever on Slack or a model that stays down. A storage
outage counts nothing against the step: the thread is told once per plan and the work is
handed over after the `storage` policy's backoff. A job that
dies of a bug, or of a refusal for good, fails its step with a sentence. The lease and row
mechanics of the jobs themselves are `agents/running/jobs.py`.
"""

from __future__ import annotations

import contextlib
import logging
from datetime import timedelta

from flotilla.agents.core.errors import TransientError
from flotilla.agents.core.failures import PUBLIC_STORAGE, is_storage_error, storage_error
from flotilla.agents.core.lru import LRUCache
from flotilla.agents.core.retry_policy import retry_after
from flotilla.agents.planning.plan import StepFailed
from flotilla.agents.running import step_runs
from flotilla.agents.running.run_context import Context, Job
from flotilla.storage.outbox import fail_held_effect, give_up_held_effect
from flotilla.storage.run_requests import drop_request
from flotilla.storage.runs import release_run

log = logging.getLogger(__name__)


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
            if not policy.retries(error, failures):
                await give_up_held_effect(conn, job.key, error=str(error))
        if policy.retries(error, failures):
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
