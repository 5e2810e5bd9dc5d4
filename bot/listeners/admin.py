"""The `/flotilla` command and the App Home tab (read-only views for now).

Every subcommand answers ephemerally; an unknown one answers with the help text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from slack_bolt.async_app import AsyncAck, AsyncApp
from slack_sdk.models.blocks import (
    Block,
    ContextBlock,
    DividerBlock,
    HeaderBlock,
    MarkdownTextObject,
    PlainTextObject,
    SectionBlock,
)
from slack_sdk.models.views import View
from slack_sdk.web.async_client import AsyncWebClient

from storage import repository as repo

if TYPE_CHECKING:
    from bot.service import Flotilla

HELP = """*Flotilla* – mention me in a channel with a request; I plan it and hand the steps
to my agents.
`/flotilla help` – this text
`/flotilla agents` – the agents and what they do
`/flotilla plans` – plans that are running or waiting for someone"""


async def agents_text(service: Flotilla) -> str:
    async with service.db.read() as conn:
        agents = await repo.list_agents(conn, service.team_id)
    if not agents:
        return "No agents are configured."
    lines = []
    for agent in agents:
        state = "" if agent.enabled else " _(disabled)_"
        kind = "own Slack app" if agent.identity == "app" else "persona"
        lines.append(
            f"• *{agent.name}*{state} – {agent.description or agent.display_name} ({kind})"
        )
    return "*Agents*\n" + "\n".join(lines)


async def plans_text(service: Flotilla) -> str:
    async with service.db.read() as conn:
        plans = await repo.active_plans(conn, service.team_id)
    if not plans:
        return "No plans are running."
    lines = [
        f"• plan {pid} – {status} – <#{channel}> thread {ts}" for pid, status, channel, ts in plans
    ]
    return "*Active plans*\n" + "\n".join(lines)


async def home_view(service: Flotilla) -> View:
    blocks: list[Block] = [
        HeaderBlock(text=PlainTextObject(text="Flotilla")),
        SectionBlock(text=MarkdownTextObject(text=(await agents_text(service))[:3000])),
        DividerBlock(),
        SectionBlock(text=MarkdownTextObject(text=(await plans_text(service))[:3000])),
        ContextBlock(
            elements=[MarkdownTextObject(text="Mention @Flotilla in a channel to start.")]
        ),
    ]
    return View(type="home", blocks=blocks)


def register_admin(app: AsyncApp, service: Flotilla) -> None:
    @app.command("/flotilla")
    async def flotilla_command(ack: AsyncAck, command: dict[str, Any]) -> None:
        words = (command.get("text") or "").split()
        sub = words[0].lower() if words else "help"
        if sub == "agents":
            await ack(text=await agents_text(service))
        elif sub == "plans":
            await ack(text=await plans_text(service))
        else:
            await ack(text=HELP)

    @app.event("app_home_opened")
    async def home_opened(event: dict[str, Any], client: AsyncWebClient) -> None:
        if event.get("tab", "home") != "home":
            return
        await client.views_publish(user_id=event["user"], view=await home_view(service))
