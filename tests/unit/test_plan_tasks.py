"""The plan as Slack's native task display: a task per step with the card's reasons, and a
title that follows the plan as steps are added."""

from __future__ import annotations

from typing import Any

from flotilla.agents.planning.plan import Plan, Step
from flotilla.bot.views.plan_tasks import PLAN_TITLE, plan_chunks, sent_key, signature


def plan_of(*statuses: str, waits: dict[int, str] | None = None) -> Plan:
    steps = [
        Step.model_validate(
            {
                "index": n,
                "title": f"Step {n}",
                "assignee": "researcher",
                "input": "x",
                "status": status,
                "attempts": 1 if status != "pending" else 0,
            }
        )
        for n, status in enumerate(statuses, start=1)
    ]
    return Plan(id=1, conversation_id=1, steps=tuple(steps), waits=waits or {})


def sent_of(chunks: list[dict[str, Any]]) -> dict[str, str]:
    return {sent_key(c): signature(c) for c in chunks}


def test_a_waiting_step_says_why_and_stops_saying_it_once_it_runs() -> None:
    waiting = plan_of("in_progress", "in_progress", waits={2: "waiting: next in line"})
    first = plan_chunks(waiting)
    assert first[0] == {"type": "plan_update", "title": "Plan (2 steps)"}
    tasks = {c["id"]: c for c in first[1:]}
    assert "details" not in tasks["step-1"]
    assert tasks["step-2"]["details"] == "waiting: next in line"
    # the queue moves on: only the task whose reason changed is sent again
    started = plan_of("in_progress", "in_progress")
    [again] = plan_chunks(started, sent_of(first))
    assert again["id"] == "step-2" and again["details"] == "running"  # no longer "waiting"
    assert plan_chunks(started, sent_of(first) | sent_of([again])) == []


def test_the_title_follows_the_plan_when_a_step_is_added() -> None:
    sent = sent_of(plan_chunks(plan_of("done", "in_progress", "pending")))
    assert sent[PLAN_TITLE] == "Plan (3 steps)"
    grown = plan_chunks(plan_of("done", "in_progress", "pending", "pending"), sent)
    assert grown[0] == {"type": "plan_update", "title": "Plan (4 steps)"}
    assert [c["id"] for c in grown[1:]] == ["step-4"]
