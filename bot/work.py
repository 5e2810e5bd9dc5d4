"""The long work, run as jobs with no lock held: agent steps, resumed steps, commander turns.

Each job ends by reporting an outcome (or commander operations) to the reconciler, which
records it under the conversation's lock and decides what comes next. A job holds the
outbox row of the effect that started it (renewing its lease) and settles it when done,
so a process that dies mid-run leaves the row to be claimed again by another process.
Runs are keyed by their step attempt, so a job started twice continues the same stored
session instead of paying for the work again, and a run lease keeps two processes from
running it at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from agents.commander import CommanderWake, commander_step_spec, commander_turn
from agents.errors import OperationRejected, PlanValidationError, RunError
from agents.plan import (
    COMMANDER,
    Outcome,
    StepBlocked,
    StepFailed,
    StepSucceeded,
)
from agents.ports import Effect
from agents.registry import AgentSpec, enabled_agents, spec_from_record
from agents.run_results import StepQuestion, StepRunResult
from agents.runtime import RunJob, resume_step, run_step
from bot.identities import Identity
from bot.listeners.payloads import result_metadata
from storage.records import ConversationRecord

if TYPE_CHECKING:
    from bot.service import Flotilla

log = logging.getLogger(__name__)
Work = Callable[[], Awaitable[None]]


def run_key(plan_id: int, step: int, attempt: int) -> str:
    return f"plan:{plan_id}:step:{step}:attempt:{attempt}"


def _job(service: Flotilla, conversation: ConversationRecord, payload: dict[str, Any]) -> RunJob:
    plan_id, step, attempt = int(payload["plan_id"]), int(payload["step"]), int(payload["attempt"])
    return RunJob(
        run_key=run_key(plan_id, step, attempt),
        team_id=service.team_id,
        input=str(payload.get("text", "")),
        request=conversation.request_text,
        channel_id=conversation.channel_id,
        conversation_id=conversation.id,
        plan_id=plan_id,
        step_index=step,
    )


# --- sub-agent steps ----------------------------------------------------------------------


def held(service: Flotilla, effect: Effect, lease_key: str, work: Work) -> None:
    """Run `work` as a job that holds `effect`'s outbox row until it is done.

    Finished: the row is settled. Stopped by a shutdown: the row is freed for any process.
    Failed by a bug: the row is retried in a minute. Another process holding the run's
    lease: nothing (that process settles the row).
    """

    async def job() -> None:
        async with service.run_lease(lease_key, effect_key=effect.key) as mine:
            if not mine:
                log.info("%s runs in another process", lease_key)
                return
            try:
                await work()
            except asyncio.CancelledError:
                await service.outbox.release(effect.key)
                raise
            except Exception:
                log.exception("%s failed; retrying it in a minute", lease_key)
                await service.outbox.hold(effect.key, seconds=60)
                return
            await service.outbox.finish(effect.key)

    service.jobs.start(effect.key, job)


def start_step(service: Flotilla, effect: Effect) -> None:
    """Run the dispatched step's agent in the background."""
    payload = dict(effect.payload)
    key = run_key(int(payload["plan_id"]), int(payload["step"]), int(payload["attempt"]))
    if effect.created_at is not None and effect.delivery == 1:  # queue time, not inference
        waited = (service.clock() - effect.created_at).total_seconds()
        service.metrics.queue_seconds.observe(max(0.0, waited))
    if payload.get("reason") == "step":
        service.metrics.dispatches.labels("commander").inc()
    redelivered = effect.delivery > 1  # the answer may be in the thread already
    held(
        service,
        effect,
        key,
        lambda: _run_step(service, effect.conversation_id, payload, None, recovering=redelivered),
    )


def start_resume(service: Flotilla, effect: Effect) -> None:
    """Resume a blocked step's run with the person's answer."""
    payload = dict(effect.payload)
    answer = payload.get("answer") or {}
    key = run_key(int(payload["plan_id"]), int(payload["step"]), int(payload["attempt"]))
    redelivered = effect.delivery > 1
    held(
        service,
        effect,
        key,
        lambda: _run_step(service, effect.conversation_id, payload, answer, recovering=redelivered),
    )


