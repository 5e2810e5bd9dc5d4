"""chat.startStream, chat.appendStream and chat.stopStream: a bot message that grows while
the app streams markdown into it, then is finalised (optionally with blocks and metadata)."""

from __future__ import annotations

from typing import Any

from flotilla.local_slack.api import ApiError, Call, method
from flotilla.local_slack.records import Json, Message
from flotilla.local_slack.shapes import message_json
from flotilla.local_slack.web_chat import (
    MARKDOWN_TEXT_MAX,
    markdown_block,
    parse_blocks,
    parse_metadata,
    persona,
    writable_channel,
)

TASK_STATUSES = ("pending", "in_progress", "complete", "error")
CHUNK_TYPES = ("markdown_text", "task_update", "plan_update", "blocks")
DISPLAY_MODES = ("timeline", "plan")


def _chunks(call: Call) -> list[Json]:
    """The `chunks` argument, each checked: markdown text, a task update (id, title, one of
    the task statuses), a plan update (title) or blocks."""
    chunks: Any = call.json_arg("chunks", "invalid_chunks")
    if chunks is None:
        return []
    if not isinstance(chunks, list) or not all(
        isinstance(c, dict) and c.get("type") in CHUNK_TYPES for c in chunks
    ):
        raise ApiError("invalid_chunks")
    for chunk in chunks:
        if chunk["type"] == "task_update" and not (
            isinstance(chunk.get("id"), str)
            and isinstance(chunk.get("title"), str)
            and chunk.get("status") in TASK_STATUSES
        ):
            raise ApiError("invalid_chunks")
        if chunk["type"] == "plan_update" and not isinstance(chunk.get("title"), str):
            raise ApiError("invalid_chunks")
    return list(chunks)


def _apply_tasks(msg: Message, chunks: list[Json]) -> None:
    """Task and plan updates change the message's task list (a task keeps its place)."""
    for chunk in chunks:
        if chunk["type"] == "task_update":
            task = msg.tasks.setdefault(chunk["id"], {})
            task.update({k: v for k, v in chunk.items() if k != "type"})
        elif chunk["type"] == "plan_update":
            msg.plan_title = chunk["title"]


def _streamed_text(call: Call, *, required: bool) -> str:
    """Text from `markdown_text` plus any `markdown_text` chunks."""
    text = call.str_arg("markdown_text") or ""
    chunks = _chunks(call)
    if chunks:
        text += "".join(str(c.get("text", "")) for c in chunks if c["type"] == "markdown_text")
    if required and not text and not chunks:
        raise ApiError("no_text")
    if len(text) > MARKDOWN_TEXT_MAX:
        raise ApiError("msg_blocks_too_long")
    return text


def _streaming_message(call: Call) -> Message:
    channel = writable_channel(call)
    ts = call.str_arg("ts", required=True) or ""
    msg = call.state.message(channel.id, ts)
    if msg is None:
        raise ApiError("message_not_found")
    if msg.app_id != call.app.app_id:
        raise ApiError("message_not_owned_by_app")
    if not msg.streaming:
        raise ApiError("message_not_in_streaming_state")
    return msg


@method("chat.startStream")
async def start_stream(call: Call) -> Json:
    channel = writable_channel(call)
    if not channel.is_im:
        if not call.str_arg("recipient_user_id"):
            raise ApiError("missing_recipient_user_id")
        if not call.str_arg("recipient_team_id"):
            raise ApiError("missing_recipient_team_id")
    text = _streamed_text(call, required=False)
    mode = call.str_arg("task_display_mode")
    if mode is not None and mode not in DISPLAY_MODES:
        raise ApiError(
            "invalid_arguments",
            response_metadata={
                "messages": ["[ERROR] task_display_mode must be one of timeline, plan"]
            },
        )
    username, icons = persona(call)
    thread_ts = call.str_arg("thread_ts") or None
    parent = call.state.messages[channel.id].get(thread_ts or "")
    if parent is not None and parent.thread_ts and parent.thread_ts != parent.ts:
        thread_ts = parent.thread_ts
    msg = Message(
        channel=channel.id,
        ts=call.state.ts_clock.next(),
        text=text,
        user=None if username or icons else call.app.bot_user_id,
        blocks=[markdown_block(text)] if text else None,
        bot_id=call.app.bot_id,
        app_id=call.app.app_id,
        username=username,
        icons=icons,
        thread_ts=thread_ts,
        subtype="bot_message" if username or icons else None,
        streaming=True,
        task_display_mode=mode or "timeline",
    )
    _apply_tasks(msg, _chunks(call))
    call.state.add_message(msg)
    call.ws.events.message_posted(msg)
    return {"channel": channel.id, "ts": msg.ts}


@method("chat.appendStream")
async def append_stream(call: Call) -> Json:
    msg = _streaming_message(call)
    addition = _streamed_text(call, required=True)
    if len(msg.text) + len(addition) > MARKDOWN_TEXT_MAX:
        raise ApiError("msg_blocks_too_long")
    msg.text += addition
    msg.blocks = [markdown_block(msg.text)] if msg.text else None
    _apply_tasks(msg, _chunks(call))
    call.state.changed()
    return {"channel": msg.channel, "ts": msg.ts}


@method("chat.stopStream")
async def stop_stream(call: Call) -> Json:
    msg = _streaming_message(call)
    previous = message_json(call.state, msg)
    msg.text += _streamed_text(call, required=False)
    _apply_tasks(msg, _chunks(call))
    extra = parse_blocks(call) or []
    msg.blocks = ([markdown_block(msg.text)] if msg.text else []) + extra
    if "metadata" in call.args:
        msg.metadata = parse_metadata(call)
    msg.streaming = False
    call.state.changed()
    call.ws.events.message_changed(msg, previous)
    return {"channel": msg.channel, "ts": msg.ts, "message": message_json(call.state, msg)}
