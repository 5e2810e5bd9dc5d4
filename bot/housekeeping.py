"""Housekeeping of a serving process: processed-event ids (and processed inbox rows) are
pruned after their retention, and the bytes of files past theirs are deleted.

The ids de-duplicate Slack's retries, which come within minutes; a day (the default
retention) is far beyond them, and the table no longer grows forever. A file's record stays
(name, size, hash, Slack id): only its bytes go, from the database or the disk.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from flotilla.bot.metrics import Metrics
from flotilla.storage.db import Database

log = logging.getLogger(__name__)
MAX_INTERVAL_S = 3600.0


def utcnow() -> datetime:
    return datetime.now(UTC)


async def prune_processed_events(
    db: Database, retention: timedelta, *, now: datetime | None = None
) -> int:
    """Delete processed-event ids, and processed inbox rows, older than `retention`;
    returns how many went."""
    from flotilla.storage.events import forget_processed_events_before
    from flotilla.storage.inbox import forget_processed_inbox_before

    cutoff = (now or utcnow()) - retention
    async with db.write() as conn:
        events = await forget_processed_events_before(conn, cutoff)
        return events + await forget_processed_inbox_before(conn, cutoff)


async def forget_expired_files(db: Database, *, now: datetime | None = None) -> int:
    """Delete the bytes of files past their retention; returns how many files lost them."""
    from flotilla.storage.files import forget_expired_bytes

    async with db.write() as conn:
        return await forget_expired_bytes(conn, now or utcnow())


def interval_for(retention: timedelta) -> float:
    """Prune a few times per retention period, at least hourly."""
    return max(1.0, min(MAX_INTERVAL_S, retention.total_seconds() / 4))


async def housekeeping_forever(
    db: Database,
    metrics: Metrics,
    retention: timedelta,
    *,
    clock: Callable[[], datetime] = utcnow,
    files: bool = False,
) -> None:
    """Prune now and then every `interval_for(retention)` seconds, until cancelled (with
    `files`, expired file bytes too)."""
    while True:
        if files:
            try:
                forgotten = await forget_expired_files(db, now=clock())
            except Exception:  # the next round retries
                log.warning("housekeeping: deleting expired file bytes failed", exc_info=True)
            else:
                if forgotten:
                    log.info("housekeeping: deleted the bytes of %d expired files", forgotten)
        try:
            pruned = await prune_processed_events(db, retention, now=clock())
        except Exception:  # a database hiccup must not end the loop; the next round retries
            log.warning("housekeeping: pruning processed events failed", exc_info=True)
        else:
            metrics.processed_events_pruned.inc(pruned)
            if pruned:
                log.info("housekeeping: pruned %d processed-event ids", pruned)
        await asyncio.sleep(interval_for(retention))  # the period of the loop, not a wait
