"""Plan validation: one precise, actionable sentence per problem; nothing half-accepted."""

from __future__ import annotations

from typing import Any

import pytest

from flotilla.agents.core.errors import PlanValidationError
from flotilla.agents.planning.plan import PlanProposal, StepProposal, new_steps
from flotilla.agents.planning.plan_validation import parse_plan, validate_plan
from tests.unit.reconcile_helpers import AGENTS, proposal


def problems(*steps: dict[str, Any], disabled: tuple[str, ...] = ()) -> list[str]:
    with pytest.raises(PlanValidationError) as info:
        validate_plan(proposal(*steps), assignees=AGENTS, disabled=disabled)
    return info.value.problems


def test_valid_plan_fills_in_default_wait_for() -> None:
    out = validate_plan(
        proposal({}, {"assignee": "writer", "input": "{{step_1.output_summary}}"}),
        assignees=AGENTS,
    )
    assert [s.wait_for for s in out.steps] == [[], [1]]


def test_empty_plan() -> None:
    with pytest.raises(PlanValidationError) as info:
        validate_plan(PlanProposal(steps=[]), assignees=AGENTS)
    assert info.value.problems == [
        "the plan has no steps: write at least one step, or answer without a plan"
    ]


def test_more_than_fifty_steps() -> None:
    (problem,) = problems(*({} for _ in range(51)))
    assert problem.startswith("the plan has 51 steps; the limit is 50")


def test_fifty_steps_are_fine() -> None:
    validate_plan(proposal(*({} for _ in range(50))), assignees=AGENTS)


def test_indexes_must_be_one_to_n_in_order() -> None:
    (problem,) = problems({}, {"index": 3})
    assert problem.startswith("step at position 2 has index 3, expected 2")


def test_wait_for_itself_later_and_missing() -> None:
    assert problems({"wait_for": [1]}) == [
        "step 1: wait_for names step 1 itself; a step may only wait for earlier steps"
    ]
    (later,) = problems({"wait_for": [2]}, {})
    assert later.startswith("step 1: wait_for names step 2, which comes later")
    (missing,) = problems({}, {"wait_for": [0]})
    assert missing == "step 2: wait_for names step 0, which does not exist"
    (twice,) = problems({}, {"wait_for": [1, 1]})
    assert "twice" in twice


def test_unknown_and_disabled_assignee() -> None:
    (unknown,) = problems({"assignee": "lawyer"})
    assert unknown == (
        "step 1: there is no agent named 'lawyer'; assign the step to one of: "
        "user, commander, researcher, writer"
    )
    (off,) = problems({"assignee": "analyst"}, disabled=("analyst",))
    assert off.startswith("step 1: the agent 'analyst' is disabled")


def test_user_and_commander_are_always_allowed() -> None:
    validate_plan(proposal({"assignee": "user"}, {"assignee": "commander"}), assignees=())


def test_template_must_name_an_upstream_step_and_a_known_field() -> None:
    # 1 -> 2, 1 -> 3: step 3 may use step 1 but not its sibling step 2
    (sibling,) = problems(
        {}, {"wait_for": [1]}, {"wait_for": [1], "input": "{{step_2.output_summary}}"}
    )
    assert sibling.startswith("step 3: the input refers to step 2, which is not upstream")
    (field,) = problems({}, {"input": "{{step_1.transcript}}"})
    assert "'{{step_1.transcript}}', which is unknown" in field
    (other,) = problems({"input": "{{user_name}}"})
    assert "'{{user_name}}', which is unknown" in other


def test_transitive_upstream_and_request_are_fine() -> None:
    validate_plan(
        proposal(
            {},
            {},
            {"input": "{{ step_1.output_files }} {{step_2.output_summary}} {{request}}"},
        ),
        assignees=AGENTS,
    )


def test_oversized_title_and_input() -> None:
    title, text = problems({"title": "t" * 151, "input": "x" * 3001})
    assert title == "step 1: the title has 151 characters; shorten it to 150"
    assert text.startswith("step 1: the input has 3001 characters; shorten it to 3000")
    (empty,) = problems({"title": "  "})
    assert "title is empty" in empty


def test_forms() -> None:
    (not_user,) = problems({"form": {"fields": [{"name": "a", "label": "A"}]}})
    assert not_user == "step 1: only a step assigned to 'user' can have a form; remove it"
    found = problems(
        {
            "assignee": "user",
            "form": {
                "fields": [
                    {"name": "Bad Name", "label": "A"},
                    {"name": "pick", "label": "P", "kind": "select"},
                    {"name": "pick", "label": "", "options": ["x"]},
                ]
            },
        }
    )
    assert "step 1: the form has two fields with the same name; name each field once" in found
    assert any("'Bad Name': a name is lowercase letters" in p for p in found)
    assert "step 1: form field 'pick' is a select: give it 1..100 options" in found
    assert any("has options but is not a select" in p for p in found)
    assert any("the label must be 1..2000 characters" in p for p in found)
    (no_fields,) = problems({"assignee": "user", "form": {"fields": []}})
    assert "the form has 0 fields; give it 1..10" in no_fields


def test_all_problems_are_reported_at_once() -> None:
    assert len(problems({"assignee": "nobody", "title": ""}, {"wait_for": [5]})) == 3


def test_runtime_fields_in_a_proposal_are_rejected_by_name() -> None:
    raw = {"steps": [{"index": 1, "title": "a", "assignee": "writer", "status": "done"}]}
    with pytest.raises(PlanValidationError) as info:
        parse_plan(raw)
    assert info.value.problems == [
        "step at position 1: 'status' is execution state that only the orchestrator writes; "
        "remove it (a step may set index, title, assignee, input, wait_for, on_failure, form)"
    ]
    for field in ("output_summary", "failure_reason", "attempts"):
        with pytest.raises(PlanValidationError, match=field):
            parse_plan({"steps": [{"index": 1, "title": "a", "assignee": "w", field: "x"}]})


def test_steps_added_to_an_existing_plan_continue_the_numbering() -> None:
    existing = new_steps(proposal({}, {}))
    extra = PlanProposal(
        steps=[StepProposal(index=3, title="more", assignee="writer", wait_for=[1])]
    )
    validate_plan(extra, assignees=AGENTS, existing=existing)
    wrong = PlanProposal(steps=[StepProposal(index=1, title="x", assignee="writer")])
    with pytest.raises(PlanValidationError, match="expected 3"):
        validate_plan(wrong, assignees=AGENTS, existing=existing)
