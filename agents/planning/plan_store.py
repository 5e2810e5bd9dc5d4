"""Plans as stored rows and back: the mapping beside the plan store (`storage/plans.py`,
`storage/plan_steps.py`).

`storage/` knows tables and rows, `agents/planning/plan.py` the domain models; this module is the
one place that turns one into the other (the reconciler and the outbox both use it).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from flotilla.agents.planning.plan import FormSpec, Plan, Question, Step


def step_row(step: Step, was: Step | None, now: datetime) -> dict[str, Any]:
    """The stored row of `step`; `was` is the step as loaded (None for a new step)."""
    started = was is None or was.status != "in_progress"
    return {
        "index": step.index,
        "title": step.title,
        "assignee": step.assignee,
        "input": step.input,
        "wait_for": list(step.wait_for),
        "on_failure": step.on_failure,
        "form": step.form.model_dump() if step.form is not None else None,
        "status": step.status,
        "output_summary": step.output_summary,
        "output_files": list(step.output_files),
        "failure_reason": step.failure_reason,
        "attempts": step.attempts,
        "transient_failures": step.transient_failures,
        "retries": step.retries,
        "not_before": step.not_before,
        "blocked_question": step.question.model_dump() if step.question is not None else None,
        "started_at": now if step.status == "in_progress" and started else None,
        "finished_at": now if step.status in ("done", "failed", "skipped") else None,
    }


def step_from_row(row: dict[str, Any]) -> Step:
    """A stored row as a `Step` (trusted data: constructed without re-validation)."""
    form = row["form"]
    question = row["blocked_question"]
    return Step.model_construct(
        index=row["index"],
        title=row["title"],
        assignee=row["assignee"],
        input=row["input"],
        wait_for=tuple(row["wait_for"]),
        on_failure=row["on_failure"],
        form=FormSpec.model_validate(form) if form is not None else None,
        status=row["status"],
        output_summary=row["output_summary"],
        output_files=tuple(row["output_files"]),
        failure_reason=row["failure_reason"],
        attempts=row["attempts"],
        transient_failures=row["transient_failures"],
        retries=row["retries"],
        not_before=row["not_before"],
        question=Question.model_validate(question) if question is not None else None,
    )


def plan_from_rows(plan: dict[str, Any], steps: list[dict[str, Any]]) -> Plan:
    """A stored plan (see `storage.plans.load_latest_plan`) as a `Plan`."""
    return Plan.model_construct(**plan, steps=tuple(step_from_row(r) for r in steps))
