"""The tests' own helpers: the one fake clock and the one `eventually`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from tests.eventually import eventually
from tests.fakes.clock import FakeClock

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def test_the_clock_moves_only_when_told_and_reads_aware_utc() -> None:
    clock = FakeClock(T0.astimezone(timezone(timedelta(hours=2))))
    assert clock() == clock() == T0 and clock().tzinfo is UTC
    assert clock.advance(90) == T0 + timedelta(seconds=90)
    assert clock.advance(timedelta(minutes=1)) == clock.now == T0 + timedelta(seconds=150)
    clock.now = T0
    assert clock() == T0
    with pytest.raises(ValueError, match="aware"):
        clock.now = datetime(2026, 12, 1, 9, 0)  # naive: no instant at all
    with pytest.raises(ValueError, match="aware"):
        FakeClock(datetime(2026, 12, 1))


def test_a_ticking_clock_moves_at_every_read() -> None:
    clock = FakeClock(T0, tick=timedelta(milliseconds=50))
    assert [clock(), clock()] == [T0 + timedelta(milliseconds=50), T0 + timedelta(seconds=0.1)]
    clock.tick = timedelta(0)
    assert clock() == clock() == T0 + timedelta(seconds=0.1)


def test_the_float_readings_are_the_same_instant() -> None:
    clock = FakeClock(datetime.fromtimestamp(1_800_000_000, UTC))
    assert clock.time() == 1_800_000_000.0 and clock.monotonic() == 0.0
    clock.advance(60 / 50)  # small steps add up exactly as written
    clock.advance(2.9)
    assert clock.monotonic() == 4.1
    assert clock.time() == pytest.approx(1_800_000_004.1, abs=1e-6)


async def test_eventually_returns_the_first_truthy_value_of_a_sync_or_async_condition() -> None:
    looks: list[int] = []

    def third_look() -> list[int] | None:
        looks.append(len(looks))
        return looks if len(looks) == 3 else None

    assert await eventually(third_look, 5, what="a third look", every=0) == [0, 1, 2]

    async def ready() -> str:
        return "ready"

    assert await eventually(ready, 5, what="ready") == "ready"


async def test_eventually_says_what_it_awaited_and_what_it_saw_last() -> None:
    async def never() -> int:
        return 0

    with pytest.raises(AssertionError, match=r"not within 0.05 s: the queue empty .*last seen: 0"):
        await eventually(never, 0.05, what="the queue empty")
