"""The sentences that end a plan and tell a failure: pure, one line each, no internals."""

from __future__ import annotations

from typing import Any

from flotilla.agents.delivering.plan_endings import (
    FINAL_ANSWER_TASK,
    closing_sentence,
    failure_sentence,
    final_answer_input,
    needs_final_answer,
    summary_sentence,
)
from flotilla.agents.planning.effects import StepFailureNotice
from flotilla.agents.planning.plan import Plan
from tests.unit.reconcile_helpers import make_plan


def with_steps(plan: Plan, *changes: dict[str, Any], status: str = "completed") -> Plan:
    steps = tuple(s.model_copy(update=c) for s, c in zip(plan.steps, changes, strict=True))
    return plan.model_copy(update={"steps": steps, "status": status})


def notice(assignee: str, on_failure: Any) -> StepFailureNotice:
    return StepFailureNotice(
        key="k",
        conversation_id=3,
        plan_id=7,
        step=2,
        attempt=1,
        assignee=assignee,
        title="Survey our pricing",
        reason="the provider refused.\nTry later.",
        on_failure=on_failure,
    )


def test_a_failure_is_one_sentence_with_what_happens_next() -> None:
    assert failure_sentence(notice("analyst", "continue")) == (
        "The analyst could not finish “Survey our pricing”: the provider refused. Try later; "
        "I'm skipping it and continuing."
    )
    assert failure_sentence(notice("analyst", "abort_plan")).endswith("; the plan stops here.")
    assert failure_sentence(notice("commander", "ask_commander")).startswith("I could not")


def test_only_a_completed_plan_without_a_commander_step_at_the_end_needs_an_answer() -> None:
    done = {"status": "done", "output_summary": "found"}
    plan = with_steps(make_plan({}, {"assignee": "writer"}), done, done)
    assert needs_final_answer(plan)
    assert not needs_final_answer(plan.model_copy(update={"status": "aborted"}))
    synthesis = with_steps(make_plan({}, {"assignee": "commander"}), done, done)
    assert not needs_final_answer(synthesis)


def test_the_final_answer_is_written_from_every_steps_result() -> None:
    plan = with_steps(
        make_plan(
            {"title": "Find"},
            {"title": "Pick", "assignee": "user"},
            {"title": "Skip"},
            request="compare  pricing",
        ),
        {"status": "done", "output_summary": "three   rivals", "output_files": ("a.csv",)},
        {"status": "done", "output_summary": "tiers: Pro"},
        {"status": "skipped", "failure_reason": "paywall."},
    )
    assert final_answer_input(plan).splitlines() == [
        FINAL_ANSWER_TASK,
        "Request: compare pricing",
        "Step 1 (researcher) Find: three rivals",
        "Files of step 1: a.csv",
        "Step 2 (a person) Pick: tiers: Pro",
        "Step 3 (researcher) Skip: skipped (paywall)",
    ]
    assert summary_sentence(plan) == "All steps are done: Find – three rivals; Pick – tiers: Pro."


def test_a_stopped_plan_says_what_happened_and_what_is_kept() -> None:
    base = make_plan(*({"title": f"T{i}"} for i in range(1, 10)))
    done = {"status": "done", "output_summary": "x"}
    aborted = with_steps(
        base,
        done,
        {"status": "failed", "failure_reason": "no data."},
        *([{}] * 7),
        status="aborted",
    )
    assert closing_sentence(aborted) == (
        "The plan was stopped: step 2 failed (no data); nothing else will run, and what "
        "finished is kept: step 1 (T1)."
    )
    assert closing_sentence(aborted, "out of budget.").startswith(
        "The plan was stopped: out of budget; "
    )
    many = with_steps(base, *([done] * 8), {}, status="cancelled")
    sentence = closing_sentence(many, by="U1")
    assert sentence.startswith("Plan cancelled by <@U1>; nothing else will run, and what")
    assert sentence.endswith("step 5 (T5), step 6 (T6) and 2 more.")
    none = with_steps(base, *([{}] * 9), status="cancelled")
    assert closing_sentence(none).endswith("and no step had finished.")
    assert "\n" not in sentence
