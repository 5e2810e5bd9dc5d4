"""A step run or a commander turn asks the scheduler for a slot: who, for whom, how urgent.

The request carries its tenant (workspace and channel), its agent and the tools it may
call (for quotas), its priority (an admin's mark, a person waiting, a long plan) and an
estimate of its tokens (the agent's recent runs) for the budgets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from sqlalchemy.ext.asyncio import AsyncConnection

from agents import step_runs
from agents.admission_policy import marks_of, priority_of
from agents.effects import (
    AskCommander,
    MessageForCommander,
    PlanStalled,
    PostDispatch,
    ResumeStep,
    RunCommanderStep,
    step_key,
    to_row,
)
from agents.plan import COMMANDER, Plan, StepFailed
from storage.outbox import finish_effect
from storage.records import ConversationRecord, RunRequestRecord
from storage.run_requests import finish_request
from storage.runs import release_run, typical_run_tokens
from storage.workspaces import workspace_settings

if TYPE_CHECKING:
    from agents.admission import AdmissionLoop
    from agents.run_context import Context

SCHEDULED = (
    PostDispatch,
    RunCommanderStep,
    ResumeStep,
    AskCommander,
    MessageForCommander,
    PlanStalled,
)
Scheduled = (
    PostDispatch | RunCommanderStep | ResumeStep | AskCommander | MessageForCommander | PlanStalled
)


def lease_key_of(effect: Scheduled) -> str:
    """The run's lease key – the request's key (as `JobRunner.hold` leases it)."""
    if isinstance(effect, PostDispatch | RunCommanderStep):
        return effect.key
    if isinstance(effect, ResumeStep):
        return step_key(effect.plan_id, effect.step, effect.attempt)
    return f"turn:{effect.key}"


async def request_slot(
    ctx: Context,
    admission: AdmissionLoop,
    effect: Scheduled,
    conversation: ConversationRecord,
    plan: Plan | None = None,
) -> str:
    """Enqueue the effect's run (idempotent); the request's state. `plan`: the effect's
    plan if the caller has just read it (else it is read here)."""
    agent = effect.agent if isinstance(effect, PostDispatch | ResumeStep) else COMMANDER
    plan_id = getattr(effect, "plan_id", None)
    tools: list[str] = []
    record = await ctx.agents.agent(agent) if agent != COMMANDER else None
    if record is not None:
        tools = [*record.tools, *(_server(s) for s in record.mcp_servers)]
    plan_steps = 0
    if plan_id is not None:
        if plan is None or plan.id != plan_id:
            plan = await ctx.reconciler.plan(conversation.id)
        plan_steps = len(plan.steps) if plan is not None and plan.id == plan_id else 0

    async def read(conn: AsyncConnection) -> dict[str, Any]:
        """The request's priority and token estimate, read in its enqueue transaction."""
        settings = await workspace_settings(conn, conversation.team_id)
        estimate = await typical_run_tokens(conn, agent)
        priority = priority_of(
            effect.kind,
            channel_id=conversation.channel_id,
            plan_id=plan_id,
            plan_steps=plan_steps,
            marks=marks_of(settings),
            batch_steps=ctx.options.scheduler.batch_steps,
        )
        default = ctx.options.scheduler.default_estimate
        return {"priority": priority, "estimate_tokens": estimate or default}

    row = to_row(effect)
    return await admission.enqueue(
        read=read,
        run_key=lease_key_of(effect),
        effect_key=effect.key,
        effect_kind=effect.kind,
        effect=row["payload"],
        conversation_id=conversation.id,
        team_id=conversation.team_id,
        channel_id=conversation.channel_id,
        agent_name=agent,
        plan_id=plan_id,
        step_index=getattr(effect, "step", None),
        attempt=getattr(effect, "attempt", None),
        tools=tools,
    )


def _server(server: dict[str, object]) -> str:
    """An MCP server's quota key: `mcp:<host>`."""
    return f"mcp:{urlsplit(str(server.get('url', ''))).hostname or 'unknown'}"


async def let_go_unrun(ctx: Context, record: RunRequestRecord, owner: str) -> None:
    """A granted run not wanted any more: its request ends, its lease and row are freed."""
    now = ctx.clock()
    async with ctx.db.write() as conn:  # request, lease, row: as every job transaction
        await finish_request(conn, record.run_key, now)
        await release_run(conn, record.run_key, owner)
        await finish_effect(conn, record.effect_key, now)


async def fail_refused(ctx: Context, record: RunRequestRecord, reason: str) -> None:
    """The budget policy refused a step's run: the step fails with the reason."""
    if record.step_index is None or record.attempt is None or record.conversation_id is None:
        return
    failed = StepFailed(
        index=record.step_index,
        attempt=record.attempt,
        reason=f"it would exceed the {reason}",
        retryable=False,
    )
    await step_runs.report(ctx, record.conversation_id, failed)
