"""The step's messages in the thread: its dispatch message (edited in place by a retry,
so the thread holds one) and its forms, posted and closed once nobody will answer.

The step-message half of `SlackPort` (a mixin, like `bot/slack_files.py`'s file half): it
posts through the port's `say` and `update` and keeps to the message metadata every step
message carries.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from flotilla.agents.planning.effects import AskUser, FormAnswer, PostDispatch, ShowForm
from flotilla.agents.planning.plan import USER, Plan, Step
from flotilla.agents.reconciling.ports import PostingRefused, StepTag
from flotilla.bot.identities import Identity, Poster
from flotilla.bot.listeners.payloads import DISPATCH_EVENT, FORM_EVENT, step_metadata
from flotilla.bot.slack_errors import slack_call
from flotilla.bot.views.forms import FormKey, answered_form, closed_form_message, form_message
from flotilla.storage.conversations import thread_messages, update_message
from flotilla.storage.db import Database
from flotilla.storage.records import ConversationRecord, MessageRecord

log = logging.getLogger(__name__)

# Slack keeps a message's text up to 40,000 characters; stay clear of it.
MESSAGE_TEXT_MAX = 39_000


def fit_text(text: str, limit: int = MESSAGE_TEXT_MAX) -> str:
    """Text that Slack accepts: cut at the limit with a visible note."""
    if len(text) <= limit:
        return text
    return text[: limit - 40].rstrip() + "\n… (cut: the full text was too long)"


class StepMessages(ABC):
    """The step messages of `SlackPort` (a mixin: it uses the port's database, poster,
    identities, `say` and `update`)."""

    db: Database
    poster: Poster

    @abstractmethod
    async def identity(self, name: str) -> Identity:
        """The identity an agent posts under (`SlackPort.identity`)."""

    @abstractmethod
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
        """Post in the thread and keep the message (`SlackPort.say`)."""

    @abstractmethod
    async def post_unkept(
        self,
        conversation: ConversationRecord,
        text: str,
        *,
        identity: Identity | None = None,
        blocks: list[dict[str, Any]] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> MessageRecord:
        """Post in the thread; the message to keep, not kept yet (`SlackPort.post_unkept`)."""

    @abstractmethod
    def message(
        self,
        conversation: ConversationRecord,
        ts: str,
        text: str,
        identity: Identity | None,
        metadata: dict[str, Any] | None,
    ) -> MessageRecord:
        """A message Flotilla posted, as it is kept (`SlackPort.message`)."""

    @abstractmethod
    async def posted(
        self, conversation: ConversationRecord, key: str, *, agent: str | None = None
    ) -> str | None:
        """The ts of Flotilla's message carrying `key` in the thread (`SlackPort.posted`)."""

    @abstractmethod
    async def update(
        self, conversation: ConversationRecord, ts: str, text: str, blocks: list[dict[str, Any]]
    ) -> None:
        """Edit a message Flotilla posted (`SlackPort.update`)."""

    async def post_dispatch(
        self, conversation: ConversationRecord, effect: PostDispatch
    ) -> MessageRecord | None:
        """Post `@agent <input>`, not kept yet: the message to keep (the step's claim stores
        it, `claim_slot`). A transient failure's retry edits the step's earlier dispatch
        message instead ("— retrying, 2 of 3"), so the thread holds one: kept as edited
        here (None)."""
        text, metadata = await self._dispatch(effect)
        if effect.retry:
            earlier = await self._dispatch_message(conversation, effect)
            if earlier is not None:
                text = fit_text(f"{text} — retrying, {effect.retry} of {effect.max_tries}")
                with slack_call():
                    await self.poster.update(
                        channel=conversation.channel_id, ts=earlier, text=text, metadata=metadata
                    )
                async with self.db.write() as conn:
                    await update_message(
                        conn, conversation.channel_id, earlier, text=text, metadata=metadata
                    )
                return None
        return await self.post_unkept(conversation, text, metadata=metadata)

    async def dispatch_posted(
        self, conversation: ConversationRecord, effect: PostDispatch
    ) -> MessageRecord | None:
        """The step's dispatch message if the thread holds it already (posted before a
        crash, maybe never kept), as `post_dispatch` returns it; keeping it again is
        harmless (a message is kept once per channel and ts)."""
        ts = await self.posted(conversation, effect.key)
        if ts is None:
            return None
        text, metadata = await self._dispatch(effect)
        return self.message(conversation, ts, fit_text(text), None, metadata)

    async def _dispatch(self, effect: PostDispatch) -> tuple[str, dict[str, Any]]:
        """A step's dispatch message: its text and metadata (posted as the commander)."""
        identity = await self.identity(effect.agent)
        text = f"{identity.mention} {effect.text}".strip()
        return text, step_metadata(DISPATCH_EVENT, effect, effect.key)

    async def _dispatch_message(
        self, conversation: ConversationRecord, effect: PostDispatch
    ) -> str | None:
        """The ts of the step's latest dispatch message before this attempt, if stored."""
        async with self.db.read() as conn:
            messages = await thread_messages(conn, conversation.id)
        for message in reversed(messages):
            meta = payload_of(message.metadata, DISPATCH_EVENT)
            if (
                meta is not None
                and meta.get("plan_id") == effect.plan_id
                and meta.get("step") == effect.step
                and int(meta.get("attempt", 0)) < effect.attempt
            ):
                return message.ts
        return None

    async def post_form(
        self, conversation: ConversationRecord, effect: ShowForm | AskUser, plan: Plan | None
    ) -> None:
        step = plan.step(effect.step) if plan is not None else None
        if isinstance(effect, AskUser):
            key = FormKey(effect.plan_id, effect.step, effect.attempt, effect.round)
            identity = await self.identity(step.assignee if step else "an agent")
            title = step.title if step is not None else ""
            question = f"{identity.mention} asks: {effect.question}"
        else:
            key = FormKey(effect.plan_id, effect.step, effect.attempt, 1)
            title, question = effect.title, effect.text or effect.title
        text, blocks = form_message(
            key, title=title, question=question, form=effect.form, ask=conversation.requested_by
        )
        await self.say(
            conversation,
            text,
            blocks=[b.to_dict() for b in blocks],
            metadata=step_metadata(FORM_EVENT, effect, effect.key),
        )

    async def show_answer(
        self, conversation: ConversationRecord, answer: FormAnswer, step: Step
    ) -> None:
        """The answered form's message shows who answered what (the stored answer)."""
        if answer.message_ts is None:
            return
        text, blocks = answered_form(step, answer.values, answer.answered_by)
        await self.update(conversation, answer.message_ts, text, [b.to_dict() for b in blocks])

    async def close_forms(self, conversation: ConversationRecord, plan: Plan, note: str) -> None:
        """The plan's forms that nobody answered lose their buttons and say `note`."""
        open_steps = {
            s.index: s.attempts
            for s in plan.steps
            if s.status == "skipped"
            and (s.assignee == USER or (s.question is not None and s.question.answer is None))
        }
        if not open_steps:
            return
        async with self.db.read() as conn:
            messages = await thread_messages(conn, conversation.id)
        for message in messages:
            meta = payload_of(message.metadata, FORM_EVENT, DISPATCH_EVENT)
            if meta is None or meta.get("plan_id") != plan.id:
                continue
            step = plan.step(int(meta.get("step", 0)))
            if step is None or open_steps.get(step.index) != meta.get("attempt"):
                continue
            if step.assignee != USER and not str(meta.get("key", "")).count(":question:"):
                continue  # a dispatch message, not a form
            text, blocks = closed_form_message(step_index=step.index, title=step.title, note=note)
            try:
                await self.update(conversation, message.ts, text, [b.to_dict() for b in blocks])
            except PostingRefused as exc:
                log.warning("could not close the form %s: %s", message.ts, exc)


def payload_of(metadata: Mapping[str, Any] | None, *event_types: str) -> dict[str, Any] | None:
    """The payload of Flotilla's metadata when the event type is one of `event_types`."""
    if not metadata or metadata.get("event_type") not in event_types:
        return None
    payload = metadata.get("event_payload")
    return dict(payload) if isinstance(payload, Mapping) else None
