"""auth.test, conversations.replies/history/info/members and users.info."""

from __future__ import annotations

import base64

from flotilla.local_slack.api import ApiError, Call, method
from flotilla.local_slack.records import Channel, Json, Message, Person
from flotilla.local_slack.shapes import message_json

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000


@method("auth.test")
async def auth_test(call: Call) -> Json:
    ws, app = call.ws, call.app
    return {
        "url": f"https://{ws.state.domain}.slack.com/",
        "team": ws.state.team_name,
        "user": ws.state.user_name(app.bot_user_id),
        "team_id": ws.state.team_id,
        "user_id": app.bot_user_id,
        "bot_id": app.bot_id,
        "app_id": app.app_id,
        "app_name": app.name,
        "is_enterprise_install": False,
    }


def _page(call: Call, items: list[Message]) -> tuple[list[Message], str]:
    """Cursor pagination as Slack does it: an opaque `next_cursor`, empty on the last page."""
    try:
        limit = int(call.args.get("limit") or DEFAULT_LIMIT)
    except ValueError:
        raise ApiError("invalid_limit") from None
    limit = max(1, min(limit, MAX_LIMIT))
    start = 0
    cursor = call.str_arg("cursor")
    if cursor:
        try:
            start = int(base64.b64decode(cursor).decode().removeprefix("next_ts:"))
        except ValueError:
            raise ApiError("invalid_cursor") from None
    page = items[start : start + limit]
    more = start + limit < len(items)
    next_cursor = base64.b64encode(f"next_ts:{start + limit}".encode()).decode() if more else ""
    return page, next_cursor


def _window(call: Call, items: list[Message]) -> list[Message]:
    """Apply `oldest`/`latest`/`inclusive` (ts strings compare as numbers)."""
    inclusive = call.bool_arg("inclusive")
    oldest, latest = call.str_arg("oldest"), call.str_arg("latest")
    for name, value in (("oldest", oldest), ("latest", latest)):
        try:
            float(value) if value else None
        except ValueError:
            raise ApiError(f"invalid_ts_{name}") from None
    out = []
    for m in items:
        t = float(m.ts)
        if oldest and (t < float(oldest) or (t == float(oldest) and not inclusive)):
            continue
        if latest and (t > float(latest) or (t == float(latest) and not inclusive)):
            continue
        out.append(m)
    return out


@method("conversations.replies")
async def replies(call: Call) -> Json:
    channel = call.channel(scope_kind="history")
    ts = call.str_arg("ts", required=True) or ""
    target = call.state.message(channel.id, ts)
    if target is None:
        raise ApiError("thread_not_found")
    root = target.thread_ts if target.thread_ts and target.thread_ts != target.ts else target.ts
    thread = call.state.thread(channel.id, root)
    if not thread:
        raise ApiError("thread_not_found")
    # The parent always comes first, even when oldest/latest would exclude it.
    rest = (
        _window(call, thread[1:])
        if ("oldest" in call.args or "latest" in call.args)
        else thread[1:]
    )
    page, next_cursor = _page(call, [thread[0], *rest])
    meta = call.bool_arg("include_all_metadata")
    return {
        "messages": [message_json(call.state, m, include_metadata=meta) for m in page],
        "has_more": bool(next_cursor),
        "response_metadata": {"next_cursor": next_cursor},
    }


@method("conversations.history")
async def history(call: Call) -> Json:
    channel = call.channel(scope_kind="history")
    if call.app.bot_user_id not in channel.members:
        raise ApiError("not_in_channel")
    top = [
        m
        for m in call.state.messages[channel.id].values()
        if not (m.deleted and not m.replies)
        and (not m.thread_ts or m.thread_ts == m.ts or m.subtype == "thread_broadcast")
    ]
    top.sort(key=lambda m: float(m.ts), reverse=True)
    page, next_cursor = _page(call, _window(call, top))
    meta = call.bool_arg("include_all_metadata")
    return {
        "messages": [message_json(call.state, m, include_metadata=meta) for m in page],
        "has_more": bool(next_cursor),
        "pin_count": 0,
        "channel_actions_ts": None,
        "channel_actions_count": 0,
        "response_metadata": {"next_cursor": next_cursor},
    }


