"""👍/👎 under an answer: Slack's feedback buttons in a context actions block, and what
their clicks carry (which plan, step and agent the answer was), as pure functions."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from slack_sdk.models.blocks import (
    ContextActionsBlock,
    ContextBlock,
    FeedbackButtonObject,
    FeedbackButtonsElement,
    MarkdownTextObject,
)

from flotilla.storage.records import FeedbackTotal

FEEDBACK_ACTION = "answer_feedback"
# the buttons rating another answer (an own-app agent's), under the commander's answer
RATING_ACTION_PREFIX = f"{FEEDBACK_ACTION}_on_step_"
FEEDBACK_ACTIONS = re.compile(rf"^{FEEDBACK_ACTION}(_on_step_\d{{1,4}})?$")
RATED_MAX = 5  # answers rated under one answer at most (two blocks each)
_VALUE = re.compile(r"(good|bad):(\d{1,12}):(\d{1,4}):([a-z0-9_-]{1,40})")


@dataclass(frozen=True, slots=True)
class FeedbackClick:
    """What a click on the feedback buttons says about which answer."""

    verdict: str  # "good" | "bad"
    plan_id: int
    step: int  # 0: the plan's final answer
    agent: str


def feedback_block(
    plan_id: int, step: int, agent: str, *, action_id: str = FEEDBACK_ACTION
) -> dict[str, Any]:
    """The buttons under the answer of `agent` to step `step` (0: the final answer)."""
    where = f"{plan_id}:{step}:{agent}"
    element = FeedbackButtonsElement(
        action_id=action_id,
        positive_button=FeedbackButtonObject(
            text="👍", value=f"good:{where}", accessibility_label="This answer helped"
        ),
        negative_button=FeedbackButtonObject(
            text="👎", value=f"bad:{where}", accessibility_label="This answer did not help"
        ),
    )
    return ContextActionsBlock(elements=[element]).to_dict()


def rating_blocks(plan_id: int, rated: Sequence[tuple[int, str, str]]) -> list[dict[str, Any]]:
    """Buttons for answers whose own message cannot carry them – an agent with its own Slack
    app posted them, and Slack sends a click to the app that posted – shown under the
    commander's answer built on them: for each (step, agent, mention) a line naming the
    answer, then its 👍/👎 (kept for that step and agent, like buttons under the answer)."""
    blocks: list[dict[str, Any]] = []
    for step, agent, mention in rated[:RATED_MAX]:
        line = f"{mention}'s answer (step {step}) – did it help?"
        blocks.append(ContextBlock(elements=[MarkdownTextObject(text=line[:3000])]).to_dict())
        action_id = f"{RATING_ACTION_PREFIX}{step}"
        blocks.append(feedback_block(plan_id, step, agent, action_id=action_id))
    return blocks


def parse_click(value: str) -> FeedbackClick | None:
    """The click's answer, or None for a value Flotilla did not write."""
    found = _VALUE.fullmatch(value)
    if found is None:
        return None
    verdict, plan_id, step, agent = found.groups()
    return FeedbackClick(verdict, int(plan_id), int(step), agent)


def feedback_text(totals: Sequence[FeedbackTotal]) -> str:
    """Feedback per agent, for `/flotilla usage` and App Home."""
    if not totals:
        return "*Feedback*: none yet."
    lines = [f"• {t.agent_name}: {t.good} 👍, {t.bad} 👎" for t in totals]
    return "*Feedback* (👍/👎 on answers)\n" + "\n".join(lines)
