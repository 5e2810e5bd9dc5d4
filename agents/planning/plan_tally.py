"""A plan's step tally: what the decision asks of all the steps at once, kept per steps tuple.

`plan_status`, `in_flight`, the ready scan and `stalled` (`agents/planning/plan_transitions.py`)
each
asked a question of every step of the plan, several times per decision: O(n) passes on a
long plan where a reconcile changes one or two steps. The tally answers them from counts
(steps not finished, steps that pause the plan, steps in flight) and the indexes of the
pending steps, computed once for a steps tuple and carried over from one tuple to the next
when a step is replaced (`replaced`: O(1) counts, the pending indexes by bisection).

Pure: a tally is a function of the steps tuple alone; the memo keeps the tuple itself
alive beside its tally (so an id is never mistaken for another tuple's), and is bounded.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass

from flotilla.agents.planning.plan import USER, Step

_FINISHED = frozenset({"done", "skipped"})
_IN_FLIGHT = frozenset({"in_progress", "blocked"})
# the reconciler needs the tally of the plan it holds and of the tuples one decision makes:
# a few entries per conversation in flight. Each entry keeps a whole steps tuple alive (256
# of them held ~30,000 references at 120 steps, walked by every full collection and freed
# at exit); a miss costs one pass over the steps
_MEMO_SIZE = 32


@dataclass(frozen=True, slots=True)
class Tally:
    unfinished: int  # steps neither done nor skipped
    pausing: int  # blocked steps and user steps in progress (they pause the plan)
    in_flight: int  # steps in progress or blocked
    pending: tuple[int, ...]  # indexes of the pending steps, ascending


def _weights(step: Step) -> tuple[int, int, int]:
    status = step.status
    unfinished = 0 if status in _FINISHED else 1
    pausing = 1 if status == "blocked" or (status == "in_progress" and step.assignee == USER) else 0
    return unfinished, pausing, 1 if status in _IN_FLIGHT else 0


_memo: dict[int, tuple[tuple[Step, ...], Tally]] = {}


def _remember(steps: tuple[Step, ...], tally: Tally) -> None:
    if len(_memo) >= _MEMO_SIZE:
        # the older half goes (a dict keeps insertion order), the newer stays: the tuples
        # the last reconciles made, the plans held now among them – clearing it all made
        # the next reconcile's look-up of its own plan a pass over all the steps. Each
        # call is one C call, safe beside other threads' look-ups and inserts.
        for key in list(_memo)[: _MEMO_SIZE // 2]:
            _memo.pop(key, None)
    _memo[id(steps)] = (steps, tally)


def tally(steps: tuple[Step, ...]) -> Tally:
    """The tally of `steps` (one pass the first time a tuple is asked about)."""
    found = _memo.get(id(steps))
    if found is not None and found[0] is steps:
        return found[1]
    unfinished = pausing = flying = 0
    for step in steps:
        u, p, f = _weights(step)
        unfinished += u
        pausing += p
        flying += f
    pending = tuple(s.index for s in steps if s.status == "pending")
    made = Tally(unfinished, pausing, flying, pending)
    _remember(steps, made)
    return made


def replaced(old: tuple[Step, ...], new: tuple[Step, ...], was: Step, step: Step) -> None:
    """`new` is `old` with `was` replaced by `step`: its tally, from `old`'s, remembered."""
    before = tally(old)
    (u0, p0, f0), (u1, p1, f1) = _weights(was), _weights(step)
    pending = before.pending
    if (was.status == "pending") != (step.status == "pending"):
        listed = list(pending)
        if step.status == "pending":
            insort(listed, step.index)
        else:
            del listed[bisect_left(listed, step.index)]
        pending = tuple(listed)
    made = Tally(
        before.unfinished - u0 + u1,
        before.pausing - p0 + p1,
        before.in_flight - f0 + f1,
        pending,
    )
    _remember(new, made)
