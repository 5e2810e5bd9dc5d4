"""Time, passed in: the one clock type, the default clock, and the one backoff policy.

Deciding code never reads a clock; the layers that act take a `Clock` (tests and the
benchmark pass a settable one).
"""

from __future__ import annotations

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
