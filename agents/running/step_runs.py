"""Running one step attempt: its agent's run, its answer in the thread, its outcome.

Called by the executor inside a job that holds the run's lease. The run is keyed by the
step attempt (`step_key`), so a job started twice continues the same stored session
instead of paying for the work again. Before an answer is posted the step is checked to
be still this attempt's to finish: a cancelled or aborted plan gets nothing more in its
thread.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic_ai.messages import ModelMessage
from sqlalchemy.ext.asyncio import AsyncConnection

from flotilla.agents.core.errors import PermanentError, RunError, StorageError, TransientError
from flotilla.agents.core.retry_policy import retry_after
from flotilla.agents.planning.effects import (
    AskUser,
    Effect,
    PostDispatch,
    ResumeStep,
    RunCommanderStep,
    ShowForm,
    result_key,
    step_key,
)
from flotilla.agents.planning.plan import (
    COMMANDER,
    TERMINAL_PLAN,
    Outcome,
    StepBlocked,
    StepFailed,
    StepSucceeded,
)
from flotilla.agents.planning.plan_store import plan_from_rows
from flotilla.agents.reconciling.final_texts import FinalText, store_final_text
from flotilla.agents.reconciling.reconcile_units import AttemptWrites
from flotilla.agents.reconciling.run_results import StepQuestion
from flotilla.agents.running.attempt import Attempt
from flotilla.agents.running.commander import commander_step_spec
from flotilla.agents.running.file_transfer import fetch_attachments, share_produced
from flotilla.agents.running.job_settling import Settling
from flotilla.agents.running.plan_reads import RunnableStep, is_current, remembered
from flotilla.agents.running.preemption import TurnBoundary
from flotilla.agents.running.runtime import RunJob, resume_step, run_step
from flotilla.agents.running.step_reads import Known, StepReads, read_step, read_step_in
from flotilla.agents.tools.files import called_write_file
from flotilla.agents.tools.registry import AgentSpec, spec_from_record
from flotilla.storage.db import Database
from flotilla.storage.files import produced_files
from flotilla.storage.plans import load_latest_plan
from flotilla.storage.records import ConversationRecord, FileRecord

if TYPE_CHECKING:
    from flotilla.agents.running.run_context import Context, Job

log = logging.getLogger(__name__)
STEP_KINDS = (PostDispatch, RunCommanderStep, ResumeStep, ShowForm, AskUser)


def run_key_of(effect: RunnableStep) -> str:
    """The stored session of the step attempt an effect runs."""
    return step_key(effect.plan_id, effect.step, effect.attempt)


def ids(conversation: ConversationRecord, effect: Effect | None = None) -> dict[str, object]:
    """The ids an operator's log line carries (see bot/logs.py)."""
    out: dict[str, object] = {
        "team": conversation.team_id,
        "channel": conversation.channel_id,
        "thread_ts": conversation.thread_ts,
    }
    for name in ("plan_id", "step", "attempt"):
        value = getattr(effect, name, None)
        if value is not None:
            out["plan" if name == "plan_id" else name] = value
    return out


@dataclass(slots=True)
class AfterRun:
    """Whether the step attempt is still current once its run is over (another process may
    have stopped the plan meanwhile), and the files its run wrote: read in the transaction
    that stores the finished run (`read`), else on their own (`seen`)."""

    effect: RunnableStep
    run_key: str
    known: Known = None  # the plan unread, when this process knows it as stored
    found: tuple[bool, list[FileRecord]] | None = None

    async def read(
        self, conn: AsyncConnection, history: Sequence[ModelMessage] | None = None
    ) -> None:
        """`history`: the run's, as its close stores it (no `write_file` call in it: no
        file to look for)."""
        plan = self.known() if self.known is not None else None
        if plan is None:
            loaded = await conn.run_sync(load_latest_plan, self.effect.conversation_id)
            plan = plan_from_rows(loaded.plan, loaded.steps or []) if loaded is not None else None
        wrote = history is None or called_write_file(history)
        produced = await produced_files(conn, run_key=self.run_key) if wrote else []
        self.found = is_current(plan, self.effect), produced

    async def seen(self, ctx: Context) -> tuple[bool, list[FileRecord]]:
        """What was read as the run closed; read now if it was not (e.g. a run that had
        finished before: nothing was stored)."""
        if self.found is None:
            async with ctx.db.read() as conn:
                await self.read(conn)
        assert self.found is not None
        return self.found


