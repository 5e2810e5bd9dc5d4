"""What Flotilla does with each kind of Slack input, after the listener acked it.

Handlers take parsed payloads, check who may do what, and hand work to the reconciler
or a job. They return refusals as sentences (shown ephemerally by the listener). A form's
answer is not handled here: its listener hands it to `agents/delivering/form_answers.py`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from flotilla.agents.core.errors import OperationRejected
from flotilla.agents.planning.plan import COMMANDER, CancelPlan
from flotilla.agents.reconciling.inbox import (
    Incoming,
    record_reply,
    record_request,
    stored_result,
)
from flotilla.agents.running import plan_reads, step_runs
from flotilla.agents.tools.attachment_refusals import refused_note
from flotilla.agents.tools.file_policy import FilePolicy, refusal
from flotilla.bot.listeners.payloads import (
    FLOTILLA_EVENTS,
    MAX_REQUEST_CHARS,
    RESULT_EVENT,
    SlackFile,
    SlackMessage,
    StepMeta,
    author_kind,
    mentioned_users,
    parse_message,
    strip_mention,
)
from flotilla.bot.views.feedback import parse_click
from flotilla.storage.audit import audit
from flotilla.storage.feedback import record_feedback as store_feedback
from flotilla.storage.files import ReceivedFile

if TYPE_CHECKING:
    from flotilla.bot.service import SlackService
    from flotilla.storage.records import ConversationRecord

log = logging.getLogger(__name__)


def _incoming(message: SlackMessage, policy: FilePolicy) -> Incoming:
    return Incoming(
        channel=message.channel,
        ts=message.ts,
        text=message.text,
        user=message.user,
        bot_id=message.bot_id,
        username=message.username,
        metadata=message.metadata,
        files=tuple(received_file(f, policy) for f in message.files),
    )


def received_file(file: SlackFile, policy: FilePolicy) -> ReceivedFile:
    """An attachment as Slack described it, with its refusal (type, declared size) decided
    at once; a form's files too (`bot/listeners/forms.py`)."""
    name = file.name or file.title or file.id
    return ReceivedFile(
        slack_file_id=file.id,
        name=name,
        mimetype=file.mimetype,
        size=file.size,
        url_private=file.url_private_download or file.url_private,
        permalink=file.permalink,
        refusal=refusal(name, file.mimetype, file.size, policy),
    )


async def on_mention(service: SlackService, event: Mapping[str, Any], event_id: str | None) -> None:
    """A person mentioned the commander: a new request, or a message in a running plan."""
    message = parse_message(event)
    if message is None or message.bot_id or not message.user:
        return  # bots never start work: no bot-to-bot loops
    request = strip_mention(message.text, service.bot_user_id)
    too_long = len(request) > MAX_REQUEST_CHARS
    incoming = _incoming(message, service.options.files)
    # de-duplicated in the transaction that records the work: all of it, or none
    recorded = await record_request(
        service.db,
        service.clock(),
        team_id=service.team_id,
        thread_ts=message.root_ts,
        message=incoming,
        request=request[:MAX_REQUEST_CHARS],
        for_commander=not too_long,
        sender=service.reconciler.outbox,  # None once this process stops handing work over
    )
    if recorded is None:
        return
    conversation = recorded.conversation
    service.context.remember(conversation)  # committed: its thread's next events find it here
    refused = refused_note(incoming.files)
    if refused is not None:
        said = conversation
        service.events.start(lambda: _say(service, said, refused))
    if too_long:  # said after the ack: what matters is recorded already
        note = (
            f"That request is {len(request):,} characters long; I can take up to "
            f"{MAX_REQUEST_CHARS:,}. Could you shorten it or attach the material as a file?"
        )
        found = conversation
        service.events.start(lambda: _say(service, found, note))
    if not recorded.handed:  # handed: its delivery is under way here already
        service.wake()