def channel_json(call: Call, channel: Channel) -> Json:
    out: Json = {
        "id": channel.id,
        "name": channel.name,
        "is_channel": not channel.is_private and not channel.is_im,
        "is_group": channel.is_private,
        "is_im": channel.is_im,
        "is_mpim": False,
        "is_private": channel.is_private or channel.is_im,
        "created": channel.created,
        "is_archived": channel.is_archived,
        "is_general": False,
        "unlinked": 0,
        "name_normalized": channel.name,
        "is_shared": False,
        "is_org_shared": False,
        "is_pending_ext_shared": False,
        "pending_shared": [],
        "context_team_id": call.state.team_id,
        "updated": channel.created * 1000,
        "creator": channel.creator,
        "is_ext_shared": False,
        "shared_team_ids": [call.state.team_id],
        "pending_connected_team_ids": [],
        "is_member": call.app.bot_user_id in channel.members,
        "topic": {"value": "", "creator": "", "last_set": 0},
        "purpose": {"value": "", "creator": "", "last_set": 0},
        "previous_names": [],
    }
    if call.bool_arg("include_num_members"):
        out["num_members"] = len(channel.members)
    return out


@method("conversations.info")
async def info(call: Call) -> Json:
    channel = call.channel(scope_kind="read")
    return {"channel": channel_json(call, channel)}


@method("conversations.open")
async def conversations_open(call: Call) -> Json:
    """Only direct messages with one person (multi-person DMs are not modelled)."""
    if call.str_arg("channel"):
        channel = call.channel()
        return {"channel": {"id": channel.id}}
    users = [u for u in (call.str_arg("users") or "").split(",") if u]
    if not users:
        raise ApiError("users_list_not_supplied")
    call.require_scope("im:write")
    if len(users) > 1:
        raise ApiError("method_not_supported_for_channel_type")
    person = call.state.people.get(users[0])
    if person is None:
        raise ApiError("user_not_found")
    channel, created = call.state.dm(person.id, call.app.bot_user_id)
    if not call.bool_arg("return_im"):
        return {"channel": {"id": channel.id}}
    return {
        "no_op": not created,
        "already_open": not created,
        "channel": {
            "id": channel.id,
            "created": channel.created,
            "is_im": True,
            "is_org_shared": False,
            "user": person.id,
            "last_read": "0000000000.000000",
            "latest": None,
            "unread_count": 0,
            "unread_count_display": 0,
            "is_open": True,
            "priority": 0,
        },
    }


@method("conversations.members")
async def members(call: Call) -> Json:
    channel = call.channel(scope_kind="read")
    limit = call.args.get("limit")
    if limit is not None and (not str(limit).isdigit() or int(limit) > MAX_LIMIT):
        raise ApiError("invalid_limit")
    ids = channel.members
    start = 0
    if call.str_arg("cursor"):
        try:
            start = int(base64.b64decode(call.str_arg("cursor") or "").decode().split(":")[1])
        except (ValueError, IndexError):
            raise ApiError("invalid_cursor") from None
    size = int(limit or DEFAULT_LIMIT) or DEFAULT_LIMIT
    page = ids[start : start + size]
    more = start + size < len(ids)
    cursor = base64.b64encode(f"user:{start + size}".encode()).decode() if more else ""
    return {"members": page, "response_metadata": {"next_cursor": cursor}}


def user_json(call: Call, person: Person) -> Json:
    profile: Json = {
        "title": "",
        "phone": "",
        "skype": "",
        "real_name": person.real_name,
        "real_name_normalized": person.real_name,
        "display_name": person.name,
        "display_name_normalized": person.name,
        "status_text": "",
        "status_emoji": "",
        "status_expiration": 0,
        "avatar_hash": "g000000000000",
        "first_name": person.real_name.split(" ")[0],
        "last_name": " ".join(person.real_name.split(" ")[1:]),
        "team": call.state.team_id,
    }
    if person.is_bot:
        profile.update(
            {"bot_id": person.bot_id, "api_app_id": person.app_id, "always_active": True}
        )
    return {
        "id": person.id,
        "team_id": call.state.team_id,
        "name": person.name,
        "deleted": False,
        "color": "9f69e7",
        "real_name": person.real_name,
        "tz": "Europe/London",
        "tz_label": "Greenwich Mean Time",
        "tz_offset": 0,
        "profile": profile,
        "is_admin": person.is_admin,
        "is_owner": person.is_owner,
        "is_primary_owner": person.is_primary_owner,
        "is_restricted": False,
        "is_ultra_restricted": False,
        "is_bot": person.is_bot,
        "is_app_user": False,
        "updated": 1700000000,
        "is_email_confirmed": not person.is_bot,
        "who_can_share_contact_card": "EVERYONE",
    }


@method("users.info")
async def users_info(call: Call) -> Json:
    call.require_scope("users:read")
    user_id = call.str_arg("user", required=True) or ""
    person = call.state.people.get(user_id)
    if person is None:
        raise ApiError("user_not_found")
    return {"user": user_json(call, person)}
