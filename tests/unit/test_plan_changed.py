"""`agents.planning.plan.changed` builds what pydantic's `model_copy(update=…)` builds (it copies a
step or a plan in one call on the reconcile's hot path, reaching into pydantic's fields)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from flotilla.agents.planning.plan import Plan, Step, changed

STEP_CHANGES = st.fixed_dictionaries(
    {},
    optional={
        "status": st.sampled_from(["pending", "in_progress", "done", "failed"]),
        "attempts": st.integers(0, 5),
        "output_summary": st.none() | st.text(max_size=20),
        "not_before": st.none() | st.just(datetime(2026, 12, 2, tzinfo=UTC)),
        "output_files": st.tuples(st.text(max_size=5)),
    },
)


def same(copy: Any, expected: Any) -> None:
    assert copy == expected
    assert type(copy) is type(expected)
    assert copy.model_fields_set == expected.model_fields_set
    assert copy.model_dump() == expected.model_dump()
    assert copy.__pydantic_extra__ == expected.__pydantic_extra__
    assert copy.__pydantic_private__ == expected.__pydantic_private__


@given(STEP_CHANGES, st.booleans())
def test_a_step_changed_is_its_model_copy(changes: dict[str, Any], defaults: bool) -> None:
    step = Step(index=1, title="Find", assignee="researcher")
    if not defaults:
        step = Step(index=2, title="Write", assignee="writer", input="x", wait_for=(1,))
    same(changed(step, changes), step.model_copy(update=changes))


@given(st.integers(0, 9), st.sampled_from(["running", "completed", "paused"]))
def test_a_plan_changed_is_its_model_copy(version: int, status: str) -> None:
    plan = Plan(id=1, conversation_id=2, steps=(Step(index=1, title="Find", assignee="r"),))
    changes: dict[str, Any] = {"version": version, "status": status}
    copy = changed(plan, changes)
    same(copy, plan.model_copy(update=changes))
    assert plan.version == 0 and plan.status == "running"  # the original is untouched
