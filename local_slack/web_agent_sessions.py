"""agents.sessions.setStatus: an app's agent session in a thread – active, processing,
suspended or closed – created on first use (title and initiator are taken then only)."""

from __future__ import annotations

from flotilla.local_slack.api import ApiError, Call, method
from flotilla.local_slack.records import AgentSession, Json
from flotilla.local_slack.state import WorkspaceState

STATUSES = ("active", "processing", "suspended", "closed")
TITLE_MAX = 200


@method("agents.sessions.setStatus")
async def set_status(call: Call) -> Json:
    call.require_scope("chat:write")
    state = call.state
    channel_id = call.str_arg("channel_id", required=True) or ""
    status = call.str_arg("status", required=True) or ""
    if status not in STATUSES:
        raise ApiError("invalid_status")
    channel = state.channels.get(channel_id)
    if channel is None or (
        (channel.is_private or channel.is_im) and call.app.bot_user_id not in channel.members
    ):
        raise ApiError("channel_not_found")
    if call.app.bot_user_id not in channel.members:
        raise ApiError("not_authorized")
    thread_ts = call.str_arg("thread_ts")
    if not thread_ts:
        raise ApiError("thread_ts_required")
    parent = state.messages[channel.id].get(thread_ts)
    if parent is None:
        raise ApiError(
            "invalid_arguments",
            response_metadata={"messages": ["[ERROR] thread_ts is not a message in this channel"]},
        )
    initiator = call.str_arg("initiator_user_id") or None
    if initiator is not None and initiator not in state.people:
        raise ApiError("user_not_found")
    title = call.str_arg("title") or ""
    if len(title) > TITLE_MAX:
        raise ApiError(
            "invalid_arguments",
            response_metadata={"messages": ["[ERROR] title must be at most 200 characters"]},
        )
    key = (channel.id, parent.thread_ts or parent.ts, call.app.app_id)
    session = state.agent_sessions.get(key)
    if session is None:
        session = AgentSession(
            app_id=call.app.app_id, status=status, title=title, initiator=initiator
        )
        state.agent_sessions[key] = session
    session.status = status
    session.history.append(status)
    if "username" in call.args:
        session.username = call.str_arg("username") or None
    state.changed()
    return {"status": status, "agent_status": status, "title": session.title}


def session_of(
    state: WorkspaceState, channel_id: str, thread_ts: str, app_id: str
) -> AgentSession | None:
    """The app's agent session in a thread, if it set one."""
    return state.agent_sessions.get((channel_id, thread_ts, app_id))
