"""Message objects in the shape Slack's Web API and Events API give them."""

from __future__ import annotations

from bot.workspace.state import Json, Message, WorkspaceState


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
