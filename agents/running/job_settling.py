"""A scheduled job's settle, carried by its report.

A scheduled job's work ends by reporting its outcome (`step_runs.report`, or the plan a
commander turn starts); the job then settles: its run request finished (the slot freed,
the run's lease let go) and its outbox row marked sent. The report carries that settle as
data – the attempt's `Release` (`agents/reconciling/reconcile_units.py`) – and the reconcile's
unit of work writes it with the outcome where the database allows (SQLite): a process killed
between them leaves neither or both. The release is conditional on this process still
holding the grant (a lease lost meanwhile releases nothing here: its new holder settles it).
When the report released nothing – no plan, a failure, or a database whose reconcile cannot
carry it (PostgreSQL) – the job settles on its own, as before.

The job's heartbeat is stopped before the report (on every database, so the path is one):
it would see the request finished and call its lease lost. A report takes milliseconds; a
database that is away fails the renewals anyway.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from flotilla.agents.reconciling.reconcile_units import Release


@dataclass(slots=True)
class Settling:
    """How one scheduled job settles with its report (set up by the job): what the report
    writes (`release`), and, once reported, what that write answered (`others_wait`)."""

    release: Release
    stop_heartbeat: Callable[[], Awaitable[None]]
    others_wait: bool | None = None  # released with the report: runs wait for the slot?

    async def to_report(self) -> Release:
        """The release the report carries, once the heartbeat is stopped (it would see the
        request finished and call its lease lost)."""
        await self.stop_heartbeat()
        return self.release

    def reported(self, others_wait: bool | None) -> None:
        """The report committed: what it released is released (None: nothing was)."""
        self.others_wait = others_wait


def settling_of(run_key: str, row_key: str, owner: str, heartbeat: asyncio.Task[None]) -> Settling:
    """A job's `Settling`: its heartbeat is stopped (and waited for) before the report."""

    async def stop_heartbeat() -> None:
        heartbeat.cancel()
        await asyncio.gather(heartbeat, return_exceptions=True)

    return Settling(Release(run_key, row_key, owner), stop_heartbeat)
