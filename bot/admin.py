"""Administration: who may configure Flotilla, and its changes – agents saved (validated),
enabled, disabled, removed; the workspace's default model; plans cancelled – each audited.
The reports behind `/flotilla` and the App Home tab: `bot/admin_reports.py`.

Functions here take parsed input and return sentences or field errors; listeners
(`bot/listeners/admin.py`) ack, parse, call them and render (`bot/views/admin.py`).
Secrets (agent bot tokens) are encrypted before they are stored and never appear in an
answer, a log line or the audit log.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from slack_sdk.errors import SlackApiError

from flotilla.agents.planning.plan import CancelPlan
from flotilla.bot.admin_reports import agents
from flotilla.bot.agent_form import AgentDraft, Mode, agent_fields, draft_problems
from flotilla.bot.identities import make_client
from flotilla.bot.secrets import SecretsError
from flotilla.storage import agents as agent_store
from flotilla.storage import plans as plan_store
from flotilla.storage.agents import create_agent, update_agent
from flotilla.storage.audit import audit
from flotilla.storage.plans import conversations_waiting_on_agent
from flotilla.storage.records import AgentRecord
from flotilla.storage.sql import DuplicateError
from flotilla.storage.workspaces import set_workspace_default_model, workspace_default_model

if TYPE_CHECKING:
    from flotilla.bot.service import SlackService

log = logging.getLogger(__name__)

REFUSAL = (
    "Sorry, only workspace admins and owners (or people on Flotilla's admin list) can "
    "change Flotilla's configuration."
)


# --- authorization ------------------------------------------------------------------------


async def refusal(service: SlackService, user: str) -> str | None:
    """None when `user` may administer Flotilla, else the sentence to show them."""
    return None if await service.is_admin(user) else REFUSAL


# --- saving an agent ----------------------------------------------------------------------


async def save_agent(
    service: SlackService, user: str, mode: Mode, draft: AgentDraft
) -> dict[str, str]:
    """Validate and store an added or edited agent, audited. Errors per block ({} = saved)."""
    if await refusal(service, user):
        return {"description": REFUSAL}
    errors = draft_problems(draft, mode, service.options.provider_keys)
    existing = await service.agent(draft.name)
    if mode == "add" and existing is not None and "name" not in errors:
        errors["name"] = f"An agent named {draft.name} exists already."
    if mode == "edit" and existing is None:
        return {"description": f"The agent {draft.name} no longer exists."}
    if errors:
        return errors
    identity, problem = await _identity_fields(service, draft, existing)
    if problem:
        return {"bot_token": problem}
    fields = agent_fields(draft) | identity
    async with service.db.write() as conn:
        if existing is None:
            try:
                await create_agent(conn, service.team_id, draft.name, service.clock(), **fields)
            except DuplicateError:
                return {"name": f"An agent named {draft.name} exists already."}
            details: dict[str, Any] = {"identity": fields["identity"], "model": fields["model"]}
        else:
            await update_agent(conn, service.team_id, draft.name, service.clock(), **fields)
            details = {"changed": _changed(existing, fields, bool(draft.bot_token.strip()))}
        await audit(
            conn,
            team_id=service.team_id,
            actor=user,
            action=f"agent.{mode}",
            target=draft.name,
            details=details,
            now=service.clock(),
        )
    service.roster.forget()  # after the commit: the next look-up reads the change
    return {}


def _changed(before: AgentRecord, fields: dict[str, Any], new_token: bool) -> list[str]:
    """Names of the columns an edit changed; a new token shows as `bot_token`, never its value."""
    changed = [
        k
        for k, v in fields.items()
        if k not in ("bot_token_encrypted", "bot_user_id", "bot_id", "app_id")
        and getattr(before, k) != v
    ]
    return changed + (["bot_token"] if new_token else [])


async def _identity_fields(
    service: SlackService, draft: AgentDraft, existing: AgentRecord | None
) -> tuple[dict[str, Any], str | None]:
    """The identity columns to store, or why the token cannot be used."""
    if draft.identity == "persona":
        cleared = {"bot_token_encrypted": None, "bot_user_id": None, "bot_id": None, "app_id": None}
        return {"identity": "persona", **cleared}, None
    token = draft.bot_token.strip()
    if not token:
        if existing is not None and existing.bot_token_encrypted:
            return {"identity": "app"}, None  # keep the stored token
        return {}, "Paste the bot token (xoxb-…) of the agent's own Slack app."
    try:
        auth = await make_client(token, service.poster.base_url).auth_test()
    except SlackApiError as exc:
        return {}, f"Slack refused this token ({exc.response.get('error', 'error')})."
    if auth.get("team_id") != service.team_id:
        return {}, "This token belongs to another workspace."
    if auth.get("bot_id") == service.bot_id:
        return {}, "That is Flotilla's own token: give the agent a Slack app of its own."
    taken = [
        a.name
        for a in await agents(service)
        if a.bot_id == auth.get("bot_id") and a.name != draft.name
    ]
    if taken:
        return {}, f"The agent {taken[0]} uses this Slack app already."
    try:
        encrypted = service.cipher.encrypt(token)
    except SecretsError as exc:
        return {}, str(exc)
    return {
        "identity": "app",
        "bot_token_encrypted": encrypted,
        "bot_user_id": auth.get("user_id"),
        "bot_id": auth.get("bot_id"),
        "app_id": auth.get("app_id"),
    }, None


# --- the workspace's default model ---------------------------------------------------------

MODEL_RESETS = ("default", "reset")


async def workspace_model(service: SlackService) -> str:
    """Which model the workspace uses when an agent names none (`/flotilla model`)."""
    async with service.db.read() as conn:
        chosen = await workspace_default_model(conn, service.team_id)
    fallback = service.options.default_model
    if chosen:
        return (
            f"This workspace's default model is `{chosen}` (set by an admin; the server's is "
            f"`{fallback}`). Agents with a model of their own keep it."
        )
    return (
        f"This workspace uses the server's default model, `{fallback}`. Admins can choose "
        "another: `/flotilla model openai:gpt-4.1` (`/flotilla model default` goes back)."
    )


async def set_workspace_model(service: SlackService, user: str, spec: str) -> str:
    """Set (or with `default`/`reset` clear) the workspace's default model (audited)."""
    from flotilla.agents.running.models import ModelSpecError, resolve_model

    chosen: str | None = None if spec.lower() in MODEL_RESETS else spec
    if chosen is not None:
        try:  # the string and its provider key, without a request: the answer must be quick
            resolve_model(chosen, service.options.provider_keys)
        except ModelSpecError as exc:
            return f"That model cannot be used: {exc}. Nothing was changed."
    async with service.db.write() as conn:
        await set_workspace_default_model(conn, service.team_id, chosen)
        await audit(
            conn,
            team_id=service.team_id,
            actor=user,
            action="workspace.model",
            target=chosen or service.options.default_model,
            now=service.clock(),
        )
    service.roster.forget()  # the next run reads the new model
    log.info(
        "workspace default model set to %s",
        chosen or "the server's default",
        extra={"team": service.team_id},
    )
    return await workspace_model(service)


