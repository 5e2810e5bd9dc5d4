"""The plan card: one Block Kit message per plan, edited in place as the plan moves.

Pure functions of the stored plan. Steps are packed several to a section so that even a
50-step plan stays within Slack's 50-blocks-per-message limit.
"""

from __future__ import annotations

from collections.abc import Mapping

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ConfirmObject,
    ContextBlock,
    HeaderBlock,
    MarkdownTextObject,
    PlainTextObject,
    SectionBlock,
)

from agents.plan import COMMANDER, TERMINAL_PLAN, USER, Plan, Step

SECTION_TEXT_MAX = 3000
CANCEL_ACTION = "flotilla_plan_cancel"

STATUS_ICON = {
    "pending": "⏸",
    "in_progress": "⏳",
    "done": "✅",
    "failed": "❌",
    "skipped": "⏭",
    "blocked": "✋",
}
PLAN_STATUS_TEXT = {
    "running": "running",
    "paused": "paused – waiting for a person",
    "completed": "completed",
    "aborted": "aborted",
    "cancelled": "cancelled",
}


def assignee_label(step: Step, mentions: Mapping[str, str], requester: str | None) -> str:
    """How the card names who does a step: an agent's mention, `you (form)`, or Flotilla."""
    if step.assignee == USER:
        return f"<@{requester}> (form)" if requester else "you (form)"
    if step.assignee == COMMANDER:
        return "Flotilla"
    return mentions.get(step.assignee, f"@{step.assignee}")


def step_note(step: Step, plan: Plan) -> str:
    """The short reason shown after a step: waiting, retrying, failed because …"""
    if step.status == "pending" and step.transient_failures:
        why = f": {step.failure_reason}" if step.failure_reason else ""
        return f"🔁 retrying ({step.transient_failures + 1}/{plan.max_attempts}){why}"
    if step.status == "in_progress" and step.attempts > 1:
        return f"attempt {step.attempts}"
    if step.status == "failed":
        return f"failed: {step.failure_reason or 'no reason given'}"
    if step.status == "skipped" and step.failure_reason:
        return f"skipped: {step.failure_reason}"
    if step.status == "blocked" and step.question is not None:
        return f"waiting for an answer: {step.question.text}"
    return ""


def step_line(step: Step, plan: Plan, mentions: Mapping[str, str], requester: str | None) -> str:
    icon = STATUS_ICON.get(step.status, "•")
    parts = [
        f"{step.index} {icon} *{_escape(step.title)}*",
        assignee_label(step, mentions, requester),
    ]
    if step.wait_for:
        parts.append("after " + ", ".join(str(i) for i in step.wait_for))
    elif step.index > 1:
        parts.append("(no deps)")
    line = "  ·  ".join(parts)
    note = step_note(step, plan)
    if note:
        line += f"\n      _{_escape(note)}_"
    return line


def plan_card(
    plan: Plan, *, mentions: Mapping[str, str] | None = None, requester: str | None = None
) -> tuple[str, list[Block]]:
    """The card's fallback text and blocks."""
    mentions = mentions or {}
    done = sum(1 for s in plan.steps if s.status in ("done", "skipped"))
    title = f"Plan ({len(plan.steps)} steps)"
    text = f"{title} – {PLAN_STATUS_TEXT[plan.status]}, {done}/{len(plan.steps)} finished"
    blocks: list[Block] = [HeaderBlock(text=PlainTextObject(text=title, emoji=True))]
    lines = [step_line(s, plan, mentions, requester) for s in plan.steps]
    blocks.extend(SectionBlock(text=MarkdownTextObject(text=chunk)) for chunk in _pack(lines))
    blocks.append(
        ContextBlock(
            elements=[
                MarkdownTextObject(
                    text=f"{PLAN_STATUS_TEXT[plan.status]} · {done}/{len(plan.steps)} finished"
                )
            ]
        )
    )
    if plan.status not in TERMINAL_PLAN:
        blocks.append(
            ActionsBlock(
                block_id=f"plan:{plan.id}",
                elements=[
                    ButtonElement(
                        text="Cancel plan",
                        action_id=CANCEL_ACTION,
                        value=str(plan.id),
                        style="danger",
                        confirm=ConfirmObject(
                            title="Cancel this plan?",
                            text="Steps not yet finished will not run.",
                            confirm="Cancel plan",
                            deny="Keep going",
                        ),
                    )
                ],
            )
        )
    return text, blocks


def _pack(lines: list[str]) -> list[str]:
    """Join lines into as few section texts as fit Slack's 3,000-character limit."""
    chunks: list[str] = []
    current = ""
    for line in lines:
        line = line[: SECTION_TEXT_MAX - 1]
        candidate = f"{current}\n{line}" if current else line
        if len(candidate) > SECTION_TEXT_MAX:
            chunks.append(current)
            candidate = line
        current = candidate
    if current:
        chunks.append(current)
    return chunks


def _escape(text: str) -> str:
    """Slack's mrkdwn escaping: &, < and > only."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
