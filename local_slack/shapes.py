"""Message objects in the shape Slack's Web API and Events API give them."""

from __future__ import annotations

import re
import secrets

from flotilla.local_slack.records import Json, Message
from flotilla.local_slack.state import WorkspaceState


def message_json(
    state: WorkspaceState, msg: Message, *, include_metadata: bool = True, as_event: bool = False
) -> Json:
    """The message object in the shape Slack returns from chat.* and conversations.*."""
    out: Json = {"type": "message"}
    if msg.subtype:
        out["subtype"] = msg.subtype
    out["text"] = msg.text
    if msg.user:
        out["user"] = msg.user
    out["ts"] = msg.ts
    if msg.bot_id:
        out.update(_bot_fields(state, msg))
    if msg.client_msg_id:
        out["client_msg_id"] = msg.client_msg_id
    out["team"] = state.team_id
    if msg.blocks is not None:
        out["blocks"] = msg.blocks
    if msg.edited:
        out["edited"] = msg.edited
    if msg.thread_ts:
        out["thread_ts"] = msg.thread_ts
        if msg.thread_ts != msg.ts and msg.parent_user_id:
            out["parent_user_id"] = msg.parent_user_id
    if msg.replies and not as_event:
        out.update(_thread_info(state, msg))
    if msg.metadata is not None and include_metadata:
        out["metadata"] = msg.metadata
    if msg.files:
        files = [state.files.files[f] for f in msg.files if f in state.files.files]
        out["files"] = [state.files.shape(state.team_id, f, domain=state.domain) for f in files]
        out["upload"] = False
        out["display_as_bot"] = False
    return out


def _thread_info(state: WorkspaceState, msg: Message) -> Json:
    visible = [state.messages[msg.channel][ts] for ts in msg.replies]
    visible = [r for r in visible if not r.deleted]
    users = list(dict.fromkeys(r.author for r in visible))
    return {
        "reply_count": len(visible),
        "reply_users_count": len(users),
        "latest_reply": visible[-1].ts if visible else msg.ts,
        "reply_users": users,
        "is_locked": False,
        "subscribed": False,
    }


def _bot_fields(state: WorkspaceState, msg: Message) -> Json:
    out: Json = {"bot_id": msg.bot_id, "app_id": msg.app_id}
    if msg.username:
        out["username"] = msg.username
    if msg.icons:
        out["icons"] = msg.icons
    app = state.apps.get(msg.app_id or "")
    if app is not None:
        out["bot_profile"] = app.bot_profile(state.team_id)
    return out


_TOKEN = re.compile(
    r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>|<#([CGD][A-Z0-9]+)(?:\|[^>]*)?>|<(https?://[^|>]+)(?:\|([^>]*))?>"
)


def rich_text_block(text: str) -> Json:
    """The rich_text block Slack's clients attach to what a person types."""
    elements: list[Json] = []
    pos = 0
    for m in _TOKEN.finditer(text):
        if m.start() > pos:
            elements.append({"type": "text", "text": text[pos : m.start()]})
        if m.group(1):
            elements.append({"type": "user", "user_id": m.group(1)})
        elif m.group(2):
            elements.append({"type": "channel", "channel_id": m.group(2)})
        else:
            link: Json = {"type": "link", "url": m.group(3)}
            if m.group(4):
                link["text"] = m.group(4)
            elements.append(link)
        pos = m.end()
    if pos < len(text):
        elements.append({"type": "text", "text": text[pos:]})
    return {
        "type": "rich_text",
        "block_id": secrets.token_urlsafe(4)[:5],
        "elements": [{"type": "rich_text_section", "elements": elements}],
    }
