"""Which plans' cards read why a run waits (`agents/scheduling/wait_marks.py`): every plan until a
pass has looked, then what the last pass saw waiting – and a mark added while a pass was
reading is never dropped by that pass."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from flotilla.agents.scheduling.wait_marks import WaitMarks


def test_every_plan_may_wait_until_a_pass_has_looked() -> None:
    marks = WaitMarks()
    assert marks.may_wait(1) and marks.may_wait(99)
    marks.add(3)  # a preemption before any pass: still unknown
    seen = marks.generation
    marks.replace([3], since=seen)
    assert marks.may_wait(3) and not marks.may_wait(1)


def test_a_pass_replaces_the_marks_with_what_it_saw() -> None:
    marks = WaitMarks()
    marks.replace([1, 2], since=marks.generation)
    marks.replace([2], since=marks.generation)
    assert not marks.may_wait(1) and marks.may_wait(2)


def test_a_mark_added_while_a_pass_read_survives_that_pass() -> None:
    marks = WaitMarks()
    marks.replace([], since=marks.generation)
    seen = marks.generation  # a pass starts reading
    marks.add(7)  # a run gives its slot away meanwhile: "paused for urgent work"
    marks.replace([], since=seen)  # the pass saw nobody waiting
    assert marks.may_wait(7)
    marks.add(None)  # a run of no plan (a commander turn's): nothing to mark
    assert not marks.may_wait(8)


@given(st.lists(st.tuples(st.booleans(), st.integers(1, 5)), max_size=30))
def test_a_plan_marked_since_the_last_pass_began_always_may_wait(
    events: list[tuple[bool, int]],
) -> None:
    """Passes (True: a pass that saw only `plan` waiting) and marks (False) interleave; a
    pass's view is taken at its start. Whatever was marked after the last pass began, or
    seen by it, may wait."""
    marks = WaitMarks()
    started = marks.generation
    must: set[int] = set()
    for is_pass, plan in events:
        if is_pass:
            marks.replace([plan], since=started)
            must = {plan} | (must if marks.generation != started else set())
            started = marks.generation
        else:
            marks.add(plan)
            must.add(plan)
    assert all(marks.may_wait(p) for p in must)