# --- enabling, disabling, removing ---------------------------------------------------------


async def set_enabled(service: SlackService, user: str, name: str, enabled: bool) -> str:
    """Enable or disable an agent (audited); disabling fails its pending steps."""
    verb = "enabled" if enabled else "disabled"
    async with service.db.write() as conn:
        try:
            await update_agent(conn, service.team_id, name, service.clock(), enabled=enabled)
        except LookupError:
            return f"There is no agent named {name}. `/flotilla agents` lists them."
        await audit(
            conn,
            team_id=service.team_id,
            actor=user,
            action=f"agent.{'enable' if enabled else 'disable'}",
            target=name,
            now=service.clock(),
        )
    service.roster.forget()
    answer = f"*{name}* is {verb}."
    if not enabled:
        answer += await _fail_pending(service, name, f"the agent {name} was disabled by <@{user}>")
    return answer


async def remove_agent(service: SlackService, user: str, name: str) -> str:
    """Remove an agent (audited); its pending steps fail."""
    async with service.db.write() as conn:
        if not await agent_store.remove_agent(conn, service.team_id, name):
            return f"There is no agent named {name}. `/flotilla agents` lists them."
        await audit(
            conn,
            team_id=service.team_id,
            actor=user,
            action="agent.remove",
            target=name,
            now=service.clock(),
        )
    service.roster.forget()
    reason = f"the agent {name} was removed by <@{user}>"
    return f"*{name}* is removed." + await _fail_pending(service, name, reason)


