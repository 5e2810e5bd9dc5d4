"""The Web API's registry: method handlers, their call context and errors.

Each `web_*` module registers its methods here with `@method("chat.postMessage")`;
`server.py` builds the aiohttp application around `METHODS`.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from flotilla.local_slack.host import Workspace
from flotilla.local_slack.records import Channel, InstalledApp, Json
from flotilla.local_slack.state import WorkspaceState


class ApiError(Exception):
    """A Slack Web API error answer: `error` plus optional extra fields."""

    def __init__(self, error: str, **extra: Any) -> None:
        super().__init__(error)
        self.error = error
        self.extra = extra


@dataclass
class Call:
    """One Web API call: the calling app, its arguments and the workspace."""

    method: str
    app: InstalledApp
    args: dict[str, Any]
    ws: Workspace

    @property
    def state(self) -> WorkspaceState:
        return self.ws.state

    def arg(self, name: str, *, required: bool = False) -> Any:
        value = self.args.get(name)
        if required and (value is None or value == ""):
            raise ApiError("invalid_arguments", response_metadata=missing_arg(name))
        return value

    def str_arg(self, name: str, *, required: bool = False) -> str | None:
        value = self.arg(name, required=required)
        return None if value is None else str(value)

    def bool_arg(self, name: str) -> bool:
        value = self.args.get(name)
        return value is True or str(value).lower() in ("1", "true")

    def json_arg(self, name: str, error: str) -> Any:
        """An argument that clients send either as JSON text (forms) or as a JSON value."""
        value = self.args.get(name)
        if isinstance(value, str):
            if value == "":
                return None
            try:
                return json.loads(value)
            except ValueError:
                raise ApiError(error) from None
        return value

    def require_scope(self, *needed: str) -> None:
        """Raise `missing_scope` unless the app holds one of `needed`."""
        if not any(s in self.app.scopes for s in needed):
            raise ApiError(
                "missing_scope", needed=",".join(needed), provided=",".join(sorted(self.app.scopes))
            )

    def channel(self, *, scope_kind: str | None = None) -> Channel:
        """The `channel` argument as a channel this app can see (private ones need membership)."""
        # Slack answers a missing channel argument like an unknown one.
        channel_id = self.str_arg("channel") or ""
        channel = self.state.channels.get(channel_id)
        visible = channel is not None and (
            not (channel.is_private or channel.is_im) or self.app.bot_user_id in channel.members
        )
        if channel is None or not visible:
            raise ApiError("channel_not_found")
        if scope_kind is not None:
            prefix = "im" if channel.is_im else "groups" if channel.is_private else "channels"
            self.require_scope(f"{prefix}:{scope_kind}")
        return channel


def missing_arg(name: str) -> Json:
    return {"messages": [f"[ERROR] missing required field: {name}"]}


WORKSPACE: web.AppKey[Workspace] = web.AppKey("workspace")
Handler = Callable[[Call], Awaitable[Json]]
METHODS: dict[str, Handler] = {}


def method(name: str) -> Callable[[Handler], Handler]:
    """Register a Web API method handler under its Slack name."""

    def register(fn: Handler) -> Handler:
        METHODS[name] = fn
        return fn

    return register