async def on_message(service: SlackService, event: Mapping[str, Any]) -> None:
    """A message in a thread: a sub-agent's result, a person's interjection, or nothing."""
    message = parse_message(event)
    if message is None or not message.in_thread or message.thread_ts is None:
        return
    conversation = await service.find_conversation(message.channel, message.thread_ts)
    if conversation is None:
        return  # not a thread Flotilla works in
    agents_by_bot = await service.agent_bot_ids()
    author = author_kind(message, commander_bot_id=service.bot_id, agent_bot_ids=agents_by_bot)
    if author in ("commander", "agent"):
        # Flotilla's own post (as its bot, or with an agent's own app): kept by the code that
        # posted it, with what only it knows (a streamed answer's metadata), or found again
        # by its key after a stop – storing its echo too is a write per post for nothing
        meta = message.step_meta(RESULT_EVENT) if author == "agent" else None
        if meta is not None and message.bot_id is not None:
            await _agent_result(service, conversation, agents_by_bot[message.bot_id], meta)
        return
    if author == "person" and service.bot_user_id in mentioned_users(message.text):
        return  # the app_mention event of the same message handles it
    # a person's message carrying Flotilla's metadata is a forgery: stored, never acted on
    forged = author == "person" and any(message.step_meta(kind) for kind in FLOTILLA_EVENTS)
    # A person's reply while a plan is at work is an interjection for the commander; with no
    # plan at work people talk among themselves (a mention asks the commander).
    plan = await service.reconciler.plan(conversation.id) if author == "person" else None
    interjection = not forged and plan is not None and plan.status in ("running", "paused")
    incoming = _incoming(message, service.options.files)
    if author != "person":  # our own uploads and other apps' files are not attachments
        incoming = replace(incoming, files=())
    recorded = await record_reply(
        service.db,
        service.clock(),
        conversation.id,
        incoming,
        for_commander=interjection,
        sender=service.reconciler.outbox,  # None once this process stops handing work over
    )
    if recorded == "seen":
        return  # seen already (a retried delivery)
    refused = refused_note(incoming.files) if author == "person" else None
    if refused is not None:
        service.events.start(lambda: _say(service, conversation, refused))
    if forged:
        log.warning("ignored a person's message carrying step metadata (%s)", message.ts)
    elif interjection and recorded != "handed":  # handed: its delivery is under way here
        service.wake()
    # other bots' posts change nothing


async def _agent_result(
    service: SlackService, conversation: ConversationRecord, agent: str, meta: StepMeta
) -> None:
    """An own-app agent's answer, seen as an event: accepted only from the assigned agent.

    The process that ran the step normally recorded the outcome already (then this changes
    nothing); after a crash between posting and recording, this records it.
    """
    plan = await service.reconciler.plan(conversation.id)
    step = plan.step(meta.step) if plan is not None else None
    if plan is None or step is None or plan.id != meta.plan_id:
        return
    if step.assignee != agent or step.attempts != meta.attempt or step.status != "in_progress":
        return
    outcome = await stored_result(service.db, plan, step.index, meta.attempt)
    if outcome is not None:
        await step_runs.report(service.context, conversation.id, outcome)


async def cancel_plan(
    service: SlackService, *, plan_id: int, user: str, channel: str, thread_ts: str
) -> str | None:
    """Cancel a plan from its card. Returns a refusal sentence, or None when cancelled."""
    conversation, plan = await service.find_plan(channel, thread_ts)
    if conversation is None or plan is None or plan.id != plan_id:
        return "This plan no longer exists."
    if plan.status not in ("running", "paused"):
        return f"This plan is already {plan.status}."
    if user != conversation.requested_by and not await service.is_admin(user):
        return f"Only <@{conversation.requested_by}> or a workspace admin can cancel this plan."
    # the stop notice, the runs stopped and the forms closed follow from the decision
    try:
        await service.reconciler.reconcile(
            conversation.id,
            operations=[CancelPlan(reason=f"cancelled by <@{user}>")],
            assignees=await service.enabled_names(),
            actor=user,
        )
    except OperationRejected:  # another click (or the plan's end) came first, under the lock
        plan = await service.reconciler.plan(conversation.id)
        return f"This plan is already {plan.status if plan else 'gone'}."
    return None


async def _say(service: SlackService, conversation: ConversationRecord, text: str) -> None:
    await service.say(conversation, text)


async def record_feedback(
    service: SlackService, *, value: str, user: str, channel: str, thread_ts: str, message_ts: str
) -> bool:
    """Keep a person's 👍/👎 on an answer (per plan, step and agent) and audit it. False when
    the click names no answer of this thread's plans (nothing is stored)."""
    click = parse_click(value)
    conversation = await service.find_conversation(channel, thread_ts)
    if click is None or conversation is None:
        log.warning("a feedback click Flotilla cannot place: %r", value[:100])
        return False
    plan = await plan_reads.load(service.context, conversation.id, click.plan_id)
    step = plan.step(click.step) if plan is not None and click.step else None
    author = step.assignee if step is not None else COMMANDER
    if plan is None or plan.conversation_id != conversation.id or author != click.agent:
        log.warning("a feedback click for another answer: %r", value[:100])
        return False
    now = service.clock()
    async with service.db.write() as conn:
        changed = await store_feedback(
            conn,
            team_id=service.team_id,
            channel_id=channel,
            message_ts=message_ts,
            user_id=user,
            plan_id=plan.id,
            step_index=click.step,
            agent_name=click.agent,
            verdict=click.verdict,
            now=now,
        )
        if changed:
            await audit(
                conn,
                team_id=service.team_id,
                actor=user,
                action="gave feedback",
                target=f"plan {plan.id}, step {click.step or 'final answer'}",
                now=now,
                details={"agent": click.agent, "verdict": click.verdict},
            )
    return True
