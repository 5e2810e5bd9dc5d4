"""Which plans may have a run waiting with a stored reason: the card's plan load reads the
wait reasons only for those (on SQLite, where this process writes every reason).

A stored reason is written by an admission pass (`set_wait_reasons`) or by a run that gives
its slot to urgent work (`give_way`: "paused for urgent work"); everything else only clears
reasons. So after this process's first pass the marks are a superset of the plans with a
reason stored: each pass replaces them with what it saw waiting, in its own transaction,
and a preemption adds its plan before it commits. Until the first pass (a process just
started: a previous one's reasons may be stored) every plan may wait."""

from __future__ import annotations

from collections.abc import Iterable


class WaitMarks:
    def __init__(self) -> None:
        self._plans: set[int] | None = None  # None: no pass ran here yet
        self.generation = 0  # bumped by every mark: a pass replaces only what it saw

    def may_wait(self, plan_id: int) -> bool:
        return self._plans is None or plan_id in self._plans

    def add(self, plan_id: int | None) -> None:
        """A reason is being stored for this plan (call before its transaction commits)."""
        self.generation += 1
        if self._plans is not None and plan_id is not None:
            self._plans.add(plan_id)

    def replace(self, plan_ids: Iterable[int], *, since: int) -> None:
        """A pass saw these plans' runs waiting (read at generation `since`, in a transaction
        that held the write lock, or in a read that found nobody waiting); a mark added
        since stays."""
        seen = set(plan_ids)
        if self.generation != since:  # marked while this pass read: those marks stay
            if self._plans is None:
                return  # …before any pass had looked: still unknown
            seen |= self._plans
        self._plans = seen
