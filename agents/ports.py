"""The narrow port through which the orchestrator causes side effects.

The reconciler never posts anything itself: it decides `Effect`s, which are stored in the
outbox in the same transaction as the state change and performed after commit through a
`SideEffectPort` (the Slack layer implements it; tests use a recording one). Delivery is
at least once, so the port also answers "did this already happen?" – e.g. a message
carrying the effect's idempotency key in its metadata is already in the thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from agents.plan import Plan

EffectKind = Literal[
    "post_dispatch",  # the commander posts `@agent <rendered input>` in the thread
    "show_form",  # a user step: a Block Kit form in the thread (the plan pauses)
    "wake_commander",  # an internal commander turn: its own step, a failure, the plan's end
    "ask_user",  # a blocked step's question (or form) for a person
    "resume_step",  # a blocked step's answer: resume the same run with it
    "update_plan_card",  # re-render the plan card (coalesced: at most one pending per plan)
    "retry_due",  # a timer: reconcile the conversation when a backoff has passed
    "commander_turn",  # a person's message for the commander (a request or an interjection)
]


class Delivery(Enum):
    """What `perform` did. `IN_PROGRESS`: it started long work (an agent run, a commander
    turn) that settles the effect itself (`OutboxSender.finish`); until then the outbox row
    stays claimed, its lease renewed by the work, so a crash hands it to another process."""

    DONE = "done"
    IN_PROGRESS = "in_progress"


@dataclass(frozen=True, slots=True)
class Effect:
    """One side effect, identified by a key that is unique for ever (the outbox's key).

    Keys: `plan:P:step:N:attempt:A` for a dispatch, with a suffix for the other effects of
    that attempt (`:failed`, `:question:R`, `:answer:R`, `:retry`); `plan:P:card:vV` for a
    card refresh; `plan:P:finished`. `payload` carries `plan_id`, `step` and `attempt`
    (the metadata a posted message must carry so any replica can tie it to its step).
    """

    key: str
    kind: EffectKind
    conversation_id: int
    payload: dict[str, Any]
    available_at: datetime | None = None  # not before this time (timers); None = at once
    plan: Plan | None = field(default=None, compare=False)  # fresh snapshot, for the card
    created_at: datetime | None = field(default=None, compare=False)  # decided at (metrics)
    delivery: int = field(default=1, compare=False)  # 2+: claimed before, may have happened


class SideEffectPort(Protocol):
    """What the Slack layer implements for the orchestrator."""

    async def perform(self, effect: Effect) -> Delivery | None:
        """Perform the effect (None means DONE); raise `TransientError` to retry it later."""
        ...

    async def already_performed(self, effect: Effect) -> bool:
        """True when the effect demonstrably happened (asked on redelivery only)."""
        ...
