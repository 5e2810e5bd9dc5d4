"""Delivers outbox rows after their transaction committed, as typed effects.

A row is claimed (leased) in one short transaction, performed with no lock held, then
marked sent – batched: the rows delivered since the last claim are marked in the same
transaction that claims the next batch, one worker-thread hop in all (`flush` marks them
when no further claim follows). A crash between commit and the side effect leaves the row
pending: after the lease expires another sender (or this one, restarted) claims it again.
A row claimed before (`attempts > 1`) may have been performed already – the crash may have
come after the post and before "sent" – so the performer checks first (e.g. a message with this key
in its metadata is in the thread). That makes delivery exactly once as seen in the thread,
across restarts and replicas.

Only failed deliveries count towards giving a row up (`failures`); a re-claim after a
crash does not. When a row is given up, `on_give_up` is told (the executor fails the step
the effect belonged to, so no step waits for ever on an effect that will never happen).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from pydantic import ValidationError

from flotilla.agents.core.clock import Clock
from flotilla.agents.core.errors import RunError
from flotilla.agents.core.failures import is_storage_error
from flotilla.agents.core.lru import LRUCache
from flotilla.agents.core.retry_policy import DELIVERY, RetryPolicy, retry_after
from flotilla.agents.planning.effects import Effect, UpdatePlanCard, from_row
from flotilla.storage.db import Database
from flotilla.storage.locks import run_transaction
from flotilla.storage.outbox import (
    extend_claim,
    give_up_effect,
    hold_effect,
    retry_effect_later,
    settle_and_claim,
)
from flotilla.storage.records import OutboxRecord

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Claimed:
    """An effect claimed for delivery, with what the performer needs to know about it."""

    effect: Effect
    delivery: int  # 1: first delivery; 2+: claimed before, may have happened already
    created_at: datetime | None  # when it was decided (queue-time metrics)
    # handed over by this process's reconcile as it committed (`hand_over`), not claimed
    handed: bool = False
    until: datetime | None = None  # its row is claimed for this sender until then (or later)


# The performer: True when it started long work that settles the row itself.
Perform = Callable[[Claimed], Awaitable[bool]]
GiveUp = Callable[[Effect, str], Awaitable[None]]


class OutboxSender:
    """Claims due outbox rows and hands them to `perform` as typed effects."""

    def __init__(
        self,
        db: Database,
        perform: Perform,
        *,
        clock: Clock,
        lease: timedelta = timedelta(seconds=30),
        retry: RetryPolicy = DELIVERY,
        batch: int = 20,
        on_give_up: GiveUp | None = None,
    ) -> None:
        self.db = db
        self.perform = perform
        self.clock = clock
        self.lease = lease
        self.retry = retry  # a delivery that failed: when it is tried again, how often
        self.batch = batch
        self.on_give_up = on_give_up
        self._sent: list[int] = []  # delivered, not yet marked sent (see `flush`)
        # rows this sender performed lately: never performed by it again, only marked – a
        # claim may take one whose mark was still in another transaction (a reconcile's)
        self._done: LRUCache[int, bool] = LRUCache(4096)
        # rows a reconcile claimed for this sender in its own transaction (`hand_over`),
        # with the end of that claim
        self._handed: list[tuple[OutboxRecord, Effect, datetime]] = []
        self.exhausted = False  # the last claim found fewer rows than a batch
        self.on_handed: Callable[[], None] | None = None  # told when rows are handed over

    def take_sent(self) -> list[int]:
        """The rows delivered since the last transaction, for a transaction that marks
        them sent (the reconcile's, `agents/reconciling/reconcile_units.py`); `restore_sent` puts
        them
        back when it did not commit."""
        sent, self._sent = self._sent, []
        return sent

    def restore_sent(self, sent: list[int]) -> None:
        self._sent = sent + self._sent

    def delivered(self, row_id: int) -> None:
        """A row performed outside the sender (a form's answer shown through its click's
        response_url): marked sent with the sender's next transaction, as its own
        deliveries are. Until then it stays pending – after a crash it is performed
        again, so only idempotent rows may be."""
        self._done.put(row_id, True)
        self._sent.append(row_id)

    def performed(self, row_id: int) -> bool:
        """Whether this sender performed the row lately – done, even while it is stored as
        pending still (its mark sent with a later transaction, see `delivered`)."""
        return self._done.get(row_id) is not None

    def hand_over(
        self, claimed: list[OutboxRecord], effects: list[Effect], lease_until: datetime
    ) -> None:
        """Rows a committed transaction inserted already claimed for this sender until
        `lease_until`, with the effects they hold: delivered by the next `deliver_due`,
        before it claims."""
        by_key = {e.key: e for e in effects}
        self._handed.extend((r, by_key[r.idempotency_key], lease_until) for r in claimed)
        if claimed and self.on_handed is not None:
            self.on_handed()

    @property
    def handed(self) -> int:
        """Rows handed over and not delivered yet."""
        return len(self._handed)

    async def release_handed(self) -> None:
        """A stopping process lets go of the rows handed to it and not delivered: due at
        once for any sender (a crash leaves them to the lease instead)."""
        handed, self._handed = self._handed, []
        if not handed:
            return
        now = self.clock()
        async with self.db.write() as conn:
            for record, _effect, _until in handed:
                await hold_effect(conn, record.idempotency_key, now)

    async def deliver_due(self) -> int:
        """Deliver the rows handed over, then mark what was delivered, claim one batch of
        due rows and deliver them; how many were delivered (`exhausted`: no more are due
        beyond this batch)."""
        handed = await self.deliver_handed()
        now = self.clock()
        sent, self._sent = self._sent, []
        try:
            records = await run_transaction(
                self.db,
                lambda conn: settle_and_claim(
                    conn, sent=sent, now=now, lease_until=now + self.lease, limit=self.batch
                ),
            )
        except BaseException:
            self._sent = sent + self._sent  # marked with the next claim, or redelivered
            raise
        self.exhausted = len(records) < self.batch
        for record in records:
            await self._deliver(record, until=now + self.lease)
        return handed + len(records)

    async def deliver_handed(self) -> int:
        """Deliver the rows handed over (no transaction: they were claimed when they were
        decided); how many. Plan-card refreshes coalesce: of a plan's refreshes waiting
        here only the last is performed (it renders the plan as it is now), the others
        are marked sent with it – as the outbox keeps one unclaimed refresh per plan."""
        handed, self._handed = self._handed, []
        last_card: dict[int, int] = {}
        for i, (_record, effect, _until) in enumerate(handed):
            if isinstance(effect, UpdatePlanCard):
                last_card[effect.plan_id] = i
        for i, (record, effect, until) in enumerate(handed):
            if isinstance(effect, UpdatePlanCard) and last_card[effect.plan_id] != i:
                self._sent.append(record.id)  # covered by the plan's later refresh
                continue
            await self._deliver(record, effect, until=until, handed=True)
        return len(handed)

    async def drain(self, *, until_empty: bool = True) -> int:
        """Deliver until nothing is due; how many rows were delivered in all. The rows
        delivered last are marked sent by the next transaction (`flush` for none).

        `until_empty`: claim until a claim finds nothing (a delivery may have made more
        rows due, e.g. a timer's reconcile); False: stop once a claim found less than a
        batch and nothing was handed over meanwhile – one claim fewer, as the executor's
        loop does (it looks again when woken, or when the next row comes due)."""
        total = 0
        while delivered := await self.deliver_due():
            total += delivered
            if not until_empty and self.exhausted and not self.handed:
                break
        return total

    async def flush(self) -> None:
        """Mark the rows delivered since the last claim sent, without claiming more."""
        if not self._sent:
            return
        sent, self._sent = self._sent, []
        now = self.clock()
        try:
            await run_transaction(
                self.db,
                lambda conn: settle_and_claim(conn, sent=sent, now=now, lease_until=now, limit=0),
            )
        except BaseException:
            self._sent = sent + self._sent
            raise

    async def _deliver(
        self,
        record: OutboxRecord,
        effect: Effect | None = None,
        *,
        until: datetime,
        handed: bool = False,
    ) -> None:
        """Perform one row claimed for this sender until `until`. A claim that ran out
        before its turn came (the deliveries before it took longer than the lease) is
        not performed: the row is due for any sender again, and the claim that takes it
        (this sender's next, or another replica's) counts a redelivery, which checks the
        thread first – performing it here as well would post it twice."""
        if self.clock() >= until:
            log.debug("outbox %s: its claim ran out before delivery", record.idempotency_key)
            return
        if self.performed(record.id):  # claimed before its mark landed: marked, not redone
            self._sent.append(record.id)
            return
        try:
            if effect is None:
                effect = from_row(
                    record.idempotency_key, record.kind, record.conversation_id or 0, record.payload
                )
        except ValidationError as exc:  # a row no performer can read: never retried
            log.error("outbox %s is malformed; giving it up: %s", record.idempotency_key, exc)
            async with self.db.write() as conn:
                await give_up_effect(conn, record.id, error=f"malformed: {exc}")
            return
        claimed = Claimed(effect, record.attempts, record.created_at, handed, until)
        # the renewals start only when the delivery outlasts half its claim: a timer, not a
        # task per delivery (a delivery within half a lease costs no task, no loop pass)
        loop = asyncio.get_running_loop()
        keeper: list[asyncio.Task[None]] = []
        wait = max(0.0, (until - self.clock()).total_seconds() - self.lease.total_seconds() / 2)
        timer = loop.call_later(
            wait, lambda: keeper.append(loop.create_task(self._keep_claimed(record)))
        )
        try:
            if await self.perform(claimed):
                return  # the work it started holds the row and settles it
        except Exception as exc:  # the performer is the network edge: any failure is retried
            await self._failed(record, effect, exc)
            return
        finally:
            timer.cancel()
            for task in keeper:
                task.cancel()
        self._done.put(record.id, True)
        self._sent.append(record.id)

    async def _keep_claimed(self, record: OutboxRecord) -> None:
        """While a delivery lasts (a post waiting its turn in a busy channel), renew its
        claim before it runs out: another replica must not claim the row and, not finding
        the post yet, post it as well. Started half a lease before the claim runs out
        (`_deliver`'s timer), it renews at once and every half lease after. The renewal
        holds only while nobody claimed the row since (its `attempts` unchanged); a
        delivery within half a lease costs nothing."""
        half = self.lease.total_seconds() / 2
        while True:
            try:
                async with self.db.write() as conn:
                    kept = await extend_claim(
                        conn, record.id, record.attempts, self.clock() + self.lease
                    )
            except Exception as exc:  # the database is away: the claim may run out
                log.debug("outbox %s: claim not renewed: %s", record.idempotency_key, exc)
            else:
                if not kept:
                    log.info(
                        "outbox %s: claimed by another sender meanwhile", record.idempotency_key
                    )
                    return
            await asyncio.sleep(half)

    async def _failed(self, record: OutboxRecord, effect: Effect, exc: Exception) -> None:
        if is_storage_error(exc):  # the database is away: no delivery failed, none counted
            log.warning("outbox %s waits for the database: %s", record.idempotency_key, exc)
            async with self.db.write() as conn:
                await hold_effect(conn, record.idempotency_key, self.clock() + STORAGE_WAIT)
            return
        failures = record.failures + 1
        now = self.clock()
        if self.retry.retries(exc, failures):
            log.info("outbox %s failed (%s); retrying", record.idempotency_key, exc)
            wait = self.retry.delay(failures, retry_after(exc))
            async with self.db.write() as conn:
                await retry_effect_later(conn, record.id, error=str(exc), available_at=now + wait)
            return
        if not isinstance(exc, RunError):
            log.error("outbox %s failed for good", record.idempotency_key, exc_info=exc)
        else:
            log.warning("outbox %s failed for good: %s", record.idempotency_key, exc)
        async with self.db.write() as conn:
            await give_up_effect(conn, record.id, error=str(exc))
        if self.on_give_up is not None:
            await self.on_give_up(effect, _sentence(exc))


STORAGE_WAIT = timedelta(seconds=5)  # a delivery the database's outage cut: tried again then


def _sentence(exc: Exception) -> str:
    if isinstance(exc, RunError):
        return exc.public
    return "an internal error stopped it (the details are in the log)"
