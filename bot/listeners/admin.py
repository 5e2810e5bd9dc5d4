"""The `/flotilla` command, the agent modal's submission, and the App Home tab.

Every listener acks first. Answers to the command are ephemeral (through the
`response_url`); an unknown or malformed subcommand answers with the help text. The
agent modal opens at once with the command's `trigger_id` (valid for 3 seconds).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from slack_bolt.async_app import AsyncAck, AsyncApp, AsyncRespond
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from flotilla.bot import admin, admin_reports, admin_scheduler
from flotilla.bot.listeners.guard import guarded
from flotilla.bot.listeners.inbound import (
    AgentMetadata,
    BlockActions,
    HomeOpened,
    InvalidPayload,
    SlashCommand,
    ViewSubmission,
    metadata_of,
    parse,
)
from flotilla.bot.views.admin import (
    ADD_AGENT_ACTION,
    AGENT_CALLBACK,
    HELP,
    agent_modal,
    agents_text,
    audit_text,
    home_view,
    plans_text,
    submitted_draft,
    usage_text,
)

if TYPE_CHECKING:
    from flotilla.bot.service import SlackService

log = logging.getLogger(__name__)
AGENT_VERBS = ("add", "edit", "remove", "enable", "disable")
ADMIN_ONLY = ("agent", "audit", "urgent", "batch", "normal")
PRIORITY_LEVELS = ("urgent", "batch", "normal")


@dataclass(frozen=True, slots=True)
class Command:
    """A parsed `/flotilla` command; `problem` set when it was not understood."""

    sub: str
    verb: str = ""
    name: str = ""
    plan_id: int | None = None
    problem: str = ""
    words: tuple[str, ...] = ()  # what followed the subcommand (`quota`)


def parse_command(text: str) -> Command:
    """`/flotilla …` text as a Command; anything unknown or malformed becomes help."""
    words = text.split()
    sub = words[0].lower() if words else "help"
    rest = words[1:]
    if sub in ("help", "agents", "plans", "usage", "audit", "queue") and not rest:
        return Command(sub)
    if sub == "quota":
        return Command(sub, words=tuple(rest))
    if sub in PRIORITY_LEVELS and len(rest) <= 1:
        if not rest:
            return Command(sub)
        if rest[0].isdigit():
            return Command(sub, plan_id=int(rest[0]))
        return Command("help", problem=f"`{rest[0]}` is not a plan number.")
    if sub == "model" and len(rest) <= 1:
        return Command(sub, name=rest[0] if rest else "")
    if sub == "cancel" and len(rest) <= 1:
        if not rest:
            return Command(sub)
        if rest[0].isdigit():
            return Command(sub, plan_id=int(rest[0]))
        return Command("help", problem=f"`{rest[0]}` is not a plan number.")
    if sub == "agent" and rest and rest[0].lower() in AGENT_VERBS:
        verb, names = rest[0].lower(), rest[1:]
        if len(names) == 1 or (verb == "add" and not names):
            return Command(sub, verb=verb, name=names[0].lower() if names else "")
        return Command("help", problem=f"Say which agent: `/flotilla agent {verb} NAME`.")
    return Command("help", problem=f"I don't know `/flotilla {text.strip()}`." if words else "")


def register_admin(app: AsyncApp, service: SlackService) -> None:
    workspace_url = admin_reports.WorkspaceUrl()

    @app.command("/flotilla")
    @guarded
    async def flotilla_command(
        ack: AsyncAck, command: dict[str, Any], respond: AsyncRespond, client: AsyncWebClient
    ) -> None:
        parsed = parse(SlashCommand, command, "a /flotilla command")
        await ack()
        await _command(service, workspace_url, parsed, respond, client)

    @app.view(AGENT_CALLBACK)
    @guarded
    async def on_agent_saved(ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient) -> None:
        submission = parse(ViewSubmission, body, "an agent form")
        metadata_of(submission.view, AgentMetadata)  # only the modal Flotilla opened
        mode, draft, channel = submitted_draft(body["view"])
        user = submission.user.id
        errors = await admin.save_agent(service, user, mode, draft)
        if errors:
            await ack(response_action="errors", errors=errors)
            return
        await ack()
        text = f"*{draft.name}* is {'added' if mode == 'add' else 'saved'}."
        if draft.identity == "app":
            text += " Invite its Slack app to the channels it works in (`/invite @…`)."
        if channel:
            try:
                await client.chat_postEphemeral(channel=channel, user=user, text=text)
            except SlackApiError as exc:  # e.g. not in that channel; the change is saved
                log.info("could not confirm the agent change: %s", exc.response.get("error"))

    @app.action(ADD_AGENT_ACTION)
    @guarded
    async def on_add_from_home(ack: AsyncAck, body: dict[str, Any], client: AsyncWebClient) -> None:
        await ack()
        await _open_add_modal(service, client, parse(BlockActions, body, "an Add agent click"))

    @app.event("app_home_opened")
    @guarded
    async def home_opened(event: dict[str, Any], client: AsyncWebClient) -> None:
        """Checked before the ack (`record_before_ack`): the event fits `HomeOpened`."""
        opened = parse(HomeOpened, event, "an app_home_opened event")
        if opened.tab != "home":
            return
        user = opened.user
        reports = await admin_reports.reports(service, user)
        view = home_view(reports, await workspace_url.get(service))
        await client.views_publish(user_id=user, view=view)


async def _open_add_modal(
    service: SlackService, client: AsyncWebClient, click: BlockActions
) -> None:
    """The App Home's Add agent button: the agent modal, for admins."""
    if await admin.refusal(service, click.user.id):
        return  # the button is shown to admins only; a forged click opens nothing
    if click.trigger_id is None:
        raise InvalidPayload("an Add agent click", "trigger_id: missing")
    try:
        await client.views_open(trigger_id=click.trigger_id, view=agent_modal(None))
    except SlackApiError as exc:
        log.warning("views.open failed: %s", exc.response.get("error"))


