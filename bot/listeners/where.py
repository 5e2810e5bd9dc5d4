"""Where an interaction happened: who acted, on which message of which thread."""

from __future__ import annotations

from typing import Any

Body = dict[str, Any]


def where_of(body: Body) -> dict[str, Any]:
    """Who acted, and on which message of which thread (from a block_actions payload)."""
    container = body.get("container") or {}
    message = body.get("message") or {}
    channel = container.get("channel_id") or (body.get("channel") or {}).get("id")
    message_ts = container.get("message_ts") or message.get("ts")
    thread_ts = container.get("thread_ts") or message.get("thread_ts") or message_ts
    return {
        "user": body["user"]["id"],
        "channel": channel,
        "thread_ts": thread_ts,
        "message_ts": message_ts,
    }
