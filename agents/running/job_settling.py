"""A step run's settle in the transaction of its outcome's reconcile.

A scheduled job's work ends by reporting its outcome (`step_runs.report`); the job then
settled on its own: its run request finished (the slot freed, the run's lease let go) and
its outbox row marked sent, a write transaction after the reconcile's. On SQLite the settle
is made in the reconcile's transaction instead (`Reconciler.reconcile(settle=…)`): the
outcome and the settle commit together, so a process killed between them leaves neither
or both. The job's heartbeat is stopped first – it would see the request finished and call
its lease lost – and the settle is conditional on this process still holding the grant
(a lease lost meanwhile settles nothing here, as before: its new holder settles it). When
the reconcile stores nothing (no plan) or fails, nothing was settled and the job settles on
its own, as before. PostgreSQL keeps the job's own settle (its reconcile is an optimistic
read and one version-checked write).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.engine import Connection

from flotilla.storage.run_request_leases import finish_held_request


@dataclass(slots=True)
class Settling:
    """How one scheduled job settles in its outcome's reconcile (set up by the job)."""

    run_key: str  # its run request (its lease)
    row_key: str  # its outbox row
    owner: str  # this process
    stop_heartbeat: Callable[[], Awaitable[None]]
    others_wait: bool | None = None  # once committed: settled (True: runs wait for a slot)
    _written: bool | None = None  # written in the transaction now open

    def settle_in(self, conn: Connection, now: datetime) -> Sequence[str]:
        """In the reconcile's transaction: the run request finished while this process
        holds it; then its outbox row is to be marked sent, returned for the reconcile's
        own mark of the rows it delivered (one statement, `storage.outbox.mark_sent`)."""
        waits = finish_held_request(conn, self.run_key, self.owner, now)
        self._written = waits
        return () if waits is None else (self.row_key,)

    def committed(self) -> None:
        """The reconcile's transaction committed: what it settled is settled."""
        self.others_wait, self._written = self._written, None


def settling_of(run_key: str, row_key: str, owner: str, heartbeat: asyncio.Task[None]) -> Settling:
    """A job's `Settling`: its heartbeat is stopped (and waited for) before the settle."""

    async def stop_heartbeat() -> None:
        heartbeat.cancel()
        await asyncio.gather(heartbeat, return_exceptions=True)

    return Settling(run_key, row_key, owner, stop_heartbeat)
