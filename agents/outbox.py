"""Delivers outbox rows through the port after their transaction committed.

A row is claimed (leased) in one short transaction, performed with no lock held, then
marked sent. A crash between commit and the side effect leaves the row pending: after
the lease expires another sender (or this one, restarted) claims it again. A row claimed
before (`attempts > 1`) may have been performed already – the crash may have come after
the post and before "sent" – so the port is asked first (`already_performed`, e.g. a
message with this key in its metadata is in the thread). That makes delivery exactly
once as seen in the thread, across restarts and replicas.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta

from agents.errors import RunError
from agents.ports import Delivery, Effect, SideEffectPort
from agents.reconciler import Clock, plan_from_rows, utcnow
from storage import plans as store
from storage.db import Database
from storage.locks import ConversationLocks
from storage.outbox import (
    claim_effects,
    finish_effect,
    give_up_effect,
    hold_effect,
    mark_effect_done,
    retry_effect_later,
)
from storage.records import OutboxRecord

log = logging.getLogger(__name__)

OnRetryDue = Callable[[int], Awaitable[object]]


class OutboxSender:
    """Claims due outbox rows and performs them through `port`.

    `on_retry_due(conversation_id)` handles the `retry_due` timers (usually
    `Reconciler.reconcile`); without it they are just marked sent.
    """

    def __init__(
        self,
        db: Database,
        port: SideEffectPort,
        *,
        clock: Clock = utcnow,
        lease: timedelta = timedelta(minutes=2),
        max_attempts: int = 8,
        batch: int = 20,
        on_retry_due: OnRetryDue | None = None,
        locks: ConversationLocks | None = None,
    ) -> None:
        self.db = db
        self.port = port
        self.clock = clock
        self.lease = lease
        self.max_attempts = max_attempts
        self.batch = batch
        self.on_retry_due = on_retry_due
        self.locks = locks or ConversationLocks()

    async def deliver_due(self) -> int:
        """Claim one batch of due rows and deliver them; how many were claimed."""
        now = self.clock()
        async with self.db.write() as conn:
            records = await claim_effects(
                conn, now=now, lease_until=now + self.lease, limit=self.batch
            )
        for record in records:
            await self._deliver(record)
        return len(records)

    async def drain(self) -> int:
        """Deliver until nothing is due; how many rows were claimed in all."""
        total = 0
        while claimed := await self.deliver_due():
            total += claimed
        return total

    async def _deliver(self, record: OutboxRecord) -> None:
        effect = await self._effect(record)
        try:
            if effect.kind == "retry_due":
                if self.on_retry_due is not None:
                    await self.on_retry_due(effect.conversation_id)
            elif record.attempts > 1 and await self.port.already_performed(effect):
                log.info("outbox %s was already performed; not repeating it", effect.key)
            elif await self.port.perform(effect) is Delivery.IN_PROGRESS:
                return  # the work it started holds the row and settles it
        except Exception as exc:  # the port is the network edge: any failure is retried
            await self._failed(record, exc)
            return
        async with self.db.write() as conn:
            await mark_effect_done(conn, record.id, self.clock())

    async def hold(self, key: str, *, seconds: float | None = None) -> None:
        """Keep a row claimed by long work for another lease (its heartbeat), or for
        `seconds` (a retry later)."""
        wait = self.lease if seconds is None else timedelta(seconds=seconds)
        async with self.db.write() as conn:
            await hold_effect(conn, key, self.clock() + wait)

    async def finish(self, key: str) -> None:
        """Long work settled its effect: the row is done."""
        async with self.db.write() as conn:
            await finish_effect(conn, key, self.clock())

    async def release(self, key: str) -> None:
        """Long work stopped before settling (a shutdown): any process may take it now."""
        async with self.db.write() as conn:
            await hold_effect(conn, key, self.clock())

    async def _effect(self, record: OutboxRecord) -> Effect:
        plan = None
        if record.kind == store.CARD_KIND:
            # The card shows the plan as it is now, which covers every coalesced change.
            # Read under the conversation's lock: a reconcile that saw this row still
            # waiting (and so added none) has then committed what it changed.
            plan_id = int(record.payload["plan_id"])
            loaded = await self.locks.run(
                self.db, record.conversation_id or 0, lambda conn: store.load_plan(conn, plan_id)
            )
            if loaded is not None:
                plan = plan_from_rows(loaded.plan, loaded.steps or [])
        return Effect(
            key=record.idempotency_key,
            kind=record.kind,  # type: ignore[arg-type]
            conversation_id=record.conversation_id or 0,
            payload=record.payload,
            plan=plan,
            created_at=record.created_at,
            delivery=record.attempts,
        )

    async def _failed(self, record: OutboxRecord, exc: Exception) -> None:
        retryable = not isinstance(exc, RunError) or exc.retryable
        now = self.clock()
        async with self.db.write() as conn:
            if retryable and record.attempts < self.max_attempts:
                await retry_effect_later(
                    conn, record.id, error=str(exc), available_at=now + _backoff(record.attempts)
                )
            else:
                log.warning("outbox %s failed for good: %s", record.idempotency_key, exc)
                await give_up_effect(conn, record.id, error=str(exc))


def _backoff(attempts: int) -> timedelta:
    return min(timedelta(seconds=2 ** min(attempts, 10)), timedelta(minutes=5))
