"""The plan as Slack's native task display: a plan title and one task per step, with the
task status taken from the step's status (the orchestrator's, never the model's). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flotilla.agents.planning.plan import COMMANDER, USER, Plan, Step

TITLE_MAX = 150
# the step's status -> the task's (pending, in_progress, complete, error)
TASK_STATUS = {
    "pending": "pending",
    "in_progress": "in_progress",
    "blocked": "in_progress",
    "done": "complete",
    "failed": "error",
    "skipped": "error",
}


def task_status(step: Step) -> str:
    return TASK_STATUS.get(step.status, "pending")


def _who(step: Step) -> str:
    if step.assignee == USER:
        return "a person (form)"
    return "Flotilla" if step.assignee == COMMANDER else step.assignee


def _details(step: Step) -> str:
    if step.status == "blocked":
        return "waiting for a person's answer"
    if step.status in ("failed", "skipped") and step.failure_reason:
        return f"{step.status}: {' '.join(step.failure_reason.split())[:200]}"
    return step.status.replace("_", " ") if step.status == "skipped" else ""


def task_chunk(step: Step) -> dict[str, Any]:
    """One step as a `task_update` chunk (its id is the step's index)."""
    title = f"{step.index}. {step.title} – {_who(step)}"[:TITLE_MAX]
    chunk: dict[str, Any] = {
        "type": "task_update",
        "id": f"step-{step.index}",
        "title": title,
        "status": task_status(step),
    }
    details = _details(step)
    if details:
        chunk["details"] = details
    return chunk


def plan_chunks(plan: Plan, sent: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """The plan's chunks: all of them (with the plan's title) when nothing was `sent`, else
    only the tasks whose status or details changed since (`sent`: task id -> signature)."""
    chunks: list[dict[str, Any]] = []
    if sent is None:
        chunks.append({"type": "plan_update", "title": f"Plan ({len(plan.steps)} steps)"})
    for step in plan.steps:
        chunk = task_chunk(step)
        if sent is None or sent.get(chunk["id"]) != signature(chunk):
            chunks.append(chunk)
    return chunks


def signature(chunk: Mapping[str, Any]) -> str:
    """What a sent task showed (a task is sent again only when this changes)."""
    return f"{chunk.get('status')}|{chunk.get('title')}|{chunk.get('details', '')}"
