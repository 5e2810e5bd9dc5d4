"""The plan card: one Block Kit message per plan, edited in place as the plan moves.

Pure functions of the stored plan. Steps are packed several to a section so that even a
50-step plan stays within Slack's 50-blocks-per-message limit. Text that the model or people
typed (titles, reasons) is escaped for mrkdwn; only mentions Flotilla builds itself stay live.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

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

from flotilla.agents.planning.plan import COMMANDER, TERMINAL_PLAN, USER, Plan, Step
from flotilla.agents.planning.session_status import activity

SECTION_TEXT_MAX = 3000
REASON_MAX = 500  # a reason is a sentence; escaped it still fits a 3,000-character text
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
# The notes the pure plan transitions write into every step a cancel or an abort skipped
# (agents: cancel_plan / abort_plan); the card says the reason once instead.
CANCEL_NOTE = "cancelled: "
ABORT_NOTE = ("not run: the plan was aborted (", ")")
# The reason the card's Cancel button and `/flotilla cancel` give (bot/handlers.py, bot/admin.py).
CANCELLED_BY = re.compile(r"cancelled by <@([UW][A-Z0-9]+)>")


@dataclass(frozen=True)
class Stop:
    """Why a cancelled or aborted plan stopped, and the note it left on the steps it skipped."""

    line: str  # mrkdwn, said once on the card: "cancelled by <@U1>", "aborted: …"
    note: str | None  # the skipped steps' failure_reason (not repeated on their lines)


def stop_of(plan: Plan) -> Stop:
    """The card's status line; for a stopped plan, who or what stopped it (said once)."""
    status = PLAN_STATUS_TEXT[plan.status]
    if plan.status not in ("cancelled", "aborted"):
        return Stop(status, None)
    for step in plan.steps:
        note = step.failure_reason
        if step.status != "skipped" or not note:
            continue
        if plan.status == "cancelled" and note.startswith(CANCEL_NOTE):
            reason = note.removeprefix(CANCEL_NOTE)
            if CANCELLED_BY.fullmatch(reason):  # built by Flotilla: a live mention
                return Stop(reason, note)
            return Stop(f"{status}: {_escape(_short(reason))}", note)
        start, end = ABORT_NOTE
        if plan.status == "aborted" and note.startswith(start) and note.endswith(end):
            reason = note[len(start) : -len(end)]
            return Stop(f"{status}: {_escape(_short(reason))}", note)
    return Stop(status, None)  # nothing was left to skip: the reason was not recorded


def progress(plan: Plan) -> str:
    """How far the plan got: "2 of 5 done, 3 skipped" (zero counts other than done left out)."""
    done = sum(1 for s in plan.steps if s.status == "done")
    text = f"{done} of {len(plan.steps)} done"
    for status in ("failed", "skipped"):
        count = sum(1 for s in plan.steps if s.status == status)
        if count:
            text += f", {count} {status}"
    return text


def assignee_label(step: Step, mentions: Mapping[str, str], requester: str | None) -> str:
    """How the card names who does a step: an agent's mention, `you (form)`, or Flotilla."""
    if step.assignee == USER:
        return f"<@{requester}> (form)" if requester else "you (form)"
    if step.assignee == COMMANDER:
        return "Flotilla"
    return mentions.get(step.assignee, f"@{_escape(step.assignee)}")


def step_note(step: Step, plan: Plan, stop_note: str | None = None) -> str:
    """The short reason shown after a step (plain text): waiting, retrying, failed because …

    A step skipped by the plan's cancel or abort (`stop_note`) has none: the card says why once.
    """
    reason = _short(step.failure_reason) if step.failure_reason else None
    if step.status == "pending" and step.transient_failures:
        why = f": {reason}" if reason else ""
        return f"🔁 retrying ({step.transient_failures + 1}/{plan.max_transient_failures}){why}"
    if step.status == "in_progress" and step.index in plan.waits:
        return _short(plan.waits[step.index])  # "waiting: 3rd in line", "paused for urgent work"
    if step.status == "in_progress" and step.attempts > 1:
        return f"attempt {step.attempts}"
    if step.status == "failed":
        return f"failed: {reason or 'no reason given'}"
    if step.status == "skipped" and reason and step.failure_reason != stop_note:
        return f"skipped: {reason}"
    if step.status == "blocked" and step.question is not None:
        return f"waiting for an answer: {_short(step.question.text)}"
    return ""


def step_line(
    step: Step,
    plan: Plan,
    mentions: Mapping[str, str],
    requester: str | None,
    stop_note: str | None = None,
) -> str:
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
    note = step_note(step, plan, stop_note)
    if note:
        line += f"\n      _{_escape(note)}_"
    if step.output_files and step.status == "done":
        names = ", ".join(f"`{_escape(_short(name))}`" for name in step.output_files[:10])
        more = len(step.output_files) - 10
        line += f"\n      📎 {names}" + (f" and {more} more" if more > 0 else "")
    return line


def plan_card(
    plan: Plan,
    *,
    mentions: Mapping[str, str] | None = None,
    requester: str | None = None,
    now: datetime | None = None,
    intro: str = "",
) -> tuple[str, list[Block]]:
    """The card's fallback text and blocks; with `now`, what the plan is doing (the same
    state as the thread's session status). `intro`: the commander's words about the plan,
    which the card opens with (they are not posted as a message of their own)."""
    mentions = mentions or {}
    stop = stop_of(plan)
    title = f"Plan ({len(plan.steps)} steps)"
    text = f"{title} – {stop.line}, {progress(plan)}"
    blocks: list[Block] = []
    if intro.strip():
        text = f"{text}\n{intro.strip()[:SECTION_TEXT_MAX]}"  # as much as the card shows
        said = _escape(intro.strip())
        if len(said) > SECTION_TEXT_MAX:
            said = said[: SECTION_TEXT_MAX - 1] + "…"
        blocks.append(SectionBlock(text=MarkdownTextObject(text=said)))
    blocks.append(HeaderBlock(text=PlainTextObject(text=title, emoji=True)))
    lines = [step_line(s, plan, mentions, requester, stop.note) for s in plan.steps]
    blocks.extend(SectionBlock(text=MarkdownTextObject(text=chunk)) for chunk in _pack(lines))
    doing = ""
    if now is not None and plan.status not in TERMINAL_PLAN:
        said = activity(plan, now)
        # a paused plan's status already says "waiting for a person": not said twice
        doing = "" if said in stop.line else f" · {said}"
    blocks.append(
        ContextBlock(elements=[MarkdownTextObject(text=f"{stop.line} · {progress(plan)}{doing}")])
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


def _short(text: str) -> str:
    return text if len(text) <= REASON_MAX else text[: REASON_MAX - 1] + "…"


def _escape(text: str) -> str:
    """Slack's mrkdwn escaping: &, < and > only."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
