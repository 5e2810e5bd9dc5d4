"""What a run's tools can see: the job, the stored thread, and what the run produced.

Every tool call has an idempotency key, `tool_call_key(run_key, tool_call_id)`: the same call
of the same run (run again after a crash, or retried) always has the same key, and no two calls
share one. Tools that reach other systems send it (`http_fetch` as an `Idempotency-Key`
header, MCP calls in the request's `_meta`), so a server can tell a repeat from a new call.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pydantic_ai import RunContext

from flotilla.agents.tools.file_policy import FilePolicy
from flotilla.agents.tools.journal import ResponseStores
from flotilla.agents.tools.net_guard import FetchPolicy
from flotilla.storage.db import Database
from flotilla.storage.records import MessageRecord

IDEMPOTENCY_HEADER = "Idempotency-Key"
# an MCP `_meta` key: prefixed, as the MCP spec asks of keys that are not its own
IDEMPOTENCY_META_KEY = "flotilla/idempotency-key"


def tool_call_key(run_key: str, tool_call_id: str) -> str:
    """The idempotency key of one tool call: a hash of the run key and the tool call id.

    Deterministic (no clock, no randomness): a call run again after a crash sends the same key.
    """
    digest = hashlib.sha256(f"{len(run_key)}:{run_key}:{tool_call_id}".encode()).hexdigest()
    return f"flotilla-{digest[:32]}"


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
    request_ts: str | None = None  # the request's message: its attachments go to every step


@dataclass(slots=True)
class RunDeps:
    """The per-run dependencies handed to tools (pydantic-ai `deps`)."""

    job: RunJob
    thread: list[MessageRecord] = field(default_factory=list)
    http_domains: tuple[str, ...] = ()
    # how `http_fetch` resolves and what it may reach: public addresses only unless a test says
    fetch_policy: FetchPolicy = field(default_factory=FetchPolicy)
    files: list[str] = field(default_factory=list)  # names of the files this run wrote
    db: Database | None = None  # where `write_file` records and `read_file` finds files
    file_policy: FilePolicy = field(default_factory=FilePolicy)
    # which media types (beyond text) the run's model reads as documents or images
    reads_media: Callable[[str], bool] = field(default=lambda _type: False)
    now: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    # the response stores of the calls running now, by tool call id (`ToolJournal`'s map)
    response_stores: ResponseStores = field(default_factory=dict)

    def tool_call_key(self, tool_call_id: str) -> str:
        """The idempotency key of a tool call of this run (see `tool_call_key`)."""
        return tool_call_key(self.job.run_key, tool_call_id)


def call_key(ctx: RunContext[RunDeps]) -> str:
    """The idempotency key of the tool call `ctx` belongs to."""
    if ctx.tool_call_id is None:
        raise ValueError("call_key is only known inside a tool call")
    return ctx.deps.tool_call_key(ctx.tool_call_id)