@dataclass(slots=True)
class ClaimReads:
    """A step's reads before its run (`read_step_in`), made in the transaction that claims
    its run (`claim_slot(also=…)`) when that transaction holds no lock across processes
    (SQLite: no read transaction of their own); else the run reads them itself. A commander
    turn's are made with its plan read (`commander_turns.TurnReads`)."""

    job: RunJob
    fresh: bool  # not a resumption: its plan and received files are read too
    known: Known = None  # the plan unread, when this process knows it as stored
    found: StepReads | None = None
    # a run's first delivery (not a resumption): no one ran it before (a run is stored only
    # by a process whose claim delivered it), so its claim need not look for its session
    first: bool = False

    async def read(self, conn: AsyncConnection) -> None:
        fresh = self.fresh
        self.found = await read_step_in(
            conn,
            self.job,
            with_plan=fresh,
            with_files=fresh,
            known=self.known,
            with_session=not self.first,
        )

    async def reads(self, db: Database) -> StepReads:
        """What the claim read, once; else read now."""
        found, self.found = self.found, None
        if found is not None:
            return found
        fresh = self.fresh
        return await read_step(db, self.job, with_plan=fresh, with_files=fresh, known=self.known)


def run_job(ctx: Context, conversation: ConversationRecord, effect: RunnableStep) -> RunJob:
    """What a step's run is told of its work."""
    return RunJob(
        run_key=run_key_of(effect),
        team_id=ctx.team_id,
        input=effect.text if isinstance(effect, PostDispatch | RunCommanderStep) else "",
        request=conversation.request_text,
        channel_id=conversation.channel_id,
        conversation_id=conversation.id,
        plan_id=effect.plan_id,
        step_index=effect.step,
        request_ts=conversation.thread_ts,
    )


def claim_reads(
    ctx: Context, conversation: ConversationRecord, effect: RunnableStep, *, redelivered: bool
) -> ClaimReads:
    fresh = not isinstance(effect, ResumeStep)
    job = run_job(ctx, conversation, effect)
    return ClaimReads(job, fresh, known(ctx, effect), first=fresh and not redelivered)


def known(ctx: Context, effect: RunnableStep) -> Known:
    """The effect's plan as this process knows it stored, asked when it is needed."""
    return lambda: remembered(ctx, effect.conversation_id, effect.plan_id)


async def job_still_wanted(ctx: Context, job: Job) -> bool:
    """Whether a running job's work is still wanted (asked by its heartbeat)."""
    if job.plan_id is None or job.kind == "plan_finished":
        return True  # a person's message, a finished plan's answer: always given
    if job.conversation_id is None:
        return False
    plan = await ctx.reconciler.plan(job.conversation_id)
    if plan is None or plan.id != job.plan_id or plan.status in TERMINAL_PLAN:
        return False
    if job.kind in ("ask_commander", "plan_stalled"):
        return True
    step = plan.step(job.step or 0)
    return step is not None and step.attempts == job.attempt and step.status == "in_progress"


async def run(
    ctx: Context,
    conversation: ConversationRecord,
    effect: RunnableStep,
    redelivered: bool,
    reads: ClaimReads | None = None,
    attempt: Attempt | None = None,
) -> None:
    """Run (or resume, or continue after a crash) the step's agent and report the outcome;
    `reads`: its reads before the run, if its claim made them; `attempt`: as its job claimed
    it (how its run yields to urgent work, how it settles with its outcome)."""
    name = effect.agent if isinstance(effect, PostDispatch | ResumeStep) else COMMANDER
    spec = await _assignee(ctx, name)
    outcome: Outcome
    final: FinalText | None = None
    if spec is None:
        outcome = _failed(effect, f"the agent {name} is not available (removed or disabled)")
    else:
        began = time.perf_counter()
        reads = reads or claim_reads(ctx, conversation, effect, redelivered=redelivered)
        yields = attempt.yields if attempt is not None else None
        outcome, final = await _execute(ctx, conversation, effect, spec, redelivered, reads, yields)
        ctx.observer.ran(spec.name, time.perf_counter() - began)
    settles = attempt.settles if attempt is not None else None
    await report(ctx, conversation.id, outcome, final, settles)
    log.info(
        "step outcome: %s",
        type(outcome).__name__.removeprefix("Step").lower(),
        extra=ids(conversation, effect),
    )


async def _assignee(ctx: Context, name: str) -> AgentSpec | None:
    if name == COMMANDER:
        return commander_step_spec()
    record = await ctx.agents.agent(name)
    if record is None or not record.enabled:
        return None
    return spec_from_record(record)


def _failed(
    effect: RunnableStep, reason: str, *, retryable: bool = False, error: RunError | None = None
) -> StepFailed:
    """The attempt failed; `error`'s Retry-After (a provider's) goes with it to the plan."""
    after = retry_after(error) if error is not None else None
    return StepFailed(
        index=effect.step,
        attempt=effect.attempt,
        reason=reason,
        retryable=retryable,
        retry_after_seconds=after.total_seconds() if after is not None else None,
    )


