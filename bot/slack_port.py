"""`SlackPort`: the executor's posts, edits and thread look-ups, performed in Slack.

It implements `agents.reconciling.ports.SlackPort`: renders Block Kit, chooses the identity to post
as, and turns Slack's errors into `TransientError` (try again) or `PostingRefused` (a
sentence). Every message Flotilla posts for a step carries its key in the metadata, so
after a crash `thread_has_key` can look in the thread instead of posting twice – and it
counts only Flotilla's own messages: another app's message with the same key never
silences a post. A step's dispatch message and forms: `bot/step_messages.py`; files:
`bot/slack_files.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from slack_sdk.web.async_client import AsyncWebClient

from flotilla.agents.core.lru import LRUCache
from flotilla.agents.planning.effects import card_message_key
from flotilla.agents.planning.plan import Plan
from flotilla.agents.planning.session_status import SessionStatus, activity, session_status
from flotilla.agents.reconciling.ports import StepTag
from flotilla.agents.scheduling.roster import Roster
from flotilla.bot.answer_ratings import own_app_ratings
from flotilla.bot.answer_stream import STREAMING_MARK, SlackAnswerStream
from flotilla.bot.identities import COMMANDER_NAME, Identity, Poster, identity_of
from flotilla.bot.listeners.payloads import (
    FLOTILLA_EVENTS,
    NOTICE_EVENT,
    RESULT_EVENT,
    step_metadata,
)
from flotilla.bot.plan_display import PlanDisplay
from flotilla.bot.secrets import TokenCipher
from flotilla.bot.session_statuses import SessionStatuses
from flotilla.bot.slack_errors import slack_call
from flotilla.bot.slack_features import SlackFeatures
from flotilla.bot.slack_files import FileTransfers
from flotilla.bot.step_messages import StepMessages, fit_text, payload_of
from flotilla.bot.views.plan_card import plan_card
from flotilla.storage.conversations import store_message, thread_messages, update_message
from flotilla.storage.db import Database
from flotilla.storage.plans import PlanCard, claim_plan_card, take_card_post, take_or_read_card
from flotilla.storage.plans import plan_card as plan_card_of
from flotilla.storage.records import ConversationRecord, MessageRecord

CARD_CACHE_SIZE = 1000  # plans whose card message this process knows


class SlackPort(StepMessages, FileTransfers):
    """Implements `agents.reconciling.ports.SlackPort` for Slack (or the local workspace)."""

    def __init__(
        self,
        db: Database,
        client: AsyncWebClient,
        poster: Poster,
        cipher: TokenCipher,
        clock: Callable[[], datetime],
        *,
        file_origins: tuple[str, ...] = ("https://files.slack.com",),
    ) -> None:
        self.db = db
        self.file_origins = file_origins
        self.clock = clock
        self.client = client
        self.poster = poster
        self.cipher = cipher
        self.team_id = ""
        self.bot_user_id: str | None = None
        self.bot_id: str | None = None
        self.roster = Roster(db, lambda: self.team_id)  # the service's Context shares it
        self._cards: LRUCache[int, PlanCard] = LRUCache(CARD_CACHE_SIZE)  # plan id -> card
        # plan id -> the wait notes its card shows (edited for them beside a native display)
        self._card_waits: LRUCache[int, tuple[tuple[int, str], ...]] = LRUCache(CARD_CACHE_SIZE)
        self.features = SlackFeatures(db, clock)
        self.statuses = SessionStatuses(client, self.features, lambda: self.team_id)
        self.plan_display = PlanDisplay(self)
        self.stream_interval = 1.5  # seconds between two appends to one streamed answer

    # --- identities ---------------------------------------------------------------------

    async def identity(self, name: str) -> Identity:
        """How to post as (and mention) an agent; a removed agent still gets a persona."""
        agent = await self.roster.agent(name)
        return identity_of(agent, self.cipher) if agent else Identity(name=name, display_name=name)

    async def identities(self) -> dict[str, Identity]:
        """Every agent's identity (for the plan card)."""
        agents = await self.roster.agents()
        return {name: identity_of(agent, self.cipher) for name, agent in agents.items()}

    # --- posting ------------------------------------------------------------------------

    async def say(
        self,
        conversation: ConversationRecord,
        text: str,
        *,
        agent: str | None = None,
        result_of: StepTag | None = None,
        key: str | None = None,
        blocks: list[dict[str, Any]] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> str:
        """Post in the thread (as the commander or `agent`) and keep the message for later
        turns' context (`keep_message`)."""
        identity = await self.identity(agent) if agent else None
        if metadata is None and key is not None:
            if result_of is not None:
                metadata = step_metadata(RESULT_EVENT, result_of, key)
            else:
                metadata = {"event_type": NOTICE_EVENT, "event_payload": {"key": key}}
        message = await self.post_unkept(
            conversation, text, identity=identity, blocks=blocks, metadata=metadata
        )
        await self.keep_message(conversation, message)
        return message.ts

    async def post_unkept(
        self,
        conversation: ConversationRecord,
        text: str,
        *,
        identity: Identity | None = None,
        blocks: list[dict[str, Any]] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> MessageRecord:
        """Post in the thread (as the commander or `identity`) and return the message to
        keep, not kept yet: the caller stores it in a transaction it makes anyway (a step's
        dispatch message: with its run's claim, `claim_slot`)."""
        text = fit_text(text)
        ts = await self._post(conversation, text, identity, blocks, metadata)
        return self.message(conversation, ts, text, identity, metadata)

    def message(
        self,
        conversation: ConversationRecord,
        ts: str,
        text: str,
        identity: Identity | None,
        metadata: dict[str, Any] | None,
    ) -> MessageRecord:
        """A message Flotilla posted (as the commander or `identity`), as it is kept."""
        return MessageRecord(
            channel_id=conversation.channel_id,
            ts=ts,
            user_id=identity.bot_user_id if identity is not None else self.bot_user_id,
            bot_id=identity.bot_id if identity is not None else self.bot_id,
            author_name=identity.display_name if identity is not None else COMMANDER_NAME,
            text=text,
            metadata=metadata,
        )

    async def keep(
        self,
        conversation: ConversationRecord,
        ts: str,
        text: str,
        identity: Identity | None,
        metadata: dict[str, Any] | None,
    ) -> None:
        """Store a message Flotilla posted (as the commander or `identity`). Its own event
        may have stored it first, without what only Flotilla knows – a streamed answer's
        event carries no metadata, so the mark that finds it after a stop would be lost:
        then this text and metadata replace the event's."""
        await self.keep_message(
            conversation, self.message(conversation, ts, text, identity, metadata)
        )

    async def keep_message(self, conversation: ConversationRecord, message: MessageRecord) -> None:
        """`keep` for a message as `message` builds it (posted by `post_unkept`)."""
        async with self.db.write() as conn:
            if not await store_message(conn, conversation.id, message, self.clock()):
                await update_message(
                    conn,
                    message.channel_id,
                    message.ts,
                    text=message.text,
                    metadata=message.metadata,
                )

    async def open_answer(
        self,
        conversation: ConversationRecord,
        *,
        agent: str | None,
        result_of: StepTag | None,
        key: str,
        plan_id: int,
        thread: list[MessageRecord] | None = None,
        plan: Plan | None = None,
    ) -> SlackAnswerStream:
        """A stream for the answer carrying `key` (see `bot/answer_stream.py`); `thread`:
        the thread's stored messages as just read (else read here); `plan`: the plan as the
        caller just read it (else read here if the answer rates own-app agents' answers)."""
        identity = await self.identity(agent) if agent else None
        messages = thread
        if messages is None:
            async with self.db.read() as conn:
                messages = await thread_messages(conn, conversation.id)
        left = next(
            (
                m.ts
                for m in reversed(messages)
                if (meta := payload_of(m.metadata, RESULT_EVENT, NOTICE_EVENT)) is not None
                and meta.get("key") == key
                and meta.get(STREAMING_MARK)
            ),
            None,
        )
        # the commander's answer rates the own-app agents' answers it is built on
        rated = await own_app_ratings(self, plan_id, result_of, plan) if identity is None else []
        return SlackAnswerStream(
            self,
            conversation,
            identity,
            result_of,
            key,
            plan_id=plan_id,
            interval=self.stream_interval,
            left_ts=left,
            rated=rated,
        )

    @contextmanager
    def slack_call(self, identity: Identity | None) -> Iterator[None]:
        """Slack's errors as the port's (`bot/slack_errors.py`), naming an agent's own app."""
        app = identity.display_name if identity is not None and identity.kind == "app" else None
        with slack_call(app):
            yield

    async def _post(
        self,
        conversation: ConversationRecord,
        text: str,
        identity: Identity | None,
        blocks: list[dict[str, Any]] | None,
        metadata: dict[str, Any] | None,
    ) -> str:
        app = identity.display_name if identity is not None and identity.kind == "app" else None
        with slack_call(app):
            return await self.poster.post(
                channel=conversation.channel_id,
                thread_ts=conversation.thread_ts,
                text=text,
                identity=identity,
                blocks=blocks,
                metadata=metadata,
            )

    async def show_card(
        self,
        conversation: ConversationRecord,
        plan: Plan,
        *,
        first: bool,
        card: PlanCard | None = None,
    ) -> bool:
        """Post the card once (the first poster wins), then edit it in place. The card opens
        with the commander's words about the plan (stored with it), not a message before it.
        `card`: as the caller just read it (`plan_card`); one known posted here wins."""
        card = self._cards.get(plan.id) or card or await self._card(plan.id)
        card_ts = card.posted
        if card_ts is not None and first:
            return False
        fresh = card.taken  # this sender took the first post: nothing can be in the thread yet
        if card.ts is None:
            async with self.db.write() as conn:
                fresh = await take_card_post(conn, plan.id)
        if card_ts is None and not fresh:  # posted before, its answer lost (or a stop)?
            card_ts = await self._posted(conversation, card_message_key(plan.id), {self.bot_id})
            if card_ts is not None:
                async with self.db.write() as conn:
                    await claim_plan_card(conn, plan.id, card_ts)
                    card = await plan_card_of(conn, plan.id)
                card_ts = card.posted
                if card_ts is not None:
                    self._cards.put(plan.id, card)
        now = self.clock()
        await self.show_status(conversation, session_status(plan, now), activity(plan, now))
        # the native display shows progress; then the card shows its start, its end, and
        # why steps wait – edited only when that changes (each edit paced per channel)
        native = card_ts is not None and await self.plan_display.show(conversation, plan)
        waits = waits_shown(plan)
        if native and (self._card_waits.get(plan.id) or ()) == waits:
            return False
        self._card_waits.put(plan.id, waits)
        mentions = {name: who.mention for name, who in (await self.identities()).items()}
        text, blocks = plan_card(
            plan,
            mentions=mentions,
            requester=conversation.requested_by,
            now=now,
            intro=card.intro,
        )
        rendered = [b.to_dict() for b in blocks]
        if card_ts is not None:
            await self.update(conversation, card_ts, text, rendered)
            return False
        key = card_message_key(plan.id)
        metadata = {"event_type": NOTICE_EVENT, "event_payload": {"plan_id": plan.id, "key": key}}
        posted = await self.post_unkept(conversation, text, blocks=rendered, metadata=metadata)
        ts = posted.ts
        async with self.db.write() as conn:  # kept with the claim: one write, not two
            won = await claim_plan_card(conn, plan.id, ts)
            if won:
                await store_message(conn, conversation.id, posted, self.clock())
        if won:
            self._cards.put(plan.id, PlanCard(ts, card.intro))
        if not won:  # another sender posted the card first: keep one card
            with slack_call():
                await self.client.chat_delete(channel=conversation.channel_id, ts=ts)
            return True
        await self.plan_display.show(conversation, plan)  # under the card
        return False

    async def plan_card(self, plan_id: int) -> PlanCard:
        """The plan card's message and intro; once posted, neither changes: kept in memory.
        Not posted: its first post is taken for this sender in the same write (`taken`)."""
        return await self._card(plan_id, take=True)

    async def _card(self, plan_id: int, *, take: bool = False) -> PlanCard:
        """The plan card's message and intro; once posted, neither changes: kept in memory.
        `take`: unless posted, take its first post in the same write (`plan_card`)."""
        known = self._cards.get(plan_id)
        if known is None:
            async with self.db.write() if take else self.db.read() as conn:
                read = take_or_read_card if take else plan_card_of
                known = await read(conn, plan_id)
            if known.posted is not None:
                self._cards.put(plan_id, known)
        return known

    async def show_status(
        self, conversation: ConversationRecord, status: SessionStatus, words: str = ""
    ) -> None:
        """The thread's session status (see `bot/session_statuses.py`); never raises."""
        await self.statuses.show(conversation, status, words)

    async def update(
        self, conversation: ConversationRecord, ts: str, text: str, blocks: list[dict[str, Any]]
    ) -> None:
        with slack_call():
            await self.poster.update(
                channel=conversation.channel_id, ts=ts, text=text, blocks=blocks
            )

    # --- looking in the thread ----------------------------------------------------------

    async def thread_has_key(
        self, conversation: ConversationRecord, key: str, *, agent: str | None = None
    ) -> bool:
        """Whether Flotilla (its bot, or `agent`'s own app) posted a message carrying `key`
        with one of Flotilla's metadata event types (redelivery and recovery only)."""
        return await self.posted(conversation, key, agent=agent) is not None

    async def posted(
        self, conversation: ConversationRecord, key: str, *, agent: str | None = None
    ) -> str | None:
        """The ts of the message carrying `key` that Flotilla (its bot, or `agent`'s own
        app) posted, if any (as `thread_has_key`)."""
        authors = {self.bot_id}
        if agent:
            authors.add((await self.identity(agent)).bot_id)
        return await self._posted(conversation, key, authors)

    async def _posted(
        self, conversation: ConversationRecord, key: str, authors: set[str | None]
    ) -> str | None:
        """The ts of a message of `authors` carrying `key` in Flotilla's metadata, if any."""
        authors.discard(None)
        with slack_call():
            response = await self.client.conversations_replies(
                channel=conversation.channel_id,
                ts=conversation.thread_ts,
                include_all_metadata=True,
                limit=200,
            )
            async for page in response:  # slack_sdk follows next_cursor page by page
                for message in page.get("messages") or []:
                    if message.get("bot_id") not in authors:
                        continue  # people and other apps can never silence a post
                    meta = payload_of(message.get("metadata"), *FLOTILLA_EVENTS)
                    if meta is not None and meta.get("key") == key:
                        return str(message["ts"])
        return None


def waits_shown(plan: Plan) -> tuple[tuple[int, str], ...]:
    """Why the plan's running steps wait for a slot, as its card says it (step, sentence)."""
    running = {s.index for s in plan.steps if s.status == "in_progress"}
    return tuple(sorted((i, why) for i, why in plan.waits.items() if i in running))
