"""The scheduler's policy inputs: priorities, admins' overrides, budget periods, quota
commands, and the wait note on the plan card."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from flotilla.agents.planning.plan import Plan, Step
from flotilla.agents.scheduling.admission_policy import (
    SchedulerOptions,
    marks_of,
    period_starts,
    priority_of,
    quota_keys,
    with_overrides,
)
from flotilla.agents.scheduling.scheduler import (
    BATCH,
    INTERACTIVE,
    LONG,
    NORMAL,
    URGENT,
    Budget,
    Limits,
    RunRequest,
    admit,
)
from flotilla.bot.admin_scheduler import parse_quota
from flotilla.bot.views.plan_card import step_note

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


def test_an_admins_mark_wins_then_a_waiting_person_then_a_long_plan() -> None:
    marks = {"plan:7": "batch", "channel:C1": "urgent"}
    kw = dict(plan_steps=2, batch_steps=6)
    assert priority_of("post_dispatch", channel_id="C1", plan_id=7, marks=marks, **kw) == BATCH
    assert priority_of("post_dispatch", channel_id="C1", plan_id=8, marks=marks, **kw) == URGENT
    assert (
        priority_of("commander_turn", channel_id="C2", plan_id=None, marks={}, **kw) == INTERACTIVE
    )
    assert priority_of("resume_step", channel_id="C2", plan_id=1, marks={}, **kw) == INTERACTIVE
    assert priority_of("post_dispatch", channel_id="C2", plan_id=1, marks={}, **kw) == NORMAL
    long = dict(plan_steps=7, batch_steps=6)
    assert priority_of("post_dispatch", channel_id="C2", plan_id=1, marks={}, **long) == LONG


def test_overrides_win_and_zero_removes_a_cap() -> None:
    options = SchedulerOptions(capacity=16, agent_caps={"writer": 2, "researcher": 3})
    stored = {
        "scheduler": {
            "capacity": 4,
            "agent_caps": {"researcher": 0, "analyst": 1},
            "marks": {"plan:3": "urgent"},
        }
    }
    merged = with_overrides(options, stored)
    assert merged.capacity == 4
    assert merged.agent_caps == {"writer": 2, "analyst": 1}
    assert marks_of(stored) == {"plan:3": "urgent"}
    assert with_overrides(options, {}) == options


def test_budget_periods_reset_at_midnight_and_on_the_first_of_the_month() -> None:
    day, tomorrow, month, next_month = period_starts(datetime(2026, 12, 31, 23, 59, tzinfo=UTC))
    assert (day.day, tomorrow.month, tomorrow.day) == (31, 1, 1)
    assert (month.day, next_month.year, next_month.month) == (1, 2027, 1)


def test_quota_commands_are_parsed_or_refused_with_a_sentence() -> None:
    assert parse_quota(["agent", "researcher", "2"]).name == "researcher"
    assert parse_quota(["weight", "<#C0123|launch>", "2.5"]).name == "C0123"
    assert parse_quota(["budget", "CHANNEL_DAY", "100"]).name == "channel_day"
    assert parse_quota(["capacity", "8"]).value == 8
    for words, problem in (
        (["capacity", "0"], "at least 1"),
        (["agent", "researcher", "two"], "not a number"),
        (["agent", "researcher", "1.5"], "whole number"),
        (["budget", "weekly", "5"], "no budget"),
        (["weight", "launch", "2"], "Say a channel"),
        (["frobnicate"], "Say what to change"),
    ):
        assert problem in parse_quota(words).problem, words


def test_the_card_says_why_a_dispatched_step_waits() -> None:
    step = Step(index=1, title="Find", assignee="researcher", status="in_progress", attempts=1)
    plan = Plan(id=1, conversation_id=1, steps=(step,), waits={1: "waiting: 2nd in line"})
    assert step_note(step, plan) == "waiting: 2nd in line"
    assert step_note(step, plan.model_copy(update={"waits": {}})) == ""


@settings(max_examples=150, deadline=None)
@given(
    estimates=st.lists(st.integers(0, 5_000), min_size=1, max_size=12),
    remaining=st.integers(-1_000, 10_000),
    limit=st.integers(1, 10_000),
)
def test_grants_never_spend_more_than_a_budget_has_left(
    estimates: list[int], remaining: int, limit: int
) -> None:
    """What one pass grants fits the budget (each estimate counted at most a whole period)."""
    waiting = [
        RunRequest(f"r{i}", "W:C", "researcher", T0, estimate_tokens=e, workspace="W")
        for i, e in enumerate(estimates)
    ]
    budget = Budget(remaining=remaining, label="channel budget", limit=limit)
    decision = admit(waiting, [], Limits(capacity=20, budgets={"W:C": budget}), T0)
    granted = sum(min(r.estimate_tokens, limit) for r in waiting if r.key in decision.grants)
    assert granted <= max(remaining, 0) or not decision.grants
    for key, wait in decision.waits.items():
        assert wait.kind == "budget" and wait.sentence == "waiting: channel budget used up", key


def test_a_tool_given_per_domain_counts_as_the_tool_and_its_domain() -> None:
    keys = quota_keys(
        ["search", "http_fetch:example.com", "http_fetch:example.org"],
        [{"url": "https://crm.example.com/mcp"}],
    )
    assert keys == (
        "search",
        "http_fetch",
        "http_fetch:example.com",
        "http_fetch:example.org",
        "mcp:crm.example.com",
    )
