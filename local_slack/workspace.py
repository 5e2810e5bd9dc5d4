"""`LocalWorkspace`: the local Slack-compatible workspace as one object to start, populate
and stop – used by the e2e tests, the terminal trial and `flotilla dev`."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import aiohttp
from aiohttp import web

from flotilla.local_slack.events import SLACK_RETRY_DELAYS, EventDispatcher
from flotilla.local_slack.interactivity import Interactivity
from flotilla.local_slack.ratelimit import RateLimiter
from flotilla.local_slack.records import Channel, InstalledApp, Person, new_id
from flotilla.local_slack.server import build_app
from flotilla.local_slack.socket_mode import SocketHub
from flotilla.local_slack.state import WorkspaceState

DEFAULT_SCOPES = (
    "app_mentions:read",
    "channels:history",
    "channels:read",
    "chat:write",
    "commands",
    "groups:history",
    "groups:read",
    "im:history",
    "im:read",
    "im:write",
    "users:read",
)
DEFAULT_EVENTS = ("app_mention", "message.channels", "app_home_opened")
# Slack refuses a bot event subscription without its scope (slack-api-ref events.json).
EVENT_SCOPES = {
    "app_mention": "app_mentions:read",
    "message.channels": "channels:history",
    "message.groups": "groups:history",
    "message.im": "im:history",
    "message.mpim": "mpim:history",
}


class LocalWorkspace:
    """A Slack workspace on loopback: Web API at `api_url`, events and interactivity to apps."""

    def __init__(
        self,
        *,
        team_name: str = "Flotilla Local",
        ack_timeout: float = 3.0,
        retry_delays: Sequence[float] = SLACK_RETRY_DELAYS,
        rate_limits: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.state = WorkspaceState(team_name)
        self.clock = clock  # trigger-id expiry; tests inject a clock they can move
        self.events = EventDispatcher(
            self.state, ack_timeout=ack_timeout, retry_delays=retry_delays
        )
        self.interactivity = Interactivity(self, timeout=ack_timeout)
        self.socket_hub = SocketHub()
        self.events.socket_hub = self.socket_hub
        self.rate_limiter = RateLimiter(enabled=rate_limits)
        self.api_log: list[tuple[str, str]] = []  # (method, "ok" or error) of every Web API call
        # method -> the error it answers (a feature this workspace does not have: `refuse`)
        self.refusals: dict[str, str] = {}
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    @property
    def api_url(self) -> str:
        """The Web API base URL for `AsyncWebClient(base_url=…)` (ends with `/`)."""
        return self.base_url + "api/"

    @property
    def page_url(self) -> str:
        """The browser page: the workspace as a person sees it (see web_page.py)."""
        return self.base_url + "client/"

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        """Serve on host:port (0 = an ephemeral port, read it back from `api_url`)."""
        self.events.session = aiohttp.ClientSession()
        self._runner = web.AppRunner(build_app(self), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        server = site._server
        assert isinstance(server, asyncio.Server) and server.sockets
        bound_port = server.sockets[0].getsockname()[1]
        self.base_url = f"http://{host}:{bound_port}/"
        self.state.files.base_url = self.base_url

    async def stop(self) -> None:
        await self.events.stop()
        await self.socket_hub.close_all()
        if self.events.session is not None:
            await self.events.session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    # ----- population ----------------------------------------------------------------------

    def refuse(self, method: str, error: str = "feature_disabled") -> None:
        """From now on `method` answers `error` (e.g. streaming switched off in this workspace,
        `messages_tab_disabled`; agent sessions not enabled, `feature_disabled`)."""
        self.refusals[method] = error

    def add_person(self, name: str, *, admin: bool = False, owner: bool = False) -> Person:
        return self.state.add_person(name, admin=admin, owner=owner)

    def install_app(
        self,
        name: str,
        *,
        request_url: str | None = None,
        interactivity_url: str | None = None,
        scopes: Iterable[str] = DEFAULT_SCOPES,
        bot_events: Iterable[str] | None = None,
        commands: dict[str, str | None] | None = None,
        signing_secret: str | None = None,
        socket_mode: bool = False,
    ) -> InstalledApp:
        """Install an app with its own bot user and credentials (ValueError, as Slack refuses it,
        when a bot event's scope is missing).

        `commands` maps "/cmd" to the URL Slack posts it to (None = the request URL). With
        `socket_mode` the app gets an `app_token` and receives everything over its WebSocket."""
        scopes = frozenset(scopes)
        if bot_events is None:  # the default subscriptions these scopes allow
            bot_events = [e for e in DEFAULT_EVENTS if EVENT_SCOPES.get(e, "") in scopes | {""}]
        bot_events = frozenset(bot_events)
        for event in sorted(bot_events):
            needed = EVENT_SCOPES.get(event)
            if needed and needed not in scopes:
                raise ValueError(f"the {event} event needs the {needed} scope")
        app = InstalledApp(
            app_id=new_id("A"),
            name=name,
            bot_user_id=new_id("U"),
            bot_id=new_id("B"),
            bot_token=f"xoxb-{secrets.randbelow(10**12)}-{secrets.randbelow(10**12)}-"
            + secrets.token_urlsafe(18),
            signing_secret=signing_secret or secrets.token_hex(16),
            verification_token=secrets.token_urlsafe(18),
            scopes=scopes,
            bot_events=bot_events,
            request_url=request_url,
            interactivity_url=interactivity_url,
            commands={cmd: url or request_url or "" for cmd, url in (commands or {}).items()},
            created=int(time.time()),
            socket_mode=socket_mode,
            app_token=None,
        )
        if socket_mode:
            app.app_token = _app_token(app.app_id)
        self.state.add_app(app)
        return app

    def install_manifest(
        self,
        manifest: Mapping[str, Any],
        *,
        request_url: str | None = None,
        socket_mode: bool | None = None,
    ) -> InstalledApp:
        """Install an app as Slack would from its manifest (scopes, bot events, slash commands,
        Socket Mode); `request_url` stands in for the manifest's URLs when given."""
        features = manifest.get("features", {})
        settings = manifest.get("settings", {})
        subscriptions = settings.get("event_subscriptions", {})
        name = (
            features.get("bot_user", {}).get("display_name")
            or manifest["display_information"]["name"]
        )
        commands = {
            c["command"]: None if request_url else c.get("url")
            for c in features.get("slash_commands", [])
        }
        interactivity_url = settings.get("interactivity", {}).get("request_url")
        if socket_mode is None:
            socket_mode = bool(settings.get("socket_mode_enabled", False))
        return self.install_app(
            name,
            request_url=request_url or subscriptions.get("request_url"),
            interactivity_url=None if request_url else interactivity_url,
            scopes=manifest.get("oauth_config", {}).get("scopes", {}).get("bot", []),
            bot_events=subscriptions.get("bot_events", []),
            commands=commands,
            socket_mode=socket_mode,
        )

    def set_request_url(self, app: InstalledApp, url: str) -> None:
        """Point an installed app at the URL its process listens on (known only after it starts)."""
        app.request_url = url
        app.commands = {cmd: u or url for cmd, u in app.commands.items()}

    def create_channel(
        self,
        name: str,
        members: Iterable[Person | InstalledApp | str] = (),
        *,
        private: bool = False,
    ) -> Channel:
        return self.state.add_channel(name, [_user_id(m) for m in members], private=private)

    def invite(self, channel: Channel, member: Person | InstalledApp | str) -> None:
        self.state.join(channel.id, _user_id(member))


def _user_id(member: Person | InstalledApp | str) -> str:
    if isinstance(member, InstalledApp):
        return member.bot_user_id
    if isinstance(member, Person):
        return member.id
    return member


def _app_token(app_id: str) -> str:
    return f"xapp-1-{app_id}-{secrets.randbelow(10**13)}-{secrets.token_hex(32)}"
