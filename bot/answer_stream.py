"""An answer streamed into the thread while its agent writes it.

`chat.startStream` opens the message (as the agent: its own app's token, or the persona's
name and icon) at the first text, `chat.appendStream` adds what is new at most once per
`interval` seconds (coalesced, well inside the method's rate tier), and `chat.stopStream`
finishes it with the rest, the step's metadata and 👍/👎 buttons (`bot/views/feedback.py`).
The message is kept in the thread's stored messages from its start (marked `streaming`),
so a process that stops mid-answer leaves a trace: the run that continues the step
finishes that message (stop, then edit to the whole answer) instead of posting another.
Its final text is handed back by `finish` and stored by the caller – with the step's
outcome, in its reconcile's transaction (`agents/reconciling/final_texts.py`).

Where the workspace does not stream (see `bot/slack_features.py`), or a stream call fails,
the answer is posted whole at the end: the preview is best effort, the answer is not.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError

from flotilla.agents.core.failures import is_storage_error
from flotilla.agents.planning.plan import COMMANDER
from flotilla.agents.reconciling.final_texts import FinalText, FinishedAnswer
from flotilla.agents.reconciling.ports import StepTag
from flotilla.bot.identities import Identity
from flotilla.bot.listeners.payloads import NOTICE_EVENT, RESULT_EVENT, step_metadata
from flotilla.bot.posting_port import PostingPort
from flotilla.bot.slack_features import STREAMING
from flotilla.bot.views.feedback import feedback_block
from flotilla.storage.conversations import update_message
from flotilla.storage.records import ConversationRecord

log = logging.getLogger(__name__)

STREAM_TEXT_MAX = 12_000  # markdown_text of one streaming call, and a markdown block
STREAMING_MARK = "streaming"  # agents/running/thread_window.py knows it too


def answer_metadata(tag: StepTag | None, key: str, *, streaming: bool = False) -> dict[str, Any]:
    """A step's answer's metadata (`tag`), or the plan's final answer's (a notice); while it
    streams, marked so that it is found again after a stop."""
    if tag is None:
        metadata: dict[str, Any] = {"event_type": NOTICE_EVENT, "event_payload": {"key": key}}
    else:
        metadata = step_metadata(RESULT_EVENT, tag, key)
    if streaming:
        metadata["event_payload"][STREAMING_MARK] = True
    return metadata


class SlackAnswerStream:
    """Implements `agents.reconciling.ports.AnswerStream` with Slack's streaming methods."""

    def __init__(
        self,
        port: PostingPort,
        conversation: ConversationRecord,
        identity: Identity | None,
        tag: StepTag | None,
        key: str,
        *,
        plan_id: int,
        interval: float,
        left_ts: str | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        rated: Sequence[dict[str, Any]] = (),
    ) -> None:
        """`left_ts`: this answer's message that a stopped process left streaming; `rated`:
        buttons for other answers, shown under this one's (`bot/answer_ratings.py`)."""
        self.port, self.conversation, self.identity = port, conversation, identity
        self.tag, self.key, self.interval, self.monotonic = tag, key, interval, monotonic
        self.ts = left_ts
        self.sent = ""  # the text Slack shows
        self.stopped = left_ts is not None  # nothing more is streamed (a finish edits)
        self.last_append = float("-inf")
        agent = identity.name if identity is not None else COMMANDER
        step = tag.step if tag is not None else 0
        # clicks go to the app that posted: an agent's own app would get them, not Flotilla
        own_app = identity is not None and identity.kind == "app"
        mine = [] if own_app else [feedback_block(plan_id, step, agent)]
        self.feedback: list[dict[str, Any]] = mine + list(rated)

    @property
    def client(self) -> Any:
        return self.port.poster.client_for(self.identity)

    async def show(self, text: str) -> None:
        """Show the answer so far. Best effort: nothing here may cut the model's answer short
        (it would be paid again), so when the database is away streaming stops and the
        answer is posted whole at the end."""
        if self.stopped:
            return
        try:
            await self._show(text)
        except Exception as exc:
            if not is_storage_error(exc):
                raise
            log.warning("streaming stopped (the database is away): the answer is posted whole")
            self.stopped = True

    async def _show(self, text: str) -> None:
        try:
            if self.ts is None:
                await self._start(text[:STREAM_TEXT_MAX])
            elif self.monotonic() - self.last_append >= self.interval:
                await self._append(text)
        except SlackApiError as exc:
            error = str(exc.response.get("error", "")) if exc.response is not None else ""
            await self.port.features.refused(self.port.team_id, STREAMING, error)
            log.warning("streaming stopped (%s): the answer is posted whole", error or exc)
            self.stopped = True
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.warning("streaming stopped (%s): the answer is posted whole", type(exc).__name__)
            self.stopped = True

    async def _start(self, text: str) -> None:
        if not await self.port.features.offers(self.port.team_id, STREAMING):
            self.stopped = True
            return
        persona = self.identity.persona_arguments() if self.identity is not None else {}
        await self.port.poster.pacer.wait(self.conversation.channel_id)  # a new message
        response = await self.client.chat_startStream(
            channel=self.conversation.channel_id,
            thread_ts=self.conversation.thread_ts,
            markdown_text=text,
            recipient_user_id=self.conversation.requested_by,
            recipient_team_id=self.conversation.team_id,
            **persona,
        )
        self.ts, self.sent = str(response["ts"]), text
        self.last_append = self.monotonic()
        await self.port.keep(
            self.conversation,
            self.ts,
            text,
            self.identity,
            answer_metadata(self.tag, self.key, streaming=True),
        )

    async def _append(self, text: str) -> None:
        if not text.startswith(self.sent) or len(text) > STREAM_TEXT_MAX:
            self.stopped = True  # the model started over, or the text outgrew a stream
            return
        addition = text[len(self.sent) :]
        if not addition:
            return
        await self.client.chat_appendStream(
            channel=self.conversation.channel_id, ts=self.ts, markdown_text=addition
        )
        self.sent, self.last_append = text, self.monotonic()

    async def finish(self, text: str) -> FinishedAnswer:
        """The answer finished in Slack; its stored message's final text is left to the
        caller to store (with the step's outcome: `agents/reconciling/final_texts.py`)."""
        metadata = answer_metadata(self.tag, self.key)
        agent = self.identity.name if self.identity is not None else None
        if self.ts is None:
            return FinishedAnswer(await self._say(text, agent))  # stored as it was posted
        ts = self.ts
        rest = text[len(self.sent) :] if text.startswith(self.sent) else None
        if not self.stopped and rest is not None and len(text) <= STREAM_TEXT_MAX:
            with self.port.slack_call(self.identity):
                await self.client.chat_stopStream(
                    channel=self.conversation.channel_id,
                    ts=ts,
                    markdown_text=rest or None,
                    blocks=self._buttons(),
                    metadata=metadata,
                )
        elif len(text) <= STREAM_TEXT_MAX:
            await self._stop_quietly()
            blocks = [{"type": "markdown", "text": text}, *self._buttons()]
            with self.port.slack_call(self.identity):
                await self.client.chat_update(
                    channel=self.conversation.channel_id,
                    ts=ts,
                    text=text,
                    blocks=blocks,
                    metadata=metadata,
                )
        else:  # too long for one streamed message: the whole answer as a post
            await self.discard()
            return FinishedAnswer(await self._say(text, agent))
        self.ts, self.stopped = None, True
        return FinishedAnswer(ts, FinalText(self.conversation.channel_id, ts, text, metadata))

    def finished_before(self, text: str) -> FinalText | None:
        """Slack has the finished answer already (found on a redelivery); if its stored
        message was left streaming (`left_ts`), the final text to store. `text` is the
        answer of the stored run, the one finished in Slack."""
        if self.ts is None:
            return None  # nothing left streaming: stored as it was posted
        ts, self.ts, self.stopped = self.ts, None, True
        if len(text) > STREAM_TEXT_MAX:  # taken back, the answer posted whole: as `discard`
            return FinalText(self.conversation.channel_id, ts, "", None)
        metadata = answer_metadata(self.tag, self.key)
        return FinalText(self.conversation.channel_id, ts, text, metadata)

    def _buttons(self) -> list[dict[str, Any]]:
        return list(self.feedback)

    async def _say(self, text: str, agent: str | None) -> str:
        """The whole answer as one post (the metadata `say` gives a step's answer or a notice)."""
        fits = bool(self.feedback) and len(text) <= STREAM_TEXT_MAX  # else text alone
        blocks = [{"type": "markdown", "text": text}, *self._buttons()] if fits else None
        return await self.port.say(
            self.conversation, text, agent=agent, result_of=self.tag, key=self.key, blocks=blocks
        )

    async def _stop_quietly(self) -> None:
        """Stop the stream if Slack still has it open (a stopped one answers an error)."""
        try:
            await self.client.chat_stopStream(channel=self.conversation.channel_id, ts=self.ts)
        except SlackApiError as exc:
            log.info("stream %s not stopped: %s", self.ts, exc.response.get("error"))
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.info("stream %s not stopped: %s", self.ts, type(exc).__name__)

    async def discard(self) -> None:
        if self.ts is None:
            return
        ts, self.ts, self.stopped = self.ts, None, True
        try:
            await self._stop_quietly()
            await self.client.chat_delete(channel=self.conversation.channel_id, ts=ts)
        except (SlackApiError, aiohttp.ClientError, TimeoutError) as exc:
            log.warning("a streamed preview %s could not be taken back: %s", ts, exc)
            return
        async with self.port.db.write() as conn:
            await update_message(conn, self.conversation.channel_id, ts, text="", metadata=None)