async def _execute(
    ctx: Context,
    conversation: ConversationRecord,
    effect: RunnableStep,
    spec: AgentSpec,
    redelivered: bool,
    claimed: ClaimReads,
    yields: TurnBoundary | None,
) -> tuple[Outcome, FinalText | None]:
    """The step's outcome, and its streamed answer's final text to store with it."""
    job = claimed.job
    files = ctx.options.files
    key = result_key(effect.plan_id, effect.step, effect.attempt)
    agent = None if spec.name == COMMANDER else spec.name
    after = AfterRun(effect, job.run_key, known(ctx, effect))
    # its session, thread, plan and received files: one read for the stream and the run
    reads = await claimed.reads(ctx.db)
    answer = await ctx.port.open_answer(
        conversation,
        agent=agent,
        result_of=effect,
        key=key,
        plan_id=effect.plan_id,
        thread=reads.thread,
        plan=reads.plan,
    )
    try:
        model = await ctx.choose_model(spec.model)
        # the runtime builds the agent's own MCP toolsets from `spec`
        if isinstance(effect, ResumeStep):
            result = await resume_step(
                ctx.db,
                job,
                spec,
                effect.answer,
                model=model,
                files=files,
                show=answer.show,
                reads=reads,
                at_close=after.read,
                yields=yields,
            )
        else:
            # its prompt carries them; a fetch changed its files (maybe the thread): read anew
            fetched = await fetch_attachments(ctx, conversation, reads.received)
            result = await run_step(
                ctx.db,
                job,
                spec,
                model=model,
                files=files,
                show=answer.show,
                reads=None if fetched else reads,
                at_close=after.read,
                yields=yields,
            )
    except StorageError:
        with contextlib.suppress(Exception):  # Slack may still hear it; the database not
            await answer.discard()
        raise  # not the step's failure: its job waits for the database and tries again
    except RunError as exc:
        log.warning("step run failed: %s", exc, extra=ids(conversation, effect))
        await answer.discard()
        return _failed(effect, exc.public, retryable=exc.retryable, error=exc), None
    except ValueError as exc:  # a model string that cannot be used
        log.error("step run cannot start: %s", exc, extra=ids(conversation, effect))
        await answer.discard()
        return _failed(effect, "its model is not configured correctly (an admin can fix it)"), None
    if isinstance(result, StepQuestion):
        await answer.discard()
        blocked = StepBlocked(
            index=effect.step, attempt=effect.attempt, question=result.question, form=result.form
        )
        return blocked, None
    current, produced = await after.seen(ctx)
    if not current:
        stale = _failed(effect, "the plan stopped while it ran")  # changes nothing
        if redelivered and await _answered(ctx, conversation, key, spec.name):
            # finished in Slack before the process stopped: kept, its stored text made final
            return stale, answer.finished_before(result.message)
        await answer.discard()
        return stale, None
    ts: str | None = None
    try:
        # the files it wrote go into the thread first (each once), then its answer
        shared = await share_produced(ctx, conversation, job.run_key, agent, produced)
        if redelivered and await ctx.port.thread_has_key(conversation, key, agent=spec.name):
            # answered before the process stopped: its stored text may not be final yet
            final = answer.finished_before(result.message)
        else:
            finished = await answer.finish(result.message)
            ts, final = finished.ts, finished.final
    except TransientError:
        raise  # the job is handed over: the stored run answers again, at no cost
    except PermanentError as exc:
        return _failed(effect, f"its answer could not be posted: {exc.public}"), None
    succeeded = StepSucceeded(
        index=effect.step,
        attempt=effect.attempt,
        summary=result.summary,
        files=[f.name for f in shared],
        message_ts=ts,
    )
    return succeeded, final


async def _answered(ctx: Context, conversation: ConversationRecord, key: str, agent: str) -> bool:
    """Whether the thread has the answer carrying `key` (False when Slack refuses to say)."""
    try:
        return await ctx.port.thread_has_key(conversation, key, agent=agent)
    except PermanentError:
        return False


async def report(
    ctx: Context,
    conversation_id: int,
    outcome: Outcome,
    final: FinalText | None = None,
    settling: Settling | None = None,
) -> None:
    """Hand an outcome to the reconciler (idempotent: a repeated outcome changes nothing);
    `final`: its answer's final text, stored with it (`agents/reconciling/final_texts.py`);
    `settling`: the attempt's settle, carried by the report (`agents/running/job_settling.py`)."""
    ctx.observer.outcome(type(outcome).__name__.removeprefix("Step").lower())
    assignees = await ctx.enabled_names()
    release = await settling.to_report() if settling is not None else None
    writes = AttemptWrites(final=final, release=release)
    reported = await ctx.reconciler.report(
        conversation_id, outcomes=[outcome], assignees=assignees, writes=writes
    )
    if reported.decision is None:  # no plan: nothing was written with it
        await store_final_text(ctx.db, final)
    elif settling is not None:
        settling.reported(reported.others_wait)


async def fail_given_up(ctx: Context, effect: Effect, reason: str) -> None:
    """An effect of a step was given up (Slack refused the post, or kept failing): the
    step fails with a sentence and its `on_failure` applies."""
    if not isinstance(effect, STEP_KINDS):
        return
    failed = StepFailed(
        index=effect.step,
        attempt=effect.attempt,
        reason=f"I could not post in this thread: {reason}",
        retryable=False,
    )
    await report(ctx, effect.conversation_id, failed)
