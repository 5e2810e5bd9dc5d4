"""The local workspace as the modules it is built from see it.

`LocalWorkspace` (local_slack/workspace.py) composes the Web API, events, interactivity and
Socket Mode, and hands itself to each; they see it through this protocol, so none of them
imports the module that imports them. The hub and the interactivity are typed where they
are defined (`socket_mode.SocketHub`, `interactivity.Interactivity`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from flotilla.local_slack.events import EventDispatcher, SocketSender
from flotilla.local_slack.ratelimit import RateLimiter
from flotilla.local_slack.state import WorkspaceState


class Workspace(Protocol):
    state: WorkspaceState
    events: EventDispatcher
    clock: Callable[[], float]
    base_url: str
    rate_limiter: RateLimiter
    api_log: list[tuple[str, str]]
    refusals: dict[str, str]

    @property
    def api_url(self) -> str: ...

    @property
    def socket_hub(self) -> SocketSender:
        """A `socket_mode.SocketHub` (narrowed by `socket_mode.hub_of`)."""
        ...

    @property
    def interactivity(self) -> object:
        """An `interactivity.Interactivity` (narrowed by `interactivity.interactivity_of`)."""
        ...
