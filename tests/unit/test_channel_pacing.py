"""The per-channel send queue: never more than `burst + rate * window` sends in any window,
no send held longer than its channel's own traffic requires, and channels independent."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from flotilla.bot.channel_pacing import ChannelBucket, ChannelPacer
from tests.fakes.clock import FakeClock

arrivals = st.lists(st.floats(min_value=0, max_value=60, allow_nan=False), max_size=80).map(sorted)


def grants(times: list[float], rate: float, burst: int) -> list[float]:
    bucket = ChannelBucket(rate, burst)
    return [bucket.reserve(t) for t in times]


@settings(max_examples=200, deadline=None)
@given(arrivals, st.sampled_from([0.5, 1.0, 4.0]), st.integers(min_value=1, max_value=4))
def test_no_window_holds_more_than_the_burst_and_the_rate(
    times: list[float], rate: float, burst: int
) -> None:
    granted = grants(times, rate, burst)
    assert all(g >= t for g, t in zip(granted, times, strict=True))  # never early
    assert granted == sorted(granted)  # in arrival order
    for window in (1.0, 10.0):
        for start in granted:
            inside = sum(start <= g < start + window for g in granted)
            assert inside <= burst + rate * window + 1e-9


@settings(max_examples=200, deadline=None)
@given(arrivals, st.integers(min_value=1, max_value=4))
def test_a_send_waits_only_behind_its_own_channels_backlog(times: list[float], burst: int) -> None:
    granted = grants(times, 1.0, burst)
    for i, (g, t) in enumerate(zip(granted, times, strict=True)):
        if g > t:  # held: the burst before it was used up, one second apart
            assert i >= burst and g <= max(t, granted[i - 1]) + 1.0 + 1e-9


def test_the_default_pacing_keeps_any_10_seconds_at_12_posts() -> None:
    granted = grants([0.0] * 40, 1.0, 2)  # a burst of 40 posts at once
    worst = max(sum(s <= g < s + 10 for g in granted) for s in granted)
    assert worst <= 12 and granted[:2] == [0.0, 0.0] and granted[2] == 1.0


async def test_a_busy_channel_never_slows_another() -> None:
    clock = FakeClock()
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        await asyncio.sleep(0)

    pacer = ChannelPacer(1.0, 2, clock=clock.monotonic, sleep=sleep)
    busy = [await pacer.wait("C-busy") for _ in range(5)]
    assert busy == [0.0, 0.0, 1.0, 2.0, 3.0]
    assert await pacer.wait("C-quiet") == 0.0  # not queued behind the busy channel
    assert ChannelPacer(None, 1).rate is None and await ChannelPacer(None, 1).wait("C") == 0.0
