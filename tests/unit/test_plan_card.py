"""The plan card tells the truth: who stopped a plan (once, live mention), done apart from skipped.

Stopped plans come from the real pure transitions (cancel_plan, abort_plan, fail_step), so a
change in the notes they leave on skipped steps shows up here.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st
from slack_sdk.models.blocks import Block

from flotilla.agents.planning.decisions import decide
from flotilla.agents.planning.plan import USER, CancelPlan, Plan, Step, StepStatus
from flotilla.agents.planning.plan_transitions import (
    abort_plan,
    cancel_plan,
    fail_step,
    plan_status,
)
from flotilla.bot.views.plan_card import CANCEL_ACTION, plan_card, progress

STATUSES: list[StepStatus] = ["pending", "in_progress", "done", "failed", "skipped", "blocked"]
LIVE = re.compile(r"<@U[A-Z0-9]+>")  # the only markup the card may carry unescaped


def dicts(blocks: list[Block]) -> list[dict[str, object]]:
    return [b.to_dict() for b in blocks]  # to_dict() runs slack_sdk's own validators


def texts(blocks: list[Block]) -> list[str]:
    """Every mrkdwn/plain text of the card, in order."""
    found: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            if node.get("type") in ("mrkdwn", "plain_text"):
                found.append(str(node["text"]))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(dicts(blocks))
    return found


def context_of(blocks: list[Block]) -> str:
    (context,) = [b for b in dicts(blocks) if b["type"] == "context"]
    return str(context["elements"][0]["text"])  # type: ignore[index]


def sections_of(blocks: list[Block]) -> str:
    return "\n".join(
        str(b["text"]["text"])  # type: ignore[index]
        for b in dicts(blocks)
        if b["type"] == "section"
    )


def five(*statuses: StepStatus) -> Plan:
    steps = tuple(
        Step(index=i, title=f"Step {i}", assignee="writer", status=status, on_failure="continue")
        for i, status in enumerate(statuses, start=1)
    )
    return Plan(id=3, conversation_id=1, steps=steps)


def test_a_cancel_from_the_card_names_who_once_as_a_live_mention() -> None:
    running = five("done", "done", "in_progress", "pending", "pending")
    plan = cancel_plan(running, "cancelled by <@U123>")
    text, blocks = plan_card(plan, requester="UMAYA")
    body = json.dumps(dicts(blocks), ensure_ascii=False)

    assert body.count("cancelled by <@U123>") == 1
    assert "&lt;@" not in body and "&lt;@" not in text
    assert context_of(blocks) == "cancelled by <@U123> · 2 of 5 done, 3 skipped"
    assert text == "Plan (5 steps) – cancelled by <@U123>, 2 of 5 done, 3 skipped"
    lines = sections_of(blocks)
    assert "cancel" not in lines  # the skipped steps do not repeat the reason
    assert [f"{i} ⏭ *Step {i}*" in lines for i in (3, 4, 5)] == [True] * 3
    assert CANCEL_ACTION not in body


def test_a_reason_the_commander_wrote_is_escaped_not_obeyed() -> None:
    running = five("done", "pending", "pending", "pending", "pending")
    for reason in ["<!channel> stop & go", "cancelled by <@U1> <!here>", "cancelled by <@U1|x>"]:
        text, blocks = plan_card(cancel_plan(running, reason))
        shown = "\n".join([text, *texts(blocks)])
        assert "<!" not in shown and "<@" not in shown, shown
        assert context_of(blocks).startswith("cancelled: ")
        assert "&lt;" in context_of(blocks)
        assert "cancel" not in sections_of(blocks)


def test_an_aborted_plan_says_why_once() -> None:
    running = five("done", "pending", "pending", "pending", "pending")
    step = running.steps[1].model_copy(update={"status": "in_progress", "on_failure": "abort_plan"})
    plan, _ = fail_step(running, step, "provider returned 400 <bad>")
    assert plan.status == "aborted"
    text, blocks = plan_card(plan)
    assert context_of(blocks) == (
        "aborted: step 2 failed: provider returned 400 &lt;bad&gt; · 1 of 5 done, 1 failed, "
        "3 skipped"
    )
    lines = sections_of(blocks)
    assert "failed: provider returned 400 &lt;bad&gt;" in lines  # the failed step's own reason
    assert "not run" not in lines and "aborted" not in lines
    assert text.endswith("1 of 5 done, 1 failed, 3 skipped")

    by_commander = abort_plan(running, "the source is gone")
    assert context_of(plan_card(by_commander)[1]).startswith("aborted: the source is gone · ")


def test_done_and_skipped_are_counted_apart() -> None:
    completed = five("done", "skipped", "done", "skipped", "skipped")
    completed = completed.model_copy(update={"status": "completed"})
    assert progress(completed) == "2 of 5 done, 3 skipped"
    text, blocks = plan_card(completed)
    assert context_of(blocks) == "completed · 2 of 5 done, 3 skipped"
    assert text == "Plan (5 steps) – completed, 2 of 5 done, 3 skipped"

    running = five("done", "in_progress", "pending", "pending", "pending")
    assert context_of(plan_card(running)[1]) == "running · 1 of 5 done"  # no ", 0 skipped"


def test_a_step_skipped_for_its_own_reason_keeps_it() -> None:
    running = five("done", "in_progress", "pending", "pending", "pending")
    plan, _ = fail_step(running, running.steps[1], "the site was down")
    assert plan.steps[1].status == "skipped"
    lines = sections_of(plan_card(plan)[1])
    assert "skipped: the site was down" in lines
    # a later cancel does not hide the step's own reason, and says its own once
    cancelled = plan_card(cancel_plan(plan, "cancelled by <@U9>"))[1]
    assert "skipped: the site was down" in sections_of(cancelled)
    assert context_of(cancelled) == "cancelled by <@U9> · 1 of 5 done, 4 skipped"


reasons = st.text(alphabet=st.sampled_from("ab <>&@!|_*U1"), max_size=600)


@settings(max_examples=150, deadline=None)
@given(
    statuses=st.lists(st.sampled_from(STATUSES), min_size=1, max_size=50),
    title=st.text(alphabet=st.sampled_from("Tx <>&@!"), min_size=1, max_size=150),
    reason=reasons,
    stop=st.sampled_from(["none", "cancel", "cancel_by", "abort"]),
)
def test_any_card_counts_truly_escapes_and_fits(
    statuses: list[StepStatus], title: str, reason: str, stop: str
) -> None:
    steps = tuple(
        Step(
            index=i,
            title=title,
            assignee="researcher",
            status=status,
            failure_reason=reason or None,
            transient_failures=1 if status == "pending" else 0,
        )
        for i, status in enumerate(statuses, start=1)
    )
    plan = Plan(id=1, conversation_id=1, steps=steps)
    if stop == "cancel":
        plan = cancel_plan(plan, reason)
    elif stop == "cancel_by":
        plan = cancel_plan(plan, "cancelled by <@UMAYA1>")
    elif stop == "abort":
        plan = abort_plan(plan, reason)
    text, blocks = plan_card(plan, mentions={"researcher": "<@URES>"})
    as_dicts = dicts(blocks)

    assert len(as_dicts) <= 50
    shown = texts(blocks)
    assert all(len(t) <= 3000 for t in shown)
    for each in [text, *shown]:
        assert "<" not in LIVE.sub("", each) and ">" not in LIVE.sub("", each), each
    mentions = LIVE.findall(" ".join(shown))
    assert set(mentions) <= {"<@URES>", "<@UMAYA1>"}
    said = any(s.failure_reason == "cancelled: cancelled by <@UMAYA1>" for s in plan.steps)
    assert mentions.count("<@UMAYA1>") == (1 if said else 0)  # said once, if anything skipped
    done = sum(1 for s in plan.steps if s.status == "done")
    assert f"{done} of {len(statuses)} done" in context_of(blocks)
    skipped = sum(1 for s in plan.steps if s.status == "skipped")
    assert (f", {skipped} skipped" in context_of(blocks)) == (skipped > 0)


def test_the_commander_cannot_forge_who_cancelled() -> None:
    """A cancel the model asks for, with a reason shaped like a person's cancel, is shown as
    the commander's words: escaped, never a live mention."""
    now = datetime(2026, 12, 1, tzinfo=UTC)
    plan = Plan(
        id=7,
        conversation_id=1,
        steps=(Step(index=1, title="Research", assignee="researcher"),),
    )
    forged = CancelPlan(reason="cancelled by <@U0BOSS>")
    model = decide(plan, now, operations=[forged], assignees=["researcher"]).plan
    text, _blocks = plan_card(model)
    assert "<@U0BOSS>" not in text and "&lt;@U0BOSS&gt;" in text
    person = decide(plan, now, operations=[forged], assignees=["researcher"], actor="U0BOSS")
    assert "cancelled by <@U0BOSS>" in plan_card(person.plan)[0]


