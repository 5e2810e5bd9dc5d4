"""Flotilla's core service: storage, the reconciler, the outbox and the jobs, wired to Slack.

One `Flotilla` per process. Listeners call its handlers (`bot/handlers.py`) after they
acked; the reconciler decides; the outbox delivers the decided effects through
`SlackPort` (`bot/port.py`); agent runs and commander turns run as jobs (`bot/work.py`)
with no lock held, and report their outcomes back to the reconciler.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic_ai.models import Model
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from agents.models import NO_KEYS, ProviderKeys, choose_model, resolve_model
from agents.outbox import OutboxSender
from agents.ports import Effect
from agents.reconciler import Reconciler
from agents.registry import seed_default_agents
from bot.identities import COMMANDER_NAME, Identity, Poster
from bot.jobs import Jobs
from bot.metrics import Metrics
from bot.secrets import TokenCipher
from storage.agents import get_agent, list_agents
from storage.conversations import find_conversation, get_conversation, store_message
from storage.db import Database
from storage.locks import ConversationLocks
from storage.outbox import next_effect_due
from storage.records import AgentRecord, ConversationRecord, MessageRecord
from storage.runs import claim_run, release_run, renew_run
from storage.workspaces import ensure_workspace, workspace_default_model

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]
# Slack keeps a message's text up to 40,000 characters; stay clear of it.
MESSAGE_TEXT_MAX = 39_000
OUTBOX_POLL_SECONDS = 5.0
# A run's lease (and its outbox row's): renewed every third of it while the run lives;
# after a crash another replica takes the run over once it expired.
RUN_LEASE = timedelta(minutes=2)
# a demoted admin loses admin rights within this many seconds
ADMIN_CACHE_SECONDS = 300.0


def utcnow() -> datetime:
    return datetime.now(UTC)


def fit_text(text: str, limit: int = MESSAGE_TEXT_MAX) -> str:
    """Text that Slack accepts: cut at the limit with a visible note."""
    if len(text) <= limit:
        return text
    return text[: limit - 40].rstrip() + "\n… (cut: the full text was too long)"


@dataclass(frozen=True, slots=True)
class Options:
    """What the service needs from the settings (read once in bot/)."""

    default_model: str = "offline"
    max_parallel: int = 1
    max_attempts: int = 3
    admin_user_ids: frozenset[str] = frozenset()
    # who may answer a form: the person who made the request (and admins), or anyone
    form_answerers: Literal["requester", "anyone"] = "requester"
    seed_agents: bool = True
    # model provider keys from the settings (environment or .env), passed explicitly
    provider_keys: ProviderKeys = NO_KEYS


class Flotilla:
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
        from bot.port import SlackPort  # the port calls back into this service

        self.db = db
        self.client = client
        self.poster = Poster(client, api_url)
        self.cipher = cipher
        self.options = options or Options()
        self.clock = clock
        self.model = model
        self.locks = ConversationLocks()
        self.reconciler = Reconciler(
            db, locks=self.locks, clock=clock, after_commit=self._after_commit
        )
        self.port = SlackPort(self)
        self.outbox = OutboxSender(
            db, self.port, clock=clock, on_retry_due=self._retry_due, locks=self.locks
        )
        self.metrics = Metrics()
        self.jobs = Jobs(running=self.metrics.jobs)
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.team_id = ""
        self.bot_user_id: str | None = None
        self.bot_id: str | None = None
        self._wake = asyncio.Event()
        self._draining = asyncio.Lock()  # one drain at a time in this process
        self._loop: asyncio.Task[None] | None = None
        self._conversations: dict[int, ConversationRecord] = {}
        self._admins: dict[str, tuple[bool, float]] = {}  # user -> (is admin, checked at)

    # --- lifecycle ----------------------------------------------------------------------

    async def start(self) -> None:
        """Learn who we are, seed the default agents, start delivering, recover runs."""
        auth = await self.client.auth_test()
        self.team_id = str(auth["team_id"])
        self.bot_user_id = auth.get("user_id")
        self.bot_id = auth.get("bot_id")
        async with self.db.write() as conn:
            first = await ensure_workspace(
                conn, self.team_id, self.clock(), name=auth.get("team", "")
            )
            if first and self.options.seed_agents:
                # only on first contact: agents an admin removed later never come back
                await seed_default_agents(conn, self.team_id, self.clock())
        # Work a dead process left (its rows' leases expired) is claimed again by this loop.
        self._loop = asyncio.create_task(self._deliver_forever(), name="outbox")

    async def stop(self) -> None:
        if self._loop is not None:
            self._loop.cancel()
            await asyncio.gather(self._loop, return_exceptions=True)
            self._loop = None
        await self.jobs.cancel()

    async def settle(self) -> None:
        """Deliver everything due and wait for every job (used by the demo and tests)."""
        while True:
            await self.drain()
            if not self.jobs.tasks:
                return
            await self.jobs.idle()

    async def drain(self) -> int:
        """Deliver what is due now; waits for a delivery already under way here."""
        async with self._draining:
            return await self.outbox.drain()

    def wake(self) -> None:
        """Look at the outbox now (after a commit, or when a timer may have come due)."""
        self._wake.set()

    async def _after_commit(self, effects: list[Effect]) -> None:
        self.wake()

    async def _retry_due(self, conversation_id: int) -> object:
        return await self.reconciler.reconcile(
            conversation_id, assignees=await self.enabled_names()
        )

    async def _deliver_forever(self) -> None:
        while True:
            self._wake.clear()
            try:
                await self.drain()
                async with self.db.read() as conn:
                    due = await next_effect_due(conn)
            except Exception:  # the loop must survive a database hiccup
                log.exception("outbox delivery failed; retrying")
                due = None
            timeout = OUTBOX_POLL_SECONDS
            if due is not None:
                timeout = min(timeout, max(0.0, (due - self.clock()).total_seconds()))
            with contextlib.suppress(TimeoutError):  # a timer came due: look again
                await asyncio.wait_for(self._wake.wait(), timeout)

    @asynccontextmanager
    async def run_lease(self, run_key: str, *, effect_key: str) -> AsyncIterator[bool]:
        """Hold the run's lease while the block runs, renewing it and the lease on the
        outbox row of `effect_key`; yields False when another process holds the run."""
        now = self.clock()
        async with self.db.write() as conn:
            mine = await claim_run(conn, run_key, self.owner, now=now, until=now + RUN_LEASE)
        if not mine:
            yield False
            return
        heartbeat = asyncio.create_task(self._renew(run_key, effect_key), name=f"lease:{run_key}")
        try:
            yield True
        finally:
            heartbeat.cancel()
            await asyncio.gather(heartbeat, return_exceptions=True)
            async with self.db.write() as conn:
                await release_run(conn, run_key, self.owner)

    async def _renew(self, run_key: str, effect_key: str) -> None:
        while True:
            await asyncio.sleep(RUN_LEASE.total_seconds() / 3)
            async with self.db.write() as conn:
                if not await renew_run(conn, run_key, self.owner, self.clock() + RUN_LEASE):
                    log.warning("lost the lease on %s (this process was too slow)", run_key)
                    return
            await self.outbox.hold(effect_key)

    # --- lookups ------------------------------------------------------------------------

    async def conversation(self, conversation_id: int) -> ConversationRecord:
        known = self._conversations.get(conversation_id)
        if known is None:
            async with self.db.read() as conn:
                known = await get_conversation(conn, conversation_id)
            self._conversations[conversation_id] = known
        return known

    async def find_conversation(self, channel: str, thread_ts: str) -> ConversationRecord | None:
        async with self.db.read() as conn:
            return await find_conversation(conn, self.team_id, channel, thread_ts)

    async def agent(self, name: str) -> AgentRecord | None:
        async with self.db.read() as conn:
            return await get_agent(conn, self.team_id, name)

    async def enabled_names(self) -> list[str]:
        async with self.db.read() as conn:
            return [a.name for a in await list_agents(conn, self.team_id, enabled_only=True)]

    async def agent_bot_ids(self) -> dict[str, str]:
        """bot id -> agent name, for agents with their own Slack app."""
        async with self.db.read() as conn:
            agents = await list_agents(conn, self.team_id)
        return {a.bot_id: a.name for a in agents if a.identity == "app" and a.bot_id}

    def identity_of(self, agent: AgentRecord) -> Identity:
        token = None
        if agent.identity == "app" and agent.bot_token_encrypted:
            from pydantic import SecretStr

            token = SecretStr(self.cipher.decrypt(agent.bot_token_encrypted))
        return Identity(
            name=agent.name,
            display_name=agent.display_name,
            icon=agent.icon,
            kind="app" if token is not None else "persona",
            bot_user_id=agent.bot_user_id,
            bot_id=agent.bot_id,
            token=token,
        )

    async def identities(self) -> dict[str, Identity]:
        """Every agent's identity, in one query (for the plan card)."""
        async with self.db.read() as conn:
            agents = await list_agents(conn, self.team_id)
        return {agent.name: self.identity_of(agent) for agent in agents}

    async def identity(self, name: str) -> Identity:
        """How to post as (and mention) an agent; a removed agent still gets a persona."""
        agent = await self.agent(name)
        if agent is None:
            return Identity(name=name, display_name=name)
        return self.identity_of(agent)

    async def model_for(self, agent_model: str | None) -> Model:
        if self.model is not None:
            return self.model
        async with self.db.read() as conn:
            workspace_default = await workspace_default_model(conn, self.team_id)
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
        self._admins[user_id] = (is_admin, time.monotonic())
        return is_admin

    # --- posting ------------------------------------------------------------------------

    async def say(
        self,
        conversation: ConversationRecord,
        text: str,
        *,
        identity: Identity | None = None,
        blocks: list[dict[str, Any]] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> str:
        """Post in the conversation's thread and keep the message for later turns' context.

        Our own posts do not come back as events to this app (Bolt drops self events),
        so they are stored here.
        """
        text = fit_text(text)
        ts = await self.poster.post(
            channel=conversation.channel_id,
            thread_ts=conversation.thread_ts,
            text=text,
            identity=identity,
            blocks=blocks,
            metadata=metadata,
        )
        author = identity.display_name if identity is not None else COMMANDER_NAME
        record = MessageRecord(
            channel_id=conversation.channel_id,
            ts=ts,
            user_id=identity.bot_user_id if identity is not None else self.bot_user_id,
            bot_id=identity.bot_id if identity is not None else self.bot_id,
            author_name=author,
            text=text,
            metadata=metadata,
        )
        async with self.db.write() as conn:
            await store_message(conn, conversation.id, record, self.clock())
        return ts

    async def thread_has_key(self, conversation: ConversationRecord, key: str) -> bool:
        """Whether a message carrying this idempotency key is in the thread (recovery only)."""
        response = await self.client.conversations_replies(
            channel=conversation.channel_id,
            ts=conversation.thread_ts,
            include_all_metadata=True,
            limit=200,
        )
        async for page in response:  # slack_sdk follows next_cursor page by page
            for message in page.get("messages") or []:
                payload = (message.get("metadata") or {}).get("event_payload") or {}
                if payload.get("key") == key:
                    return True
        return False
