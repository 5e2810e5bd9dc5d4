"""Time, passed in: the one clock type, the default clock, the one sleep type, and the one
way a background loop waits for a wake-up or its next poll. (How long to wait before trying
failed work again is `retry_policy`.)

Deciding code never reads a clock; the layers that act take a `Clock` (tests and the
benchmark pass a settable one).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

Clock = Callable[[], datetime]
Sleep = Callable[[float], Awaitable[None]]  # asyncio.sleep, or a test's that moves its clock


def utcnow() -> datetime:
    """The default clock: now, in UTC."""
    return datetime.now(UTC)


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
