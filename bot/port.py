"""`SlackPort`: the orchestrator's side effects, performed in Slack.

Every message a dispatch posts carries the effect's idempotency key in its metadata, so
after a crash `already_performed` can look in the thread (one `conversations.replies`
call, on redelivery only) instead of posting twice.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from slack_sdk.errors import SlackApiError

from agents.errors import TransientError
from agents.plan import FormSpec, Plan
from agents.ports import Delivery, Effect
from bot.listeners.payloads import dispatch_metadata
from bot.views.forms import FormKey, form_message
from bot.views.plan_card import plan_card
from storage.plans import claim_plan_card, plan_card_ts

if TYPE_CHECKING:
    from bot.service import Flotilla

log = logging.getLogger(__name__)

# Effects that only post a message carrying their key: redelivery checks the thread first.
# (A dispatch also starts a run, so it checks the thread itself and runs in any case.)
POSTING = frozenset({"show_form", "ask_user"})


class SlackPort:
    """Implements `agents.ports.SideEffectPort` for Slack (or the local workspace)."""

    def __init__(self, service: Flotilla) -> None:
        self.service = service

    async def perform(self, effect: Effect) -> Delivery:
        try:
            return await self._perform(effect)
        except SlackApiError as exc:
            status = exc.response.status_code if exc.response is not None else 0
            if status == 429 or status >= 500:
                raise TransientError(f"Slack answered {status}") from exc
            raise

    async def _perform(self, effect: Effect) -> Delivery:
        from bot import work

        kind = effect.kind
        if kind == "post_dispatch":
            await self._post_dispatch(effect)
            return Delivery.IN_PROGRESS
        if kind in ("show_form", "ask_user"):
            await self._post_form(effect)
        elif kind == "resume_step":
            work.start_resume(self.service, effect)
            return Delivery.IN_PROGRESS
        elif kind == "commander_turn":
            work.start_turn(self.service, effect)
            return Delivery.IN_PROGRESS
        elif kind == "wake_commander":
            if work.start_commander_wake(self.service, effect):
                return Delivery.IN_PROGRESS
            await work.plan_finished(self.service, effect)
        elif kind == "update_plan_card":
            await self._update_card(effect)
        else:
            log.warning("no Slack action for effect kind %s", kind)
        return Delivery.DONE

    async def already_performed(self, effect: Effect) -> bool:
        if effect.kind not in POSTING:
            return False  # runs continue their stored session; cards are idempotent
        conversation = await self.service.conversation(effect.conversation_id)
        return await self.service.thread_has_key(conversation, effect.key)

    async def _post_dispatch(self, effect: Effect) -> None:
        from bot import work

        service = self.service
        payload = effect.payload
        await self._card_first(effect.conversation_id)
        conversation = await service.conversation(effect.conversation_id)
        identity = await service.identity(str(payload["agent"]))
        posted = effect.delivery > 1 and await service.thread_has_key(conversation, effect.key)
        if not posted:  # after a crash the message may be there already: never post twice
            await service.say(
                conversation,
                f"{identity.mention} {payload['text']}".strip(),
                metadata=_metadata(effect),
            )
            service.metrics.dispatches.labels("agent").inc()
        work.start_step(service, effect)

    async def _post_form(self, effect: Effect) -> None:
        service = self.service
        payload = effect.payload
        await self._card_first(effect.conversation_id)
        conversation = await service.conversation(effect.conversation_id)
        form_data = payload.get("form")
        form = FormSpec.model_validate(form_data) if form_data else None
        key = FormKey(
            int(payload["plan_id"]),
            int(payload["step"]),
            int(payload["attempt"]),
            int(payload.get("round", 1)),
        )
        if effect.kind == "ask_user":
            plan = await service.reconciler.plan(effect.conversation_id)
            step = plan.step(key.step_index) if plan is not None else None
            assignee = step.assignee if step is not None else "an agent"
            title = step.title if step is not None else ""
            identity = await service.identity(assignee)
            question = f"{identity.mention} asks: {payload['question']}"
        else:
            title = str(payload.get("title", ""))
            question = str(payload.get("text", "")) or title
        text, blocks = form_message(
            key, title=title, question=question, form=form, ask=conversation.requested_by
        )
        await service.say(
            conversation,
            text,
            blocks=[b.to_dict() for b in blocks],
            metadata=_metadata(effect),
        )
        if effect.kind == "show_form":
            service.metrics.dispatches.labels("user").inc()

    async def _update_card(self, effect: Effect) -> None:
        plan = effect.plan or await self.service.reconciler.plan(effect.conversation_id)
        if plan is not None:
            await self._show_card(plan, effect.conversation_id, post_only=False)

    async def _card_first(self, conversation_id: int) -> None:
        """Post the plan card before a plan's first dispatch, so the thread reads in order."""
        plan = await self.service.reconciler.plan(conversation_id)
        if plan is not None:
            await self._show_card(plan, conversation_id, post_only=True)

    async def _show_card(self, plan: Plan, conversation_id: int, *, post_only: bool) -> None:
        """Post the card once (the first poster wins), then edit it in place."""
        service = self.service
        async with service.db.read() as conn:
            card_ts = await plan_card_ts(conn, plan.id)
        if card_ts is not None and post_only:
            return
        conversation = await service.conversation(conversation_id)
        mentions = {name: who.mention for name, who in (await service.identities()).items()}
        text, blocks = plan_card(plan, mentions=mentions, requester=conversation.requested_by)
        rendered = [b.to_dict() for b in blocks]
        if card_ts is not None:
            await service.poster.update(
                channel=conversation.channel_id, ts=card_ts, text=text, blocks=rendered
            )
            return
        ts = await service.say(conversation, text, blocks=rendered)
        async with service.db.write() as conn:
            won = await claim_plan_card(conn, plan.id, ts)
        if not won:  # another sender posted the card first: keep one card
            await service.client.chat_delete(channel=conversation.channel_id, ts=ts)


def _metadata(effect: Effect) -> dict[str, Any]:
    payload = effect.payload
    return dispatch_metadata(
        int(payload["plan_id"]), int(payload["step"]), int(payload["attempt"]), effect.key
    )
