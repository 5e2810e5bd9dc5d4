"""The tests' one fake clock: time the test moves, so nothing waits on a real clock.

`clock()` is the product's `Clock` (`flotilla.agents.core.clock.Clock`, an aware UTC
datetime); `clock.time` and `clock.monotonic` read the same instant as the float clocks
some layers take instead (`time.time`, `time.monotonic` shaped), so one object serves both.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

START = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)  # a fixed instant, when the test names none


def _utc(moment: datetime) -> datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"a fake clock is set to aware datetimes only, not {moment!r}")
    return moment.astimezone(UTC)


class FakeClock:
    """A settable, advanceable clock: `now` (read or set), `advance(by)`.

    `tick`, when set, moves the clock on by that much at every read: time passing between
    two reads of one piece of work (e.g. between claiming a row and claiming its lease)."""

    def __init__(self, start: datetime = START, *, tick: timedelta = timedelta(0)) -> None:
        self._origin = _utc(start)
        self._now = self._origin
        self.tick = tick

    @property
    def now(self) -> datetime:
        """The clock's instant, without reading it (no tick)."""
        return self._now

    @now.setter
    def now(self, moment: datetime) -> None:
        self._now = _utc(moment)

    def __call__(self) -> datetime:
        """A read: the current instant (moved on by `tick` first)."""
        self._now += self.tick
        return self._now

    def advance(self, by: timedelta | float) -> datetime:
        """Move on by `by` (a timedelta, or seconds); the new instant."""
        self._now += by if isinstance(by, timedelta) else timedelta(seconds=by)
        return self._now

    def time(self) -> float:
        """A read as `time.time` gives it: seconds since the Unix epoch."""
        return self().timestamp()

    def monotonic(self) -> float:
        """A read as `time.monotonic` gives it: seconds since the clock's start (exact to
        the microsecond, so small steps add up as the test wrote them)."""
        return (self() - self._origin).total_seconds()
