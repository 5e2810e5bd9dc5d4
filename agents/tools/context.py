"""What a run's tools can see: the job, the stored thread, and what the run produced."""

from __future__ import annotations

from dataclasses import dataclass, field

from storage.records import MessageRecord


@dataclass(frozen=True, slots=True)
class RunJob:
    """Who runs what, and where the run's records go.

    `run_key` names the run's stored session, e.g. `plan:12:step:3:attempt:1`: running the
    same key again continues that session (after a crash or a block) instead of starting over.
    """

    run_key: str
    team_id: str
    input: str
    request: str = ""
    channel_id: str | None = None
    conversation_id: int | None = None
    plan_id: int | None = None
    step_index: int | None = None


@dataclass(slots=True)
class RunDeps:
    """The per-run dependencies handed to tools (pydantic-ai `deps`)."""

    job: RunJob
    thread: list[MessageRecord] = field(default_factory=list)
    http_domains: tuple[str, ...] = ()
    files: list[str] = field(default_factory=list)
