"""The plan as Slack's native task display: a plan title and one task per step, with the
task status taken from the step's status (the orchestrator's, never the model's), and the
same reason the card gives under a step (why it waits for a slot, a retry, a failure). Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flotilla.agents.planning.plan import COMMANDER, USER, Plan, Step
from flotilla.bot.views.plan_card import step_note

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


# what a task's details say once the reason it showed is gone (`plan_chunks`)
STATUS_WORDS = {
    "pending": "not started",
    "in_progress": "running",
    "complete": "done",
    "error": "failed",
}


def task_status(step: Step) -> str:
    return TASK_STATUS.get(step.status, "pending")


def _who(step: Step) -> str:
    if step.assignee == USER:
        return "a person (form)"
    return "Flotilla" if step.assignee == COMMANDER else step.assignee


def _details(step: Step, plan: Plan) -> str:
    if step.status == "blocked":
        return "waiting for a person's answer"
    if step.status in ("failed", "skipped") and step.failure_reason:
        return f"{step.status}: {' '.join(step.failure_reason.split())[:200]}"
    if step.status == "skipped":
        return "skipped"
    # why it waits ("waiting: 2nd in line", "paused for urgent work", a budget), a retry
    return step_note(step, plan)


def title_of(plan: Plan) -> str:
    """The display's title: it follows the plan as steps are added."""
    return f"Plan ({len(plan.steps)} steps)"


def task_chunk(step: Step, plan: Plan) -> dict[str, Any]:
    """One step as a `task_update` chunk (its id is the step's index)."""
    title = f"{step.index}. {step.title} – {_who(step)}"[:TITLE_MAX]
    chunk: dict[str, Any] = {
        "type": "task_update",
        "id": f"step-{step.index}",
        "title": title,
        "status": task_status(step),
    }
    details = _details(step, plan)
    if details:
        chunk["details"] = details
    return chunk


def plan_chunks(
    plan: Plan, sent: Mapping[str, str] | None = None, *, every: bool = False
) -> list[dict[str, Any]]:
    """The plan's chunks: all of them (with the plan's title) when nothing was `sent`, else
    the title when it changed (a step was added) and the tasks whose status or details
    changed since (`sent`: chunk id -> signature, `PLAN_TITLE` for the title); `every`: all
    the tasks (a stream's last chunks), each told apart from what it showed as above."""
    chunks: list[dict[str, Any]] = []
    title = title_of(plan)
    if sent is None or sent.get(PLAN_TITLE) != title:
        chunks.append({"type": "plan_update", "title": title})
    for step in plan.steps:
        chunk = task_chunk(step, plan)
        before = sent.get(chunk["id"], "") if sent is not None else ""
        if "details" not in chunk and before.rsplit("|", 1)[-1]:
            # an update keeps the details a task showed: say what it is now instead
            chunk["details"] = STATUS_WORDS[chunk["status"]]
        if every or sent is None or sent.get(chunk["id"]) != signature(chunk):
            chunks.append(chunk)
    return chunks


PLAN_TITLE = "plan"  # the title's entry among the sent chunks' signatures


def sent_key(chunk: Mapping[str, Any]) -> str:
    """Under which key a sent chunk's signature is kept: its task id, or the title's."""
    return PLAN_TITLE if chunk["type"] == "plan_update" else str(chunk["id"])


def signature(chunk: Mapping[str, Any]) -> str:
    """What a sent chunk showed (a chunk is sent again only when this changes)."""
    if chunk["type"] == "plan_update":
        return str(chunk["title"])
    return f"{chunk.get('status')}|{chunk.get('title')}|{chunk.get('details', '')}"
