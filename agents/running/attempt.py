"""One attempt of one step (or one commander turn), as its job claimed it.

A job creates its `Attempt` the moment its claim succeeded and hands it to its work; the
work passes it on – to the agent run (how it yields at a model-turn boundary) and to the
report of its outcome (how it settles in that reconcile) – as an argument, never through a
context variable. It is frozen: what changes while the attempt runs lives in the two
helpers it carries (`TurnBoundary`, `Settling`), each owned by one module.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from flotilla.agents.running.job_settling import Settling
from flotilla.agents.running.preemption import TurnBoundary


@dataclass(frozen=True, slots=True)
class Attempt:
    """Who runs what under which lease: one claimed attempt of a step or a commander turn."""

    key: str  # the outbox row its job holds (the effect that started it)
    run_key: str  # its lease: the run request it was granted, or the run's own lease
    plan_id: int | None
    step: int | None
    attempt: int | None
    conversation_id: int | None
    # a scheduled run's way of giving its slot to urgent work at a model-turn boundary
    yields: TurnBoundary | None = None
    # a scheduled run's settle, made in the transaction of its outcome's reconcile
    settles: Settling | None = None


# a job's work, given the attempt its claim made
Work = Callable[[Attempt], Awaitable[None]]
