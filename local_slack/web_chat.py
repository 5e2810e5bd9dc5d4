"""chat.postMessage, chat.update, chat.delete and chat.postEphemeral."""

from __future__ import annotations

import copy
import secrets

from flotilla.local_slack.api import ApiError, Call, method
from flotilla.local_slack.blocks import check_blocks
from flotilla.local_slack.records import Channel, Ephemeral, Json, Message
from flotilla.local_slack.shapes import message_json

TEXT_MAX = 40_000  # chat.postMessage truncates beyond this; update/postEphemeral refuse
MARKDOWN_TEXT_MAX = 12_000


def parse_blocks(call: Call) -> list[Json] | None:
    blocks = call.json_arg("blocks", "invalid_blocks_format")
    if blocks is None:
        return None
    errors = check_blocks(blocks)
    if errors:
        raise ApiError(
            "invalid_blocks",
            errors=errors,
            response_metadata={"messages": [f"[ERROR] {e}" for e in errors]},
        )
    out = copy.deepcopy(blocks)
    for block in out:  # Slack gives every block an id
        block.setdefault("block_id", secrets.token_urlsafe(4)[:5])
    return list(out)


def parse_metadata(call: Call) -> Json | None:
    meta = call.json_arg("metadata", "invalid_metadata_format")
    if meta is None:
        return None
    valid = (
        isinstance(meta, dict)
        and isinstance(meta.get("event_type"), str)
        and isinstance(meta.get("event_payload", {}), dict)
    )
    if not valid:
        raise ApiError("invalid_metadata_format")
    return {"event_type": meta["event_type"], "event_payload": meta.get("event_payload", {})}


def _text(call: Call, blocks: list[Json] | None, *, truncate: bool) -> str:
    text = call.str_arg("text") or ""
    if not text and not blocks and not call.arg("attachments"):
        raise ApiError("no_text")
    if len(text) > TEXT_MAX:
        if not truncate:
            raise ApiError("msg_too_long")
        text = text[:TEXT_MAX]
    return text


def persona(call: Call) -> tuple[str | None, Json | None]:
    """username/icon_* apply only with chat:write.customize; otherwise Slack ignores them."""
    if "chat:write.customize" not in call.app.scopes:
        return None, None
    username = call.str_arg("username") or None
    icons: Json | None = None
    if call.str_arg("icon_emoji"):
        icons = {"emoji": call.str_arg("icon_emoji")}
    elif call.str_arg("icon_url"):
        icons = {"image_64": call.str_arg("icon_url")}
    return username, icons


def _thread_root(call: Call, channel: str) -> str | None:
    thread_ts = call.str_arg("thread_ts") or None
    if thread_ts is None:
        return None
    target = call.state.messages[channel].get(thread_ts)
    # Replying to a reply threads under that reply's parent, as in Slack's clients.
    if target is not None and target.thread_ts and target.thread_ts != target.ts:
        return target.thread_ts
    return thread_ts


def writable_channel(call: Call) -> Channel:
    """The target channel of a post: a member, or any public channel with chat:write.public."""
    call.require_scope("chat:write")
    channel = call.channel()
    if call.app.bot_user_id not in channel.members and not (
        "chat:write.public" in call.app.scopes and not channel.is_private
    ):
        raise ApiError("not_in_channel")
    if channel.is_archived:
        raise ApiError("is_archived")
    return channel


def _markdown_text(call: Call) -> tuple[list[Json] | None, str | None]:
    """`markdown_text` becomes a markdown block; it excludes `text` and `blocks`."""
    markdown = call.str_arg("markdown_text")
    if markdown is None:
        return None, None
    if call.arg("text") or call.arg("blocks"):
        raise ApiError("markdown_text_conflict")
    if not markdown:
        raise ApiError("no_text")
    if len(markdown) > MARKDOWN_TEXT_MAX:
        problem = "[ERROR] must be less than 12001 characters [json-pointer:/markdown_text]"
        raise ApiError("invalid_arguments", response_metadata={"messages": [problem]})
    return [markdown_block(markdown)], markdown


def markdown_block(text: str) -> Json:
    return {"type": "markdown", "text": text, "block_id": secrets.token_urlsafe(4)[:5]}


