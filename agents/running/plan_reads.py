"""Reading a plan for an effect about to be performed: as stored now, or as this process
committed it last (SQLite), and whether an effect's step attempt is still in flight."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy.engine import Connection

from flotilla.agents.planning.effects import (
    AskUser,
    PostDispatch,
    ResumeStep,
    RunCommanderStep,
    ShowForm,
)
from flotilla.agents.planning.plan import TERMINAL_PLAN, Plan
from flotilla.agents.planning.plan_store import plan_from_rows
from flotilla.storage.db import Also
from flotilla.storage.plans import LoadedPlan, load_plan
from flotilla.storage.run_requests import wait_reasons

if TYPE_CHECKING:
    from flotilla.agents.running.run_context import Context

RunnableStep = PostDispatch | RunCommanderStep | ResumeStep


async def load(
    ctx: Context, conversation_id: int, plan_id: int, *, with_waits: bool = False
) -> Plan | None:
    """A plan as stored now, read under its conversation's lock (so a change being
    committed is seen whole); `with_waits`: with why its steps wait for a slot (for the
    card, which shows it for a step in progress only), read in the same transaction.
    On SQLite the plan this process committed last is taken unread (`remembered`), unless
    a reason why a run waits may be stored for it (`Context.waits`)."""

    known = remembered(ctx, conversation_id, plan_id)
    if known is not None and not (
        with_waits and ctx.waits.may_wait(plan_id) and any_in_progress(known)
    ):
        return known

    def work(conn: Connection) -> tuple[LoadedPlan | None, dict[int, str]]:
        loaded = load_plan(conn, plan_id)
        waiting = with_waits and loaded is not None and _in_progress(loaded.steps)
        return loaded, (wait_reasons(conn, plan_id) if waiting else {})

    loaded, waits = await ctx.reconciler.locks.run(ctx.db, conversation_id, work)
    if loaded is None:
        return None
    plan = plan_from_rows(loaded.plan, loaded.steps or [])
    return plan.model_copy(update={"waits": waits}) if waits else plan


def remembered(ctx: Context, conversation_id: int, plan_id: int) -> Plan | None:
    """The plan as this process's reconciler last committed it (no read), on SQLite only:
    there one process serves the database and every plan write goes through its
    reconciler, so no other writer can have changed it since. None: read it."""
    if not ctx.db.writes_one_at_a_time:
        return None
    plan = ctx.reconciler.remembered(conversation_id)
    return plan if plan is not None and plan.id == plan_id else None


def any_in_progress(plan: Plan) -> bool:
    return any(step.status == "in_progress" for step in plan.steps)


def _in_progress(steps: list[dict[str, Any]] | None) -> bool:
    """Whether a step of these rows is in progress (only such a step waits for a slot)."""
    return any(step["status"] == "in_progress" for step in steps or ())


async def still_current(ctx: Context, effect: RunnableStep | ShowForm | AskUser) -> bool:
    """Whether the effect's step attempt is still in flight in a plan at work."""
    return await current_plan(ctx, effect) is not None


async def current_plan(
    ctx: Context, effect: RunnableStep | ShowForm | AskUser, also: Also | None = None
) -> Plan | None:
    """The stored plan, if the effect's step attempt is still in flight in it; `also`:
    more reads of the caller's in the same read transaction."""
    plan = await ctx.reconciler.plan(effect.conversation_id, also)
    return plan if is_current(plan, effect) else None


def is_current(plan: Plan | None, effect: RunnableStep | ShowForm | AskUser) -> bool:
    """Whether the effect's step attempt is in flight in `plan` (the conversation's newest)."""
    if plan is None or plan.id != effect.plan_id or plan.status in TERMINAL_PLAN:
        return False
    step = plan.step(effect.step)
    return (
        step is not None
        and step.attempts == effect.attempt
        and step.status in ("in_progress", "blocked")
    )
