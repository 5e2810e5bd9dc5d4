"""The plan shown as Slack's native plan display: one streamed message whose tasks follow
the plan's step statuses.

The message opens with `chat.startStream(task_display_mode="plan")` and the plan's tasks,
each change of the plan appends the tasks that changed (`chat.appendStream`), and the end of
the plan stops the stream with the final statuses. It is driven by the orchestrator (every
plan card refresh), never by the model. The message is kept in the thread's stored
messages, so a restarted process carries on with it instead of opening another. Where the
workspace refuses it (remembered, see `bot/slack_features.py`) the Block Kit card alone
shows the plan; the card stays in any case, with its Cancel button.
"""

from __future__ import annotations

import logging
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError

from flotilla.agents.core.lru import LRUCache
from flotilla.agents.planning.plan import TERMINAL_PLAN, Plan
from flotilla.bot.listeners.payloads import NOTICE_EVENT
from flotilla.bot.posting_port import PostingPort
from flotilla.bot.slack_features import TASK_DISPLAY
from flotilla.bot.views.plan_tasks import plan_chunks, sent_key, signature
from flotilla.storage.conversations import thread_messages, update_message
from flotilla.storage.records import ConversationRecord

log = logging.getLogger(__name__)
PLANS_KEPT = 1000  # plans whose display is remembered in memory (the rest are looked up)


def display_key(plan_id: int) -> str:
    return f"plan:{plan_id}:tasks"


class PlanDisplay:
    """Keeps each plan's native display in step with the plan."""

    def __init__(self, port: PostingPort) -> None:
        self.port = port
        self.enabled = True
        # plan id -> (message ts, task id -> what was sent); None: the display has ended
        self._shown: LRUCache[int, tuple[str, dict[str, str]] | None] = LRUCache(PLANS_KEPT)

    async def show(self, conversation: ConversationRecord, plan: Plan) -> bool:
        """Bring the plan's display up to date; True while it shows the plan (the card then
        needs no refresh until the plan ends). Never raises."""
        team = self.port.team_id
        if not self.enabled or not await self.port.features.offers(team, TASK_DISPLAY):
            return False
        try:
            return await self._show(conversation, plan)
        except SlackApiError as exc:
            error = str(exc.response.get("error", ""))
            older = frozenset({"invalid_chunks", "invalid_arguments"})  # no task chunks there
            if not await self.port.features.refused(team, TASK_DISPLAY, error, also=older):
                log.warning("the plan display could not be updated: %s", error)
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("the plan display could not be updated: %s", type(exc).__name__)
        return False

    async def _show(self, conversation: ConversationRecord, plan: Plan) -> bool:
        shown = (
            self._shown.get(plan.id)
            if plan.id in self._shown
            else await self._stored(conversation, plan.id)
        )
        if plan.id in self._shown and shown is None:
            return False  # ended already
        client = self.port.client
        channel = conversation.channel_id
        ended = plan.status in TERMINAL_PLAN
        if shown is None:
            if ended:
                return False  # nothing to show for a plan that is over already
            chunks = plan_chunks(plan)
            await self.port.poster.pacer.wait(channel)  # a new message
            response = await client.chat_startStream(
                channel=channel,
                thread_ts=conversation.thread_ts,
                recipient_user_id=conversation.requested_by,
                recipient_team_id=conversation.team_id,
                task_display_mode="plan",
                chunks=chunks,
            )
            ts = str(response["ts"])
            await self.port.keep(conversation, ts, "", None, self._metadata(plan.id, True))
            shown = (ts, {})
            shown[1].update({sent_key(c): signature(c) for c in chunks})
        else:
            ts, sent = shown
            chunks = plan_chunks(plan, sent)
            if chunks and not ended:
                await client.chat_appendStream(channel=channel, ts=ts, chunks=chunks)
            sent.update({sent_key(c): signature(c) for c in chunks})
        if ended:
            await client.chat_stopStream(
                channel=channel,
                ts=shown[0],
                chunks=plan_chunks(plan, shown[1], every=True) or None,
                metadata=self._metadata(plan.id, False),
            )
            async with self.port.db.write() as conn:
                await update_message(
                    conn, channel, shown[0], text="", metadata=self._metadata(plan.id, False)
                )
            self._shown.put(plan.id, None)
            return False
        self._shown.put(plan.id, shown)
        return True

    async def _stored(
        self, conversation: ConversationRecord, plan_id: int
    ) -> tuple[str, dict[str, str]] | None:
        """The display a stopped process left open, if any (its tasks are all sent again)."""
        async with self.port.db.read() as conn:
            messages = await thread_messages(conn, conversation.id)
        key = display_key(plan_id)
        for message in reversed(messages):
            meta = message.metadata or {}
            payload = meta.get("event_payload") or {}
            if meta.get("event_type") == NOTICE_EVENT and payload.get("key") == key:
                return (message.ts, {}) if payload.get("streaming") else None
        return None

    @staticmethod
    def _metadata(plan_id: int, streaming: bool) -> dict[str, Any]:
        payload: dict[str, Any] = {"plan_id": plan_id, "key": display_key(plan_id)}
        if streaming:
            payload["streaming"] = True
        return {"event_type": NOTICE_EVENT, "event_payload": payload}
