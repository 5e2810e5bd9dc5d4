"""The local stack: the local Slack workspace, Flotilla's real Bolt app over HTTP, a database.

Used by `flotilla dev` (try it from a terminal), `flotilla demo` (a scripted scenario) and
the end-to-end tests. The commander app is installed with the scopes and events of
`manifest.yml`; `researcher` gets its own Slack app, the other agents post as personas,
so both identity kinds are on show.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from aiohttp import web
from pydantic_ai.models import Model

from flotilla.agents.core.clock import Clock, utcnow
from flotilla.bot.app import build_app
from flotilla.bot.http import web_app
from flotilla.bot.identities import make_client
from flotilla.bot.manifest import commander_manifest
from flotilla.bot.secrets import TokenCipher
from flotilla.bot.service import Options, SlackService
from flotilla.local_slack import InstalledApp, LocalWorkspace, Person
from flotilla.local_slack.events import SLACK_RETRY_DELAYS
from flotilla.local_slack.records import Channel
from flotilla.storage import migrate
from flotilla.storage.agents import update_agent
from flotilla.storage.db import Database

COMMANDER_APP = "Flotilla"


@dataclass
class LocalStack:
    """Everything `start_local_stack` started, to use and then `stop()`."""

    workspace: LocalWorkspace
    commander: InstalledApp
    service: SlackService
    channel: Channel
    people: dict[str, Person]
    agent_apps: dict[str, InstalledApp] = field(default_factory=dict)
    runner: web.AppRunner | None = None
    owns_db: bool = True

    async def stop(self) -> None:
        await self.service.stop()
        if self.runner is not None:
            await self.runner.cleanup()
        await self.workspace.stop()
        if self.owns_db:
            await self.service.db.dispose()

    async def restart(self, model: Model | None = None) -> SlackService:
        """Stop Flotilla's process (its jobs die mid-run) and start a new one on the same
        database and workspace, as after a crash or a deploy."""
        old = self.service
        await old.stop()
        if self.runner is not None:
            await self.runner.cleanup()
        self.service = SlackService(
            old.db,
            old.client,
            api_url=self.workspace.api_url,
            cipher=old.cipher,
            options=old.options,
            clock=old.clock,
            model=model if model is not None else old.model,
        )
        await self.service.start()
        await self._serve()
        return self.service

    async def _serve(self) -> None:
        app = build_app(self.service, signing_secret=self.commander.signing_secret)
        self.runner = web.AppRunner(web_app(app, self.service), access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = self.runner.addresses[0][1]
        self.workspace.set_request_url(self.commander, f"http://127.0.0.1:{port}/slack/events")


def _manifest_scopes_and_events() -> tuple[list[str], list[str]]:
    manifest = commander_manifest()
    scopes = list(manifest["oauth_config"]["scopes"]["bot"])
    events = list(manifest["settings"]["event_subscriptions"]["bot_events"])
    return scopes, events


async def start_local_stack(
    db: Database | str,
    *,
    options: Options | None = None,
    people: Sequence[tuple[str, bool]] = (("maya", False), ("dev", False), ("alex", True)),
    own_app_agents: Iterable[str] = ("researcher",),
    ack_timeout: float = 3.0,
    retry_delays: Sequence[float] = SLACK_RETRY_DELAYS,
    rate_limits: bool = False,
    workspace_port: int = 0,
    clock: Clock = utcnow,
    model: Model | None = None,
) -> LocalStack:
    """Start the workspace, install the apps, migrate the database and serve Flotilla.

    `people` are (name, is_admin) pairs; everyone joins `#launch`.
    """
    workspace = LocalWorkspace(
        ack_timeout=ack_timeout, retry_delays=retry_delays, rate_limits=rate_limits
    )
    await workspace.start("127.0.0.1", workspace_port)
    scopes, events = _manifest_scopes_and_events()
    commander = workspace.install_app(
        COMMANDER_APP, scopes=scopes, bot_events=events, commands={"/flotilla": None}
    )
    members = {name: workspace.add_person(name, admin=admin) for name, admin in people}
    channel = workspace.create_channel("launch", [*members.values(), commander])

    owns_db = isinstance(db, str)
    database = Database(db) if isinstance(db, str) else db
    await migrate.upgrade(database)
    cipher = TokenCipher(TokenCipher.new_key())
    client = make_client(commander.bot_token, workspace.api_url)
    # attachments are fetched from the workspace itself, as from Slack's file host
    options = replace(options or Options(), file_origins=(workspace.base_url.rstrip("/"),))
    service = SlackService(
        database,
        client,
        api_url=workspace.api_url,
        cipher=cipher,
        options=options,
        clock=clock,
        model=model,
    )
    await service.start()
    stack = LocalStack(workspace, commander, service, channel, members, owns_db=owns_db)
    for name in own_app_agents:
        await give_own_app(stack, name)

    await stack._serve()
    return stack


async def give_own_app(stack: LocalStack, name: str) -> InstalledApp | None:
    """Install a Slack app for agent `name` and switch the agent to that identity."""
    service = stack.service
    agent = await service.agent(name)
    if agent is None:
        return None
    scopes = ["chat:write", "files:write", "files:read"]
    installed = stack.workspace.install_app(
        agent.display_name or name, scopes=scopes, bot_events=[]
    )
    stack.workspace.invite(stack.channel, installed)
    async with service.db.write() as conn:
        await update_agent(
            conn,
            service.team_id,
            name,
            service.clock(),
            identity="app",
            bot_token_encrypted=service.cipher.encrypt(installed.bot_token),
            bot_user_id=installed.bot_user_id,
            bot_id=installed.bot_id,
            app_id=installed.app_id,
        )
    service.roster.forget()
    stack.agent_apps[name] = installed
    return installed
