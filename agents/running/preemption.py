"""Urgent work: the first lower-priority run to reach a model-turn boundary yields its slot.

A scheduled run's job makes its `TurnBoundary` (`turn_boundary`) and hands it to the run
with its `Attempt` (the run's session keeps it: `RunSession.yields`). Whenever the run
stores its history (`RunSession.save`), the statement that stores it also returns whether
an urgent run waits only for a slot this run may give (`TurnBoundary.asked`, a subquery;
`TurnBoundary.wants` asks it in a statement of its own). At a
model-turn boundary – everything paid for is stored, the next model request not sent yet – a
run that saw one gives way: in one transaction its slot is handed straight to that urgent
run and it waits again in its place (`TurnBoundary.give_way`). The hand-over is conditional
on the waiter still waiting, so of several runs reaching a boundary together exactly one
yields and the others go on; a run pauses only when a waiter received its slot. Once that
committed, `check_pause` raises `Preempted` and the job starts the urgent run in the freed
slot; the paused run resumes later from its stored history, re-paying nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement
from sqlalchemy.ext.asyncio import AsyncConnection

from flotilla.agents.running.run_context import Context, Job
from flotilla.agents.scheduling.admission import PARK
from flotilla.agents.scheduling.scheduler import PREEMPTIBLE_FROM, URGENT
from flotilla.storage.outbox import hold_effect
from flotilla.storage.run_request_leases import give_way, urgent_waits, urgent_waits_asked
from flotilla.storage.run_requests import get_request


@dataclass(slots=True)
class TurnBoundary:
    """How one scheduled run yields at a model-turn boundary (set up by its job)."""

    # one statement in a turn's transaction: does an urgent run wait for this run's slot?
    wants: Callable[[AsyncConnection], Awaitable[bool]]
    # the same question as a scalar subquery, returned by the statement storing the turn
    asked: ColumnElement[Any]
    # the hand-over in a transaction: True when a waiter received the slot (then it pauses)
    give_way: Callable[[AsyncConnection], Awaitable[bool]]
    paused: asyncio.Event  # set once the hand-over committed: stop at this boundary
    wanted: bool = False  # the last stored turn saw an urgent run waiting
    handed: bool = False  # handed over in the transaction now open (paused at its commit)


class Preempted(asyncio.CancelledError):
    """The run paused at a model-turn boundary for urgent work (its history is stored).

    A `CancelledError`, so no `except Exception` on the way treats it as a failure."""


def question(turn: TurnBoundary | None) -> ColumnElement[Any] | None:
    """What the statement storing a run's turn asks too (None: nothing to ask): whether an
    urgent run waits for this run's slot – its answer goes to `at_stored_turn(wanted=…)`."""
    return None if turn is None or turn.paused.is_set() else turn.asked


async def at_stored_turn(
    turn: TurnBoundary | None,
    conn: AsyncConnection,
    *,
    boundary: bool,
    wanted: bool | None = None,
) -> None:
    """In the transaction that stores a run's history: whether an urgent run waits (`wanted`,
    answered by the storing statement; read here when None), and at a model-turn boundary
    (`boundary`) give way in this same transaction."""
    if turn is None or turn.paused.is_set():
        return
    turn.wanted = await turn.wants(conn) if wanted is None else wanted
    if boundary and turn.wanted:
        turn.wanted = False
        turn.handed = await turn.give_way(conn)


def committed(turn: TurnBoundary | None) -> None:
    """The stored turn's transaction committed: a hand-over in it now pauses the run."""
    if turn is not None and turn.handed:
        turn.handed = False
        turn.paused.set()


def wants_to_give_way(turn: TurnBoundary | None) -> bool:
    """At a boundary with nothing new to store: whether the last stored turn (e.g. a tool's
    return, a moment ago) saw an urgent run waiting – then the hand-over is tried in a
    transaction of its own (`at_stored_turn(conn, boundary=True)`)."""
    return turn is not None and turn.wanted and not turn.paused.is_set()


def check_pause(turn: TurnBoundary | None) -> None:
    """Raise `Preempted` when this run gave its slot away (call at a turn boundary)."""
    if turn is not None and turn.paused.is_set():
        raise Preempted("paused for urgent work")


def turn_boundary(ctx: Context, job: Job, owner: str) -> TurnBoundary | None:
    """How a scheduled job's run yields its slot to urgent work (None: preemption is off).
    The hand-over also parks the run's outbox row (it waits in its place again) and holds
    the urgent run's row for its lease; the job starts that run (`job.passed`)."""
    if not ctx.options.scheduler.preempt or job.run_key is None:
        return None
    run_key = job.run_key

    async def wants(conn: AsyncConnection) -> bool:
        return await urgent_waits(
            conn, run_key, priority_at_most=URGENT, yields_from=PREEMPTIBLE_FROM
        )

    async def give(conn: AsyncConnection) -> bool:
        now = ctx.clock()
        until = now + ctx.options.lease
        key = await give_way(conn, run_key, owner, now=now, until=until, priority_at_most=URGENT)
        if key is None:
            return False  # another run gave way first, or nobody waits now: go on
        ctx.waits.add(job.plan_id)  # it waits again, "paused for urgent work"
        await hold_effect(conn, job.key, now + PARK)
        job.passed = await get_request(conn, key)
        if job.passed is not None:
            await hold_effect(conn, job.passed.effect_key, until)
        return True

    asked = urgent_waits_asked(run_key, priority_at_most=URGENT, yields_from=PREEMPTIBLE_FROM)
    return TurnBoundary(wants, asked, give, job.pause)