@method("chat.postMessage")
async def post_message(call: Call) -> Json:
    channel = writable_channel(call)
    blocks, text = _markdown_text(call)
    if text is None:
        blocks = parse_blocks(call)
        text = _text(call, blocks, truncate=True)
    metadata = parse_metadata(call)
    username, icons = persona(call)
    thread_ts = _thread_root(call, channel.id)
    broadcast = bool(thread_ts) and call.bool_arg("reply_broadcast")
    msg = Message(
        channel=channel.id,
        ts=call.state.ts_clock.next(),
        text=text,
        user=None if username or icons else call.app.bot_user_id,
        blocks=blocks,
        bot_id=call.app.bot_id,
        app_id=call.app.app_id,
        username=username,
        icons=icons,
        thread_ts=thread_ts,
        subtype="thread_broadcast" if broadcast else ("bot_message" if username or icons else None),
        metadata=metadata,
    )
    call.state.add_message(msg)
    call.ws.events.message_posted(msg)
    return {"channel": channel.id, "ts": msg.ts, "message": message_json(call.state, msg)}


def _own_message(call: Call, channel_id: str, refusal: str) -> Message:
    """The message `ts` names, if it exists and this app posted it (Slack's errors if not)."""
    ts = call.str_arg("ts", required=True) or ""
    msg = call.state.message(channel_id, ts)
    if msg is None or msg.deleted:
        raise ApiError("message_not_found")
    if msg.bot_id != call.app.bot_id:
        raise ApiError(refusal)
    return msg


@method("chat.update")
async def update(call: Call) -> Json:
    call.require_scope("chat:write")
    channel = call.channel()
    msg = _own_message(call, channel.id, "cant_update_message")
    previous = message_json(call.state, msg)
    blocks = parse_blocks(call) if "blocks" in call.args else msg.blocks
    text = call.str_arg("text")
    if text is not None and len(text) > TEXT_MAX:
        raise ApiError("msg_too_long")
    if text is None and "blocks" not in call.args:
        text = msg.text
    if not text and not blocks:
        raise ApiError("no_text")
    msg.text, msg.blocks = text or "", blocks
    if "metadata" in call.args:
        msg.metadata = parse_metadata(call)
    msg.edited = {"user": call.app.bot_user_id, "ts": call.state.ts_clock.next()}
    call.state.changed()
    call.ws.events.message_changed(msg, previous)
    out = message_json(call.state, msg)
    del out["ts"]  # Slack's chat.update message object has no ts (recorded response)
    return {"channel": channel.id, "ts": msg.ts, "text": msg.text, "message": out}


@method("chat.delete")
async def delete(call: Call) -> Json:
    call.require_scope("chat:write")
    channel = call.channel()
    msg = _own_message(call, channel.id, "cant_delete_message")
    previous = message_json(call.state, msg)
    msg.deleted = True
    if msg.replies:  # a parent with replies stays as a tombstone
        msg.subtype, msg.text, msg.blocks, msg.user = (
            "tombstone",
            "This message was deleted.",
            None,
            None,
        )
        msg.bot_id = msg.app_id = None
    call.state.changed()
    call.ws.events.message_deleted(msg, previous)
    return {"channel": channel.id, "ts": msg.ts}


@method("chat.postEphemeral")
async def post_ephemeral(call: Call) -> Json:
    call.require_scope("chat:write")
    channel = call.channel()
    user = call.str_arg("user", required=True) or ""
    if call.app.bot_user_id not in channel.members and not (
        "chat:write.public" in call.app.scopes and not channel.is_private
    ):
        raise ApiError("not_in_channel")
    if user not in channel.members:
        raise ApiError("user_not_in_channel")
    blocks = parse_blocks(call)
    text = _text(call, blocks, truncate=False)
    ephemeral = Ephemeral(
        channel=channel.id,
        user=user,
        ts=call.state.ts_clock.next(),
        text=text,
        blocks=blocks,
        thread_ts=call.str_arg("thread_ts") or None,
        app_id=call.app.app_id,
        bot_id=call.app.bot_id,
    )
    call.state.ephemerals.append(ephemeral)
    call.state.changed()
    return {"message_ts": ephemeral.ts}
