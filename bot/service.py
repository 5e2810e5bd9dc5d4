"""Flotilla's service: one per process, wiring storage, the reconciler and the executor
to Slack, and owning their lifecycle.

Listeners (`bot/listeners/`) call `bot/handlers.py` after they acked; handlers hand work
to the reconciler; the executor (`agents/delivering/executor.py`) performs what it decided – posts
through `SlackPort` (`bot/slack_port.py`), runs agents and commander turns.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

from pydantic_ai.models import Model
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from flotilla.agents.core.clock import Clock, utcnow
from flotilla.agents.core.lru import LRUCache
from flotilla.agents.core.retry_policy import RetryPolicies
from flotilla.agents.delivering.executor import Executor
from flotilla.agents.planning.plan import Plan
from flotilla.agents.planning.plan_store import plan_from_rows
from flotilla.agents.reconciling.reconciler import Reconciler
from flotilla.agents.running.models import NO_KEYS, ProviderKeys, choose_model, resolve_model
from flotilla.agents.running.run_context import Context, ExecutorOptions
from flotilla.agents.scheduling.admission_policy import SchedulerOptions
from flotilla.agents.scheduling.roster import Roster
from flotilla.agents.tools.file_policy import FilePolicy
from flotilla.agents.tools.registry import seed_default_agents
from flotilla.bot.channel_pacing import ChannelPacer
from flotilla.bot.identities import Identity, Poster
from flotilla.bot.metrics import Metrics, meter
from flotilla.bot.secrets import TokenCipher
from flotilla.bot.slack_port import SlackPort
from flotilla.storage.agents import get_agent
from flotilla.storage.conversations import find_conversation
from flotilla.storage.db import Database
from flotilla.storage.locks import ConversationLocks
from flotilla.storage.plans import load_latest_plan
from flotilla.storage.records import AgentRecord, ConversationRecord
from flotilla.storage.workspaces import ensure_workspace

log = logging.getLogger(__name__)

# a demoted admin loses admin rights within this many seconds
ADMIN_CACHE_SECONDS = 300.0


@dataclass(frozen=True, slots=True)
class Options:
    """What the service needs from the settings (read once in bot/)."""

    default_model: str = "offline"
    max_parallel: int = 1
    retry: RetryPolicies = field(default_factory=RetryPolicies)  # FLOTILLA_RETRY_*
    admin_user_ids: frozenset[str] = frozenset()
    # who may answer a form: the person who made the request (and admins), or anyone
    form_answerers: Literal["requester", "anyone"] = "requester"
    seed_agents: bool = True
    admin_cache_size: int = 1000  # people whose admin status is remembered (bounded)
    lease_seconds: float = 30.0
    heartbeat_seconds: float = 5.0
    # a stored request (click, submission, command) not processed this long after it came
    # is replayed by the inbox's recovery pass (its first handling was cut short)
    inbox_claim_seconds: float = 60.0
    # seconds between two appends to one streamed answer (chat.appendStream is tier 4)
    stream_append_seconds: float = 1.5
    # new messages per second per channel, sustained (None: not paced), and the burst allowed
    channel_posts_per_second: float | None = None
    channel_post_burst: int = 2
    # the plan also as Slack's native plan display (a task stream) where the workspace has it
    native_plan_display: bool = False
    # model provider keys from the settings (environment or .env), passed explicitly
    provider_keys: ProviderKeys = NO_KEYS
    files: FilePolicy = field(default_factory=FilePolicy)  # what attachments are taken, kept
    # where attachments may be fetched with the bot token (Slack's file host)
    file_origins: tuple[str, ...] = ("https://files.slack.com",)
    scheduler: SchedulerOptions = field(default_factory=SchedulerOptions)  # admission control


class MetricsObserver:
    """The executor's telemetry, recorded in Prometheus metrics."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def queued(self, seconds: float) -> None:
        self.metrics.queue_seconds.observe(seconds)

    def ran(self, agent: str, seconds: float) -> None:
        self.metrics.run_seconds.labels(agent).observe(seconds)

    def dispatched(self, kind: str) -> None:
        self.metrics.dispatches.labels(kind).inc()

    def outcome(self, kind: str) -> None:
        self.metrics.outcomes.labels(kind).inc()

    def commander_turn(self, result: str) -> None:
        self.metrics.commander_turns.labels(result).inc()

    def jobs_running(self, count: int) -> None:
        self.metrics.jobs.set(count)


