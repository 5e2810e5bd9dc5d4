"""assistant.threads.setStatus: an app's status line under a thread ("is thinking…"), shown
until the app replies there, the status is cleared, or two minutes pass."""

from __future__ import annotations

from flotilla.local_slack.api import ApiError, Call, method
from flotilla.local_slack.records import Json, Message, ThreadStatus
from flotilla.local_slack.state import WorkspaceState

STATUS_TTL_SECONDS = 120.0
LOADING_MESSAGES_MAX = 10


def _loading_messages(call: Call) -> list[str]:
    value = call.json_arg("loading_messages", "invalid_arguments")
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ApiError("invalid_arguments")
    if len(value) > LOADING_MESSAGES_MAX:
        problem = "[ERROR] no more than 10 items allowed [json-pointer:/loading_messages]"
        raise ApiError("invalid_arguments", response_metadata={"messages": [problem]})
    return list(value)


@method("assistant.threads.setStatus")
async def set_status(call: Call) -> Json:
    call.require_scope("chat:write", "assistant:write")
    state = call.state
    channel_id = call.str_arg("channel_id", required=True) or ""
    thread_ts = call.str_arg("thread_ts", required=True) or ""
    status = call.str_arg("status")
    if status is None:
        raise ApiError(
            "invalid_arguments",
            response_metadata={"messages": ["[ERROR] missing required field: status"]},
        )
    channel = state.channels.get(channel_id)
    if channel is None or (
        (channel.is_private or channel.is_im) and call.app.bot_user_id not in channel.members
    ):
        raise ApiError("channel_not_found")
    parent = state.messages[channel.id].get(thread_ts)
    if parent is None:
        raise ApiError("invalid_thread_ts")
    key = (channel.id, parent.thread_ts or parent.ts)
    if status == "":
        state.thread_statuses.pop(key, None)
    else:
        state.thread_statuses[key] = ThreadStatus(
            app_id=call.app.app_id,
            status=status,
            loading_messages=_loading_messages(call),
            set_at=call.ws.clock(),
            since_ts=state.ts_clock.next(),
            username=call.str_arg("username") or None,
        )
    state.changed()
    return {}


def live_statuses(state: WorkspaceState, now: float) -> list[tuple[str, str, ThreadStatus]]:
    """(channel, thread_ts, status) of every status still showing at `now`."""
    showing = []
    for (channel_id, thread_ts), status in state.thread_statuses.items():
        if now - status.set_at > STATUS_TTL_SECONDS:
            continue
        replies = state.thread(channel_id, thread_ts)[1:]
        if any(_answers(reply, status) for reply in replies):
            continue
        showing.append((channel_id, thread_ts, status))
    return showing


def _answers(reply: Message, status: ThreadStatus) -> bool:
    return reply.app_id == status.app_id and float(reply.ts) > float(status.since_ts)
