"""👍/👎 under an answer: Slack's feedback buttons in a context actions block, and what
their clicks carry (which plan, step and agent the answer was), as pure functions."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from slack_sdk.models.blocks import (
    ContextActionsBlock,
    FeedbackButtonObject,
    FeedbackButtonsElement,
)

from storage.records import FeedbackTotal

FEEDBACK_ACTION = "answer_feedback"
_VALUE = re.compile(r"(good|bad):(\d{1,12}):(\d{1,4}):([a-z0-9_-]{1,40})")


@dataclass(frozen=True, slots=True)
class FeedbackClick:
    """What a click on the feedback buttons says about which answer."""

    verdict: str  # "good" | "bad"
    plan_id: int
    step: int  # 0: the plan's final answer
    agent: str


def feedback_block(plan_id: int, step: int, agent: str) -> dict[str, Any]:
    """The buttons under the answer of `agent` to step `step` (0: the final answer)."""
    where = f"{plan_id}:{step}:{agent}"
    element = FeedbackButtonsElement(
        action_id=FEEDBACK_ACTION,
        positive_button=FeedbackButtonObject(
            text="👍", value=f"good:{where}", accessibility_label="This answer helped"
        ),
        negative_button=FeedbackButtonObject(
            text="👎", value=f"bad:{where}", accessibility_label="This answer did not help"
        ),
    )
    return ContextActionsBlock(elements=[element]).to_dict()


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