async def _run_step(
    service: Flotilla,
    conversation_id: int,
    payload: dict[str, Any],
    answer: dict[str, str] | None,
    *,
    recovering: bool = False,
) -> None:
    await _run_held(service, conversation_id, payload, answer, recovering=recovering)


async def _run_held(
    service: Flotilla,
    conversation_id: int,
    payload: dict[str, Any],
    answer: dict[str, str] | None,
    *,
    recovering: bool,
) -> None:
    conversation = await service.conversation(conversation_id)
    name = str(payload.get("agent") or COMMANDER)
    spec, identity = await _assignee(service, name)
    plan_id, step, attempt = int(payload["plan_id"]), int(payload["step"]), int(payload["attempt"])
    outcome: Outcome
    if spec is None:
        outcome = StepFailed(
            index=step,
            attempt=attempt,
            reason=f"the agent {name} is not available (removed or disabled)",
            retryable=False,
        )
    else:
        began = time.perf_counter()
        outcome = await _execute(
            service, conversation, payload, spec, identity, answer, recovering=recovering
        )
        service.metrics.run_seconds.labels(spec.name).observe(time.perf_counter() - began)
    await report(service, conversation_id, outcome)
    log.debug("step %s of plan %s attempt %s: %s", step, plan_id, attempt, type(outcome).__name__)


async def _assignee(service: Flotilla, name: str) -> tuple[AgentSpec | None, Identity | None]:
    if name == COMMANDER:
        return commander_step_spec(), None
    record = await service.agent(name)
    if record is None or not record.enabled:
        return None, None
    return spec_from_record(record), service.identity_of(record)


async def _execute(
    service: Flotilla,
    conversation: ConversationRecord,
    payload: dict[str, Any],
    spec: AgentSpec,
    identity: Identity | None,
    answer: dict[str, str] | None,
    *,
    recovering: bool = False,
) -> Outcome:
    job = _job(service, conversation, payload)
    step, attempt = int(payload["step"]), int(payload["attempt"])
    try:
        model = await service.model_for(spec.model)
        # the runtime builds the agent's own MCP toolsets from `spec` (passing them too
        # would register every MCP tool twice: pydantic-ai refuses duplicate tool names)
        if answer is None:
            result = await run_step(service.db, job, spec, model=model)
        else:
            result = await resume_step(service.db, job, spec, answer, model=model)
    except RunError as exc:
        return StepFailed(index=step, attempt=attempt, reason=str(exc), retryable=exc.retryable)
    except ValueError as exc:  # a model string that cannot be used
        return StepFailed(index=step, attempt=attempt, reason=str(exc), retryable=False)
    if isinstance(result, StepQuestion):
        return StepBlocked(index=step, attempt=attempt, question=result.question, form=result.form)
    ts = await _post_result(service, conversation, job, result, identity, recovering=recovering)
    return StepSucceeded(
        index=step, attempt=attempt, summary=result.summary, files=result.files, message_ts=ts
    )


async def _post_result(
    service: Flotilla,
    conversation: ConversationRecord,
    job: RunJob,
    result: StepRunResult,
    identity: Identity | None,
    *,
    recovering: bool,
) -> str | None:
    """Post the step's answer under the agent's identity; after a crash, only if not there."""
    key = f"{job.run_key}:result"
    if recovering and await service.thread_has_key(conversation, key):
        return None
    metadata = result_metadata(job.plan_id or 0, job.step_index or 0, _attempt(job), key)
    return await service.say(conversation, result.message, identity=identity, metadata=metadata)


def _attempt(job: RunJob) -> int:
    return int(job.run_key.rsplit(":", 1)[-1])


async def report(service: Flotilla, conversation_id: int, outcome: Outcome) -> None:
    """Hand an outcome to the reconciler (idempotent: a repeated outcome changes nothing)."""
    service.metrics.outcomes.labels(type(outcome).__name__).inc()
    await service.reconciler.reconcile(
        conversation_id, outcomes=[outcome], assignees=await service.enabled_names()
    )


# --- the commander --------------------------------------------------------------------------


def start_commander_wake(service: Flotilla, effect: Effect) -> bool:
    """The commander's own step, or a failed step to decide on: long work (True). The
    plan's end is a short note, posted at once (False)."""
    reason = effect.payload.get("reason")
    if reason == "step":
        start_step(service, effect)
    elif reason == "plan_finished":
        return False
    else:
        held(service, effect, f"commander:{effect.key}", lambda: _after_failure(service, effect))
    return True


