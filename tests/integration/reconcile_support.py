"""Helpers for the reconciler integration tests, and a worker run as a separate OS process.

`RecordingPort` is the network edge here: it records every effect performed (in memory,
and optionally appended to a file with fsync, so a killed process leaves its record and
a restarted one can see it – like messages already in a Slack thread).

Worker: `python -m tests.integration.reconcile_support MODE URL SCHEMA ARGS…`
- `race OUT CONV_IDS`: finish every in-progress step of the given conversations and
  reconcile them, until every plan has finished; write the keys of the dispatches this
  process committed to OUT (one per line).
- `commit-then-hang`: start a plan (committing its outbox rows), print "committed",
  then wait to be killed before delivering anything.
- `perform-then-hang LOG`: deliver due outbox rows through a file-backed port, but hang
  (to be killed) right after the first side effect, before it is marked sent.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select

from flotilla.agents.planning.effects import Effect, RetryDue
from flotilla.agents.planning.plan import PlanProposal, StepProposal, StepSucceeded
from flotilla.agents.reconciling.outbox import Claimed, OutboxSender
from flotilla.agents.reconciling.reconciler import Reconciler
from flotilla.storage.conversations import open_conversation
from flotilla.storage.db import Database
from flotilla.storage.outbox import outbox_t
from tests.fakes.clock import FakeClock

AGENTS = ("researcher", "writer")
T0 = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


class RecordingPort:
    """Records performed effects; `already_performed` answers from the record."""

    def __init__(
        self,
        path: Path | None = None,
        on_retry_due: Callable[[int], Awaitable[object]] | None = None,
    ) -> None:
        self.path = path
        self.on_retry_due = on_retry_due
        self.performed: list[Effect] = []
        self.checked: list[str] = []
        self.hang_after_perform: asyncio.Event | None = None

    def keys(self) -> list[str]:
        if self.path is None:
            return [e.key for e in self.performed]
        if not self.path.exists():
            return []
        return [json.loads(line)["key"] for line in self.path.read_text().splitlines() if line]

    async def perform(self, effect: Effect) -> None:
        self.performed.append(effect)
        if self.path is not None:
            with self.path.open("a") as f:
                f.write(json.dumps({"key": effect.key, "kind": effect.kind}) + "\n")
                f.flush()
                os.fsync(f.fileno())
        if self.hang_after_perform is not None:
            print("performed", flush=True)
            await self.hang_after_perform.wait()  # until killed

    async def already_performed(self, effect: Effect) -> bool:
        self.checked.append(effect.key)
        return effect.key in self.keys()

    async def __call__(self, claimed: Claimed) -> bool:
        """The outbox's performer: a redelivered effect is checked first (as the executor
        checks the thread), timers reconcile."""
        effect = claimed.effect
        if isinstance(effect, RetryDue):
            if self.on_retry_due is not None:
                await self.on_retry_due(effect.conversation_id)
            return False
        if claimed.delivery > 1 and await self.already_performed(effect):
            return False
        await self.perform(effect)
        return False


def proposal(*specs: dict[str, Any]) -> PlanProposal:
    steps = [
        StepProposal.model_validate({"index": i, "title": f"s{i}", "assignee": "researcher"} | s)
        for i, s in enumerate(specs, start=1)
    ]
    return PlanProposal(steps=steps)


def chain(n: int) -> PlanProposal:
    return proposal(*({} for _ in range(n)))


def diamond() -> PlanProposal:
    return proposal({}, {"wait_for": [1]}, {"wait_for": [1]}, {"wait_for": [2, 3]})


async def new_conversation(db: Database, thread: str, text: str = "the request") -> int:
    async with db.write() as conn:
        found = await open_conversation(
            conn,
            team_id="T1",
            channel_id="C1",
            thread_ts=thread,
            requested_by="U1",
            request_text=text,
            now=T0,
        )
    return found.id


async def outbox_keys(db: Database, kind: str | None = None) -> list[str]:
    stmt = select(outbox_t.c.idempotency_key).order_by(outbox_t.c.id)
    if kind is not None:
        stmt = stmt.where(outbox_t.c.kind == kind)
    async with db.read() as conn:
        return list((await conn.execute(stmt)).scalars())


async def finish_running(
    reconciler: Reconciler, conversation_id: int, source: str = "event"
) -> list[str]:
    """Report every in-progress step of the conversation as done; keys dispatched.

    `source` names who reports it: the same result reported by two sources (the message
    event, and the process that ran the step) is two events with one outcome.
    """
    plan = await reconciler.plan(conversation_id)
    if plan is None:
        return []
    outcomes = [
        StepSucceeded(index=s.index, attempt=s.attempts, summary=f"done {s.index}")
        for s in plan.steps
        if s.status == "in_progress"
    ]
    if not outcomes:
        return []
    key = f"{source}:done:" + ",".join(f"{plan.id}.{o.index}.{o.attempt}" for o in outcomes)
    decision = await reconciler.reconcile(conversation_id, event_key=key, outcomes=outcomes)
    assert decision is not None
    return [e.key for e in decision.effects if e.kind == "post_dispatch"]


def database(url: str, schema: str) -> Database:
    if schema:
        return Database(url, connect_args={"server_settings": {"search_path": schema}})
    return Database(url)


async def _race(db: Database, out: Path, conversation_ids: list[int]) -> None:
    source = f"process-{os.getpid()}"
    reconciler = Reconciler(db)
    dispatched: list[str] = []
    while True:
        plans = [await reconciler.plan(c) for c in conversation_ids]
        if all(p is not None and p.status == "completed" for p in plans):
            break
        results = await asyncio.gather(
            *(finish_running(reconciler, c, source) for c in conversation_ids)
        )
        for keys in results:
            dispatched.extend(keys)
    out.write_text("".join(f"{k}\n" for k in dispatched))


async def _main(argv: list[str]) -> None:
    mode, url, schema, *rest = argv
    db = database(url, schema)
    try:
        if mode == "race":
            await _race(db, Path(rest[0]), [int(c) for c in rest[1].split(",")])
        elif mode == "commit-then-hang":
            conversation_id = await new_conversation(db, "crash.1")
            await Reconciler(db, clock=FakeClock(T0)).start_plan(
                conversation_id, chain(3), assignees=AGENTS
            )
            print("committed", flush=True)
            await asyncio.Event().wait()  # until killed: no side effect performed
        elif mode == "perform-then-hang":
            port = RecordingPort(Path(rest[0]))
            port.hang_after_perform = asyncio.Event()
            await OutboxSender(db, port, clock=FakeClock(T0 + timedelta(hours=1))).deliver_due()
    finally:
        await db.dispose()


if __name__ == "__main__":
    asyncio.run(_main(sys.argv[1:]))
