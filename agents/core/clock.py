"""Time, passed in: the one clock type, the default clock, the one backoff policy, and
the one way a background loop waits for a wake-up or its next poll.

Deciding code never reads a clock; the layers that act take a `Clock` (tests and the
benchmark pass a settable one).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

Clock = Callable[[], datetime]


def utcnow() -> datetime:
    """The default clock: now, in UTC."""
    return datetime.now(UTC)


def backoff(failures: int, *, base: timedelta, cap: timedelta) -> timedelta:
    """Exponential backoff after the n-th failure (n ≥ 1): base, 2·base, 4·base, … ≤ cap."""
    exponent = min(max(failures - 1, 0), 30)
    delay: timedelta = base * (2**exponent)
    return min(delay, cap)


async def woken(event: asyncio.Event, seconds: float) -> bool:
    """Wait until `event` is set or `seconds` passed; True when it was set.

    Not `asyncio.wait_for(event.wait(), seconds)`: on Python 3.11 that returns normally
    when the loop's task is cancelled in the same instant as the event is set (CPython
    gh-86296, fixed in 3.12), so the cancellation is lost, the loop polls on and whoever
    stops it waits for ever. `asyncio.timeout` keeps a cancellation from outside apart
    from its own timeout."""
    try:
        async with asyncio.timeout(max(0.0, seconds)):
            await event.wait()
    except TimeoutError:
        return False
    return True