async def _command(
    service: SlackService,
    workspace_url: admin_reports.WorkspaceUrl,
    command: SlashCommand,
    respond: AsyncRespond,
    client: AsyncWebClient,
) -> None:
    """After the ack: authorize, then open the agent modal or answer ephemerally."""
    parsed = parse_command(command.text)
    user, channel = command.user_id, command.channel_id
    changes = (parsed.sub == "model" and parsed.name) or (parsed.sub == "quota" and parsed.words)
    if parsed.sub in ADMIN_ONLY or changes:
        refusal = await admin.refusal(service, user)
        if refusal:
            await respond(text=refusal, response_type="ephemeral")
            return
    if parsed.sub == "agent" and parsed.verb in ("add", "edit"):
        problem = await _open_agent_modal(service, client, command, parsed)
        if problem:
            await respond(text=problem, response_type="ephemeral")
        return
    try:
        text = await _answer(service, parsed, user, channel, await workspace_url.get(service))
    except Exception:  # people see a sentence; the traceback goes to the log
        log.exception("/flotilla %s failed", parsed.sub)
        text = "Sorry, that did not work; the error is in Flotilla's log. Please try again."
    await respond(text=text, response_type="ephemeral")


async def _open_agent_modal(
    service: SlackService, client: AsyncWebClient, command: SlashCommand, parsed: Command
) -> str | None:
    """Open the add/edit modal; a sentence instead when it cannot be opened."""
    agent = await service.agent(parsed.name) if parsed.name else None
    if parsed.verb == "edit" and agent is None:
        return f"There is no agent named {parsed.name}. `/flotilla agents` lists them."
    if parsed.verb == "add" and agent is not None:
        return f"An agent named {parsed.name} exists already: `/flotilla agent edit {parsed.name}`."
    if command.trigger_id is None:
        return "Slack did not send what opens a form; please run the command again."
    view = agent_modal(agent, name=parsed.name, channel=command.channel_id)
    try:
        await client.views_open(trigger_id=command.trigger_id, view=view)
    except SlackApiError as exc:
        log.warning("views.open failed: %s", exc.response.get("error"))
        return "Slack did not open the form in time; please run the command again."
    return None


async def _answer(service: SlackService, parsed: Command, user: str, channel: str, url: str) -> str:
    """The ephemeral answer to every subcommand but the modal ones."""
    if parsed.sub == "agents":
        return agents_text(await admin_reports.agents(service))
    if parsed.sub == "plans":
        waits = await admin_scheduler.plan_waits(service)
        return plans_text(await admin_reports.active_plans(service), url, waits)
    if parsed.sub in ("queue", "quota", *PRIORITY_LEVELS):
        return await _scheduler_answer(service, parsed, user, channel)
    if parsed.sub == "cancel":
        return await admin.cancel(service, user, channel, parsed.plan_id)
    if parsed.sub == "usage":
        return usage_text(*await admin_reports.usage(service))
    if parsed.sub == "audit":
        return audit_text(await admin_reports.audit_trail(service))
    if parsed.sub == "model":
        if parsed.name:
            return await admin.set_workspace_model(service, user, parsed.name)
        return await admin.workspace_model(service)
    if parsed.sub == "agent" and parsed.verb == "remove":
        return await admin.remove_agent(service, user, parsed.name)
    if parsed.sub == "agent" and parsed.verb in ("enable", "disable"):
        return await admin.set_enabled(service, user, parsed.name, parsed.verb == "enable")
    return f"{parsed.problem}\n{HELP}".strip()


async def _scheduler_answer(service: SlackService, parsed: Command, user: str, channel: str) -> str:
    """`/flotilla queue`, `quota [change]`, `urgent|batch|normal [plan]`."""
    if parsed.sub == "queue":
        return await admin_scheduler.queue_text(service)
    if parsed.sub == "quota" and parsed.words:
        change = admin_scheduler.parse_quota(list(parsed.words))
        return await admin_scheduler.set_quota(service, user, change)
    if parsed.sub == "quota":
        return await admin_scheduler.quota_text(service)
    return await admin_scheduler.mark(service, user, parsed.sub, channel, parsed.plan_id)