@dataclass(slots=True)
class EventTasks:
    """Listener work started after the ack (bounded by Slack's event rate), tracked so
    `settle()` and `stop()` can wait for it."""

    tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def start(self, work: Callable[[], Awaitable[None]]) -> None:
        async def guarded() -> None:
            try:
                await work()
            except Exception:  # an event's failure must not vanish silently
                log.exception("handling an event failed")

        task = asyncio.create_task(guarded())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def idle(self) -> None:
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)


class SlackService:
    """The service behind the Slack app of one workspace."""

    def __init__(
        self,
        db: Database,
        client: AsyncWebClient,
        *,
        api_url: str,
        cipher: TokenCipher,
        options: Options | None = None,
        clock: Clock = utcnow,
        model: Model | None = None,
    ) -> None:
        """`model`, when given, runs every turn and step (tests script it); otherwise the
        model string is chosen per agent, workspace default, then `options.default_model`."""
        self.db = db
        self.client = client
        self.cipher = cipher
        self.options = options or Options()
        self.clock = clock
        self.model = model
        self.metrics = Metrics()
        # every Web API call is counted: the commander's and each agent app's
        meter(client, self.metrics)
        pacer = ChannelPacer(self.options.channel_posts_per_second, self.options.channel_post_burst)
        self.poster = Poster(
            client, api_url, on_client=lambda made: meter(made, self.metrics), pacer=pacer
        )
        self.locks = ConversationLocks()
        self.reconciler = Reconciler(
            db,
            locks=self.locks,
            clock=clock,
            after_commit=self._after_commit,
            step_retry=self.options.retry.step,
        )
        self.port = SlackPort(
            db, client, self.poster, cipher, clock, file_origins=self.options.file_origins
        )
        self.port.stream_interval = self.options.stream_append_seconds
        self.port.plan_display.enabled = self.options.native_plan_display
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.context = Context(
            db=db,
            reconciler=self.reconciler,
            port=self.port,
            choose_model=self.model_for,
            clock=clock,
            options=ExecutorOptions(
                max_parallel=self.options.max_parallel,
                retry=self.options.retry,
                lease=timedelta(seconds=self.options.lease_seconds),
                heartbeat=timedelta(seconds=self.options.heartbeat_seconds),
                files=self.options.files,
                scheduler=self.options.scheduler,
            ),
            observer=MetricsObserver(self.metrics),
            roster=self.port.roster,
        )
        self.executor = Executor(self.context, owner=self.owner)
        self.events = EventTasks()
        # the inbox's recovery pass, given by the Bolt app (bot/app.py); run every few seconds
        self.replay_inbox: Callable[[], Awaitable[int]] | None = None
        self._recovery: asyncio.Task[None] | None = None
        self._started = False
        # user -> (is admin, checked at); bounded: every person who clicks an admin button
        self._admins: LRUCache[str, tuple[bool, float]] = LRUCache(self.options.admin_cache_size)

    @property
    def team_id(self) -> str:
        return self.context.team_id

    @property
    def bot_user_id(self) -> str | None:
        return self.port.bot_user_id

    @property
    def bot_id(self) -> str | None:
        return self.port.bot_id

    # --- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Learn who we are, seed the default agents, start delivering."""
        auth = await self.client.auth_test()
        team_id = str(auth["team_id"])
        self.context.team_id = self.port.team_id = team_id
        self.port.bot_user_id = auth.get("user_id")
        self.port.bot_id = auth.get("bot_id")
        async with self.db.write() as conn:
            first = await ensure_workspace(conn, team_id, self.clock(), name=auth.get("team", ""))
            if first and self.options.seed_agents:
                # only on first contact: agents an admin removed later never come back
                await seed_default_agents(conn, team_id, self.clock())
            await self.port.features.read_in(conn, team_id)  # kept for the process's life
        self.executor.start()
        self._started = True
        self._start_recovery()

    def recover_inbox_with(self, replay: Callable[[], Awaitable[int]]) -> None:
        """The inbox's recovery pass (it needs the Bolt app); run from now on while serving."""
        self.replay_inbox = replay
        self._start_recovery()

    def _start_recovery(self) -> None:
        if self._started and self.replay_inbox is not None and self._recovery is None:
            self._recovery = asyncio.create_task(self._recover_forever(), name="inbox-recovery")

    async def _recover_forever(self) -> None:
        """Replay stored requests whose handling was cut short, now and every quarter of
        their claim (a database outage ends one pass, not the loop)."""
        while self.replay_inbox is not None:
            try:
                await self.replay_inbox()
            except Exception as exc:
                log.warning("the inbox's recovery pass failed: %s", exc)
            await asyncio.sleep(self.options.inbox_claim_seconds / 4)  # the loop's period

    async def stop(self, grace: float = 0.0) -> list[str]:
        """Stop delivering; finish in-flight work within `grace` seconds, hand the rest
        over to other processes at once. Returns the keys handed over."""
        if self._recovery is not None:
            self._recovery.cancel()
            await asyncio.gather(self._recovery, return_exceptions=True)
        handed = await self.executor.stop(grace)
        await asyncio.gather(*list(self.events.tasks), return_exceptions=True)
        return handed

    async def settle(self) -> None:
        """Deliver everything due and wait for every job (used by the demo and tests)."""
        while True:
            await self.events.idle()
            await self.executor.settle()
            if not self.events.tasks and not self.executor.jobs:
                return

    async def quiet(self) -> None:
        """`settle` reading nothing to find more work: until no event handler and no job
        runs and nothing handed over is undelivered (`Executor.quiet`; benchmarks)."""
        while True:
            await self.events.idle()
            await self.executor.quiet()
            if not self.events.tasks and not self.executor.jobs:
                return

    async def drain(self) -> int:
        return await self.executor.drain()

    def wake(self) -> None:
        self.executor.wake()

    async def _after_commit(self, effects: list[Any]) -> None:
        self.wake()

    # --- lookups ------------------------------------------------------------------------

    async def conversation(self, conversation_id: int) -> ConversationRecord:
        return await self.context.conversation(conversation_id)

    async def find_conversation(self, channel: str, thread_ts: str) -> ConversationRecord | None:
        """A thread's conversation (kept in memory once found: see `Context.threads`)."""
        return await self.context.find_conversation(channel, thread_ts)

    async def find_plan(
        self, channel: str, thread_ts: str
    ) -> tuple[ConversationRecord | None, Plan | None]:
        """A thread's conversation (read only when not kept) and its newest plan as stored,
        in one read (none on SQLite when both are kept: `agents.running.plan_reads.remembered`)."""
        known = self.context.known_conversation(channel, thread_ts)
        if known is not None and self.db.is_sqlite:
            remembered = self.context.reconciler.remembered(known.id)  # the newest, written here
            if remembered is not None:
                return known, remembered
        async with self.db.read() as conn:
            conversation = known or await find_conversation(conn, self.team_id, channel, thread_ts)
            if conversation is None:
                return None, None
            loaded = await conn.run_sync(load_latest_plan, conversation.id)
        if known is None:
            self.context.remember(conversation)
        plan = plan_from_rows(loaded.plan, loaded.steps or []) if loaded is not None else None
        return conversation, plan

    async def agent(self, name: str) -> AgentRecord | None:
        async with self.db.read() as conn:
            return await get_agent(conn, self.team_id, name)

    @property
    def roster(self) -> Roster:
        """The agents as last read (see `agents.scheduling.roster`); admins' changes `forget` it."""
        return self.context.agents

    async def enabled_names(self) -> list[str]:
        return await self.roster.enabled_names()

    async def agent_bot_ids(self) -> dict[str, str]:
        """bot id -> agent name, for agents with their own Slack app."""
        agents = (await self.roster.agents()).values()
        return {a.bot_id: a.name for a in agents if a.identity == "app" and a.bot_id}

    async def identity(self, name: str) -> Identity:
        return await self.port.identity(name)

    async def model_for(self, agent_model: str | None) -> Model:
        if self.model is not None:
            return self.model
        workspace_default = await self.roster.default_model()
        return resolve_model(
            choose_model(agent_model, workspace_default, self.options.default_model),
            self.options.provider_keys,
        )

    async def is_admin(self, user_id: str) -> bool:
        """Workspace admins and owners (users.info), or the configured allow-list."""
        if user_id in self.options.admin_user_ids:
            return True
        known = self._admins.get(user_id)
        if known is not None and time.monotonic() - known[1] < ADMIN_CACHE_SECONDS:
            return known[0]
        try:
            info = await self.client.users_info(user=user_id)
        except SlackApiError:
            return False
        user = info.get("user") or {}
        is_admin = bool(user.get("is_admin") or user.get("is_owner"))
        self._admins.put(user_id, (is_admin, time.monotonic()))
        return is_admin

    async def say(self, conversation: ConversationRecord, text: str, **kwargs: Any) -> str:
        """Post in the conversation's thread as the commander (see `SlackPort.say`)."""
        return await self.port.say(conversation, text, **kwargs)