def start_turn(service: Flotilla, effect: Effect) -> None:
    """A person's message for the commander: a new request, or an interjection in a plan."""
    payload = effect.payload
    held(
        service,
        effect,
        f"commander:{effect.key}",
        lambda: _turn(service, effect.conversation_id, str(payload["text"]),
                      str(payload["user"]), effect.key),
    )  # fmt: skip


async def _turn(service: Flotilla, conversation_id: int, text: str, user: str, key: str) -> None:
    plan = await service.reconciler.plan(conversation_id)
    wake = None
    if plan is not None and plan.status in ("running", "paused"):
        wake = CommanderWake(event=f"<@{user}> wrote: {text}", steps=plan.steps)
    await commander(service, conversation_id, text, key, wake=wake)


async def plan_finished(service: Flotilla, effect: Effect) -> None:
    """Close the thread of a plan that ended without a synthesis of the commander's."""
    plan = await service.reconciler.plan(effect.conversation_id)
    if plan is None:
        return
    conversation = await service.conversation(effect.conversation_id)
    if plan.status == "aborted":
        failed = [s for s in plan.steps if s.status == "failed"]
        why = f": step {failed[0].index} failed ({failed[0].failure_reason})" if failed else ""
        await service.say(conversation, f"The plan was stopped{why}. Nothing else will run.")
    elif plan.status == "completed" and plan.steps and plan.steps[-1].assignee != COMMANDER:
        await service.say(conversation, "✅ All steps are done.")


async def _after_failure(service: Flotilla, effect: Effect) -> None:
    payload = effect.payload
    plan = await service.reconciler.plan(effect.conversation_id)
    event = (
        f"Step {payload.get('step')} ({payload.get('assignee')}: {payload.get('title')}) "
        f"failed: {payload.get('failure_reason')}. Steps waiting for it: "
        f"{payload.get('waiting') or 'none'}."
    )
    wake = CommanderWake(
        event=event, steps=plan.steps if plan else (), failed_step=int(payload["step"])
    )
    await commander(service, effect.conversation_id, event, effect.key, wake=wake)


async def commander(
    service: Flotilla,
    conversation_id: int,
    text: str,
    turn_key: str,
    *,
    wake: CommanderWake | None = None,
) -> None:
    """One commander turn: answer, start a plan, or steer the running one."""
    conversation = await service.conversation(conversation_id)
    async with service.db.read() as conn:
        agents = await enabled_agents(conn, service.team_id)
    job = RunJob(
        run_key=f"commander:{turn_key}",
        team_id=service.team_id,
        input=text,
        request=conversation.request_text,
        channel_id=conversation.channel_id,
        conversation_id=conversation.id,
    )
    try:
        model = await service.model_for(None)
        turn = await commander_turn(service.db, job, agents, model=model, wake=wake)
    except RunError as exc:
        service.metrics.commander_turns.labels("error").inc()
        retry = " Please try again in a moment." if exc.retryable else ""
        await service.say(conversation, f"⚠️ {exc}{retry}")
        return
    except ValueError as exc:  # a configured model string that cannot be used
        await service.say(conversation, f"⚠️ I cannot reach my model: {exc}")
        return
    result = "plan" if turn.plan else "operations" if turn.operations else "reply"
    service.metrics.commander_turns.labels(result).inc()
    names = [a.name for a in agents]
    if turn.reply and turn.plan is not None:
        await service.say(conversation, turn.reply)  # says what the plan is, before its card
    try:
        if turn.plan is not None:
            await service.reconciler.start_plan(
                conversation.id,
                turn.plan,
                assignees=names,
                max_parallel=service.options.max_parallel,
                max_attempts=service.options.max_attempts,
            )
        if turn.operations:
            await service.reconciler.reconcile(
                conversation.id, operations=turn.operations, assignees=names
            )
    except (PlanValidationError, OperationRejected) as exc:
        await service.say(conversation, f"I could not change the plan: {exc}")
        return
    if turn.reply and turn.plan is None:
        await service.say(conversation, turn.reply)  # after the change it announces is made
