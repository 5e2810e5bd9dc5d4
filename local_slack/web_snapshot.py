"""What one person sees of the workspace, as JSON for the browser page: people, apps,
the channels they can open with their messages, their ephemeral messages, their open modal
and their App Home views. Rebuilt on every state change and pushed to the page."""

from __future__ import annotations

import time

from flotilla.local_slack.records import Channel, InstalledApp, Json, Message, Person, View
from flotilla.local_slack.shapes import message_json
from flotilla.local_slack.state import WorkspaceState
from flotilla.local_slack.transcript import author
from flotilla.local_slack.web_assistant import live_statuses

MESSAGES_PER_CHANNEL = 500  # the newest messages (with their threads) of each channel


def visible_channels(state: WorkspaceState, viewer: Person) -> list[Channel]:
    """Public channels, plus private channels and direct messages the viewer belongs to."""
    return [
        c
        for c in state.channels.values()
        if not c.is_archived and (not (c.is_private or c.is_im) or viewer.id in c.members)
    ]


def person_json(person: Person) -> Json:
    return {
        "id": person.id,
        "name": person.name,
        "real_name": person.real_name,
        "is_admin": person.is_admin,
        "is_owner": person.is_owner,
        "is_bot": person.is_bot,
        "app_id": person.app_id,
    }


def app_json(app: InstalledApp) -> Json:
    return {
        "app_id": app.app_id,
        "name": app.name,
        "bot_user_id": app.bot_user_id,
        "bot_id": app.bot_id,
        "commands": sorted(app.commands),
        "has_home": "app_home_opened" in app.bot_events,
    }


def channel_json(state: WorkspaceState, channel: Channel, viewer: Person) -> Json:
    other = [m for m in channel.members if m != viewer.id]
    if channel.is_im:  # a direct message is named after the other member
        label = state.user_name(other[0]) if other else viewer.name
        app = state.app_by_bot_user(other[0]) if other else None
        label = app.name if app is not None else label
    else:
        label = channel.name
    return {
        "id": channel.id,
        "name": channel.name,
        "label": label,
        "is_private": channel.is_private,
        "is_im": channel.is_im,
        "members": list(channel.members),
        "is_member": viewer.id in channel.members,
    }


def page_message(state: WorkspaceState, msg: Message) -> Json:
    """The Web API shape of a message plus what the page needs to draw it."""
    out = message_json(state, msg, include_metadata=False)
    out["channel"] = msg.channel
    out["author_name"] = author(state, msg)
    out["is_app"] = msg.bot_id is not None
    out["streaming"] = msg.streaming
    if msg.deleted:  # a deleted parent with replies stays as a placeholder, as in Slack
        out.update(text="This message was deleted.", blocks=None, deleted=True)
    return out


def channel_messages(state: WorkspaceState, channel_id: str) -> list[Json]:
    """The newest top-level messages and every reply of their threads, in ts order."""
    stored = state.messages.get(channel_id, {})
    tops = [
        m
        for m in stored.values()
        if (not m.thread_ts or m.thread_ts == m.ts or m.subtype == "thread_broadcast")
        and (not m.deleted or m.replies)
    ]
    tops = sorted(tops, key=lambda m: float(m.ts))[-MESSAGES_PER_CHANNEL:]
    shown: dict[str, Message] = {m.ts: m for m in tops}
    for parent in tops:
        for reply in state.thread(channel_id, parent.ts)[1:]:
            shown[reply.ts] = reply
    return [page_message(state, m) for m in sorted(shown.values(), key=lambda m: float(m.ts))]


def view_json(view: View) -> Json:
    out = view.to_json()
    out["errors"] = dict(view.errors)
    return out


def statuses_json(state: WorkspaceState, channels: list[Channel], now: float) -> list[Json]:
    """Apps' status lines under threads ("Flotilla is thinking…") in these channels."""
    visible = {c.id for c in channels}
    out = []
    for channel_id, thread_ts, status in live_statuses(state, now):
        app = state.apps.get(status.app_id)
        if channel_id in visible and app is not None:
            out.append(
                {
                    "channel": channel_id,
                    "thread_ts": thread_ts,
                    "text": f"{status.username or app.name} {status.status}",
                    "loading_messages": status.loading_messages,
                }
            )
    return out


def snapshot(state: WorkspaceState, viewer: Person, now: float | None = None) -> Json:
    """Everything the page shows to `viewer`, as of `state.version` (and `now`, the
    workspace clock, for status lines that time out)."""
    channels = visible_channels(state, viewer)
    ephemerals = [
        {
            "channel": e.channel,
            "ts": e.ts,
            "text": e.text,
            "blocks": e.blocks,
            "thread_ts": e.thread_ts,
            "app_id": e.app_id,
            "bot_id": e.bot_id,
            "author_name": state.apps[e.app_id].name if e.app_id in state.apps else "Slackbot",
            "is_app": True,
            "ephemeral": True,
        }
        for e in state.ephemerals
        if e.user == viewer.id
    ]
    modal = state.top_modal(viewer.id)
    homes = {
        app_id: view_json(state.views[view_id])
        for (user_id, app_id), view_id in state.home_views.items()
        if user_id == viewer.id
    }
    return {
        "version": state.version,
        "team": {"id": state.team_id, "name": state.team_name, "domain": state.domain},
        "me": viewer.id,
        "people": [person_json(p) for p in state.people.values()],
        "apps": [app_json(a) for a in state.apps.values()],
        "channels": [channel_json(state, c, viewer) for c in channels],
        "messages": {c.id: channel_messages(state, c.id) for c in channels},
        "ephemerals": ephemerals,
        "modal": view_json(modal) if modal is not None else None,
        "homes": homes,
        "statuses": statuses_json(state, channels, time.time() if now is None else now),
    }