def test_the_card_opens_with_the_commanders_words_about_the_plan() -> None:
    plan = five("pending", "pending", "pending", "pending", "pending")
    text, blocks = plan_card(plan, intro="I'll compare <Acme> & Globex, then *draft*.")
    rendered = dicts(blocks)
    assert rendered[0]["type"] == "section" and rendered[1]["type"] == "header"
    said = str(rendered[0]["text"])
    assert "I'll compare &lt;Acme&gt; &amp; Globex, then *draft*." in said  # escaped, mrkdwn kept
    assert text.startswith("Plan (5 steps)") and text.endswith("then *draft*.")
    assert dicts(plan_card(plan, intro="   ")[1])[0]["type"] == "header"  # nothing said: no intro
    long_text, long_blocks = plan_card(plan, intro="x" * 5000)
    assert len(str(dicts(long_blocks)[0]["text"]["text"])) <= 3000  # type: ignore[index]


def test_a_plan_waiting_for_a_form_says_so_once() -> None:
    steps = (
        Step(index=1, title="Research", assignee="researcher", status="done"),
        Step(index=2, title="Which tiers?", assignee=USER, status="in_progress", wait_for=(1,)),
    )
    plan = Plan(id=3, conversation_id=1, steps=steps, status="paused")
    assert plan_status(plan) == "paused"  # what the transitions make of these steps
    now = datetime(2025, 1, 1, tzinfo=UTC)
    line = context_of(plan_card(plan, now=now)[1])
    assert line == "paused – waiting for a person · 1 of 2 done"
    assert line.count("waiting for a person") == 1
    running = five("done", "in_progress", "pending", "pending", "pending")
    assert context_of(plan_card(running, now=now)[1]).endswith(" · working")  # still said
