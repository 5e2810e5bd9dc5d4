"""A long chain run through the real reconciler and runtime, recording each step's prompt.

Used by `test_runtime_prompts.py` (which pins the prompt growth) and by `bench/prompts.py`
(which prints it). No Slack: the thread is stored as the Slack port stores it – the
person's request, the commander's reply, the plan card, then for every step Flotilla's
dispatch post (`flotilla_dispatch` metadata) and the agent's answer (`flotilla_result`) –
and the model is a pydantic-ai `FunctionModel` that records the first user message.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from flotilla.agents.planning.effects import PostDispatch
from flotilla.agents.planning.plan import Step, StepSucceeded
from flotilla.agents.reconciling.reconciler import Reconciler
from flotilla.agents.running.runtime import RunJob, StepRunResult, run_step
from flotilla.agents.tools.builtin import format_thread_line
from flotilla.agents.tools.registry import AgentSpec
from flotilla.storage.conversations import open_conversation, store_message, thread_messages
from flotilla.storage.db import Database
from flotilla.storage.records import MessageRecord

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
REQUEST = (
    "compare our pricing with the top three competitors, step by step, and draft a note "
    "for the sales team that they can send to customers who ask about the price change"
)
INTERJECTION = "please keep the note under 200 words and mention the annual discount"
AGENTS = ("researcher", "analyst")


def legacy_prompt(job: RunJob, thread: Sequence[Any]) -> str:
    """The step prompt as built before the thread window (the last 20 messages, 400
    characters each, whatever they repeat) – for the before/after figures."""
    lines = [job.input.strip(), ""]
    if job.request:
        lines += ["The original request in this conversation:", job.request.strip(), ""]
    recent = list(thread)[-20:]
    if recent:
        lines.append("Recent messages in the thread (oldest first):")
        lines += [
            "- " + format_thread_line(m.author_name or m.user_id or m.bot_id, m.text, 400)
            for m in recent
        ]
    return "\n".join(lines).strip()


@dataclass(slots=True)
class StepPrompt:
    step: int
    before: str  # today's rule before this change, on the same thread
    after: str  # what the model was sent


@dataclass(slots=True)
class Chain:
    prompts: list[StepPrompt] = field(default_factory=list)

    def chars(self, step: int) -> tuple[int, int]:
        """(before, after) prompt characters of `step`."""
        p = self.prompts[step - 1]
        return len(p.before), len(p.after)


def chain_steps(n: int) -> list[Step]:
    """`n` steps, each passing the previous one's summary on with `{{step_N.output_summary}}`."""
    steps = [Step(index=1, title="Step 1", assignee=AGENTS[0], input="Step 1: {{request}}")]
    for i in range(2, n + 1):
        text = f"Step {i}: carry on from the previous result:\n{{{{step_{i - 1}.output_summary}}}}"
        steps.append(
            Step(index=i, title=f"Step {i}", assignee=AGENTS[i % 2], input=text, wait_for=(i - 1,))
        )
    return steps


def recording_model(prompts: list[str]) -> FunctionModel:
    """Answers every step at once (an answer of ~600 characters, a summary of ~200) and
    records the first user message of each run."""

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        part = messages[-1].parts[0]
        assert isinstance(part, UserPromptPart)
        prompts.append(str(part.content))
        n = len(prompts)
        message = f"Answer {n}: " + " ".join(f"finding {n}.{k} about the prices" for k in range(20))
        summary = f"Summary {n}: " + " ".join(f"point {n}.{k}" for k in range(20))
        return ModelResponse(
            parts=[ToolCallPart("final_result", {"message": message, "summary": summary})]
        )

    return FunctionModel(answer)


def _meta(event: str, effect: PostDispatch, key: str) -> dict[str, Any]:
    payload = {"plan_id": effect.plan_id, "step": effect.step, "attempt": effect.attempt}
    return {"event_type": event, "event_payload": {**payload, "key": key}}


class Thread:
    """The thread as the Slack port keeps it (every post stored for later prompts)."""

    def __init__(self, db: Database, conversation_id: int) -> None:
        self.db = db
        self.conversation_id = conversation_id
        self.ts = 100

    async def post(
        self, author: str, text: str, *, user: str | None = None, meta: dict[str, Any] | None = None
    ) -> None:
        self.ts += 1
        bot = None if user else "B1"
        record = MessageRecord("C1", f"{self.ts}.0", user, bot, author, text, meta)
        async with self.db.write() as conn:
            await store_message(conn, self.conversation_id, record, NOW)

    async def messages(self) -> list[MessageRecord]:
        async with self.db.read() as conn:
            return await thread_messages(conn, self.conversation_id)


async def run_chain(db: Database, steps: int = 20, *, interject_after: int | None = None) -> Chain:
    """Run a `steps`-long chain; `interject_after`: a person writes after that step."""
    async with db.write() as conn:
        conv = await open_conversation(
            conn,
            team_id="T1",
            channel_id="C1",
            thread_ts="100.0",
            requested_by="U1",
            request_text=REQUEST,
            now=NOW,
        )
    thread = Thread(db, conv.id)
    await thread.post("alice", REQUEST, user="U1")
    await thread.post("Flotilla", f"I made a plan of {steps} steps; the team starts now.")
    reconciler = Reconciler(db, clock=lambda: NOW)
    decision = await reconciler.start_steps(conv.id, chain_steps(steps))
    card = {"event_type": "flotilla_notice", "event_payload": {"key": "card"}}
    await thread.post("Flotilla", f"Plan ({steps} steps): " + "▶ " * steps, meta=card)
    chain, sent = Chain(), list[str]()
    model = recording_model(sent)
    while dispatches := [e for e in decision.effects if isinstance(e, PostDispatch)]:
        effect = dispatches[0]
        await thread.post(
            "Flotilla",
            f"@{effect.agent} {effect.text}",
            meta=_meta("flotilla_dispatch", effect, effect.key),
        )
        job = RunJob(
            run_key=effect.key,
            team_id="T1",
            input=effect.text,
            request=REQUEST,
            channel_id="C1",
            conversation_id=conv.id,
            plan_id=effect.plan_id,
            step_index=effect.step,
        )
        before = legacy_prompt(job, await thread.messages())
        spec = AgentSpec(effect.agent, effect.agent.title(), "", "You work on prices.")
        result = await run_step(db, job, spec, model=model, now=lambda: NOW)
        assert isinstance(result, StepRunResult)
        chain.prompts.append(StepPrompt(effect.step, before, sent[-1]))
        await thread.post(
            spec.display_name,
            result.message,
            meta=_meta("flotilla_result", effect, f"{effect.key}:result"),
        )
        if effect.step == interject_after:
            await thread.post("alice", INTERJECTION, user="U1")
        done = StepSucceeded(index=effect.step, attempt=effect.attempt, summary=result.summary)
        next_decision = await reconciler.reconcile(conv.id, outcomes=[done])
        assert next_decision is not None
        decision = next_decision
    assert len(chain.prompts) == steps
    return chain