async def _fail_pending(service: SlackService, name: str, reason: str) -> str:
    """Fail the agent's pending steps in every running plan; say so in each thread."""
    async with service.db.read() as conn:
        conversations = await conversations_waiting_on_agent(conn, service.team_id, name)
    failed = 0
    for conversation_id in conversations:
        decision = await service.reconciler.fail_steps_of(conversation_id, name, reason)
        if decision is None or not decision.changed or decision.before is None:
            continue
        was = {s.index: s.status for s in decision.before.steps}
        indexes = [
            s.index for s in decision.plan.steps if s.assignee == name and was[s.index] == "pending"
        ]
        failed += len(indexes)
        steps = ", ".join(str(i) for i in indexes)
        try:
            await service.say(
                await service.conversation(conversation_id),
                f"⚠️ Step {steps} will not run: {reason}. "
                "The plan follows the step's failure policy.",
            )
        except SlackApiError as exc:  # the plan changed already; the card shows the reason
            log.warning("could not post the note in the thread: %s", exc.response.get("error"))
    if not failed:
        return ""
    return f" {failed} pending step(s) in {len(conversations)} plan(s) failed with that reason."


# --- cancelling a plan ----------------------------------------------------------------------


async def cancel(service: SlackService, user: str, channel: str, plan_id: int | None) -> str:
    """Cancel a plan by id, or the one running in `channel` (requester or admin; audited)."""
    async with service.db.read() as conn:
        plans = await plan_store.active_plans(conn, service.team_id)
    if plan_id is None:
        here = [p for p in plans if p[2] == channel]
        if not here:
            return "No plan is running in this channel. `/flotilla plans` lists them all."
        if len(here) > 1:
            ids = ", ".join(str(p[0]) for p in here)
            example = f"`/flotilla cancel {here[0][0]}`"
            return f"Several plans are running here ({ids}): say which, e.g. {example}."
        plan_id = here[0][0]
    found = next((p for p in plans if p[0] == plan_id), None)
    if found is None:
        return f"Plan {plan_id} is not running. `/flotilla plans` lists the running ones."
    _pid, _status, plan_channel, thread_ts = found
    conversation = await service.find_conversation(plan_channel, thread_ts)
    if conversation is None:
        return f"Plan {plan_id} is not running. `/flotilla plans` lists the running ones."
    if user != conversation.requested_by and not await service.is_admin(user):
        return f"Only <@{conversation.requested_by}> or a workspace admin can cancel this plan."
    # the stop notice, the runs stopped and the forms closed follow from the decision
    await service.reconciler.reconcile(
        conversation.id,
        operations=[CancelPlan(reason=f"cancelled by <@{user}>")],
        assignees=await service.enabled_names(),
        actor=user,
    )
    async with service.db.write() as conn:
        await audit(
            conn,
            team_id=service.team_id,
            actor=user,
            action="plan.cancel",
            target=f"plan {plan_id}",
            details={"channel": plan_channel, "thread_ts": thread_ts},
            now=service.clock(),
        )
    return f"Plan {plan_id} is cancelled."
