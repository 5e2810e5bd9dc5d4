"""The commander: one turn of the lead agent, with its planning and steering tools.

A turn is a full agent run (`agents/runtime.RunSession`: crash-safe history, usage). Its
tools only *propose*: `reply` (text for the thread), `create_plan` (validated by
`agents.planning.plan.validate_plan`; problems go back to the model as retry prompts, at most
`plan_retries` times), and – when woken with a plan running, after a failure or a person's
interjection – `retry_step`, `skip_step`, `add_steps`, `edit_step`, `abort_plan`,
`cancel_plan`, which produce `CommanderOperation`s. The result is a `CommanderTurn`; the
commander stores nothing and applies nothing, the orchestrator does.

The turn is derived from the stored history (the accepted tool calls carry their validated
value as metadata), so a turn resumed after a crash gives the same answer.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from pydantic import TypeAdapter
from pydantic_ai import Agent, RunContext
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.exceptions import ModelRetry
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolReturn, ToolReturnPart
from pydantic_ai.models import Model
from pydantic_ai.tools import Tool

from flotilla.agents.core.clock import Clock, utcnow
from flotilla.agents.core.errors import PermanentError, PlanValidationError
from flotilla.agents.planning.plan import (
    COMMANDER,
    AbortPlan,
    AddSteps,
    CancelPlan,
    CommanderOperation,
    EditStep,
    PlanProposal,
    RetryStep,
    SkipStep,
    Step,
)
from flotilla.agents.planning.plan_validation import parse_plan, validate_plan
from flotilla.agents.reconciling.run_history import load_messages
from flotilla.agents.running.built_agents import BUILT_AGENTS
from flotilla.agents.running.history_compaction import compact_history
from flotilla.agents.running.models import model_label
from flotilla.agents.running.preemption import TurnBoundary
from flotilla.agents.running.runtime import RunJob, drive, load_session
from flotilla.agents.running.session import (
    DEFAULT_LIMITS,
    PendingClose,
    RunLimits,
    RunSession,
    unsaved_history,
)
from flotilla.agents.running.step_reads import StepReads
from flotilla.agents.running.thread_window import (
    Known,
    newest_plan_id,
    prompt_with_context,
    thread_window,
)
from flotilla.agents.tools.journal import rerunnable_tool
from flotilla.agents.tools.registry import AgentSpec
from flotilla.storage.db import Database

PLAN_NOT_WRITTEN = (
    "I could not put together a workable plan for this; please rephrase the request or "
    "break it into smaller parts."
)
OPERATION_TOOLS = ("retry_step", "skip_step", "add_steps", "edit_step", "abort_plan", "cancel_plan")
_operation: TypeAdapter[CommanderOperation] = TypeAdapter(CommanderOperation)


class StepView(Protocol):
    """What the commander is shown of a stored step (`agents.planning.plan.Step` fits)."""

    @property
    def index(self) -> int: ...
    @property
    def title(self) -> str: ...
    @property
    def assignee(self) -> str: ...
    @property
    def input(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def output_summary(self) -> str | None: ...
    @property
    def failure_reason(self) -> str | None: ...


@dataclass(frozen=True, slots=True)
class CommanderWake:
    """Why the commander is woken while a plan runs: a failed step or a person's message."""

    event: str  # e.g. "Step 2 (researcher) failed: …" or "alice wrote: stop after step 3"
    steps: Sequence[StepView] = ()
    failed_step: int | None = None


@dataclass(frozen=True, slots=True)
class CommanderTurn:
    """What one commander turn proposes. Nothing here has been stored or applied."""

    reply: str | None = None
    plan: PlanProposal | None = None
    operations: list[CommanderOperation] = field(default_factory=list)
    close: PendingClose | None = None  # its run's close, if left to the caller


@dataclass(slots=True)
class CommanderDeps:
    assignees: tuple[str, ...]
    disabled: tuple[str, ...] = ()
    existing: tuple[Step, ...] = ()  # the running plan's steps, to check added steps against
    thread: list[Any] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # the last plan's validation problems


def commander_instructions(agents: Sequence[AgentSpec], *, woken: bool) -> str:
    """The commander's instructions, listing the enabled sub-agents with their descriptions."""
    roster = "\n".join(
        f"- {a.name}: {a.description or a.display_name}" for a in agents if a.enabled
    )
    lines = [
        "You are the commander of a team of agents working in a Slack thread. You decide what "
        "is done, in which order and by whom; you do not do all the work yourself.",
        "",
        "Sub-agents you can assign steps to:",
        roster or "- (none: assign steps to `user` or `commander` only)",
        "",
        "Also: `user` (a person answers a form; give `form` fields) and `commander` (you, for "
        "a synthesis or decision step).",
        "",
    ]
    if woken:
        lines.append(
            "A plan is running. Steer it with retry_step, skip_step, add_steps, edit_step, "
            "abort_plan or cancel_plan, and/or answer with `reply`. You cannot mark steps done "
            "or failed: the orchestrator does that when something really happens."
        )
    else:
        lines.append(
            "For a request one answer can settle, call `reply`. For work needing several "
            "steps, call `create_plan` once: steps indexed 1..n, `wait_for` lists earlier "
            "steps (parallel branches share the same upstream), and each step's `input` "
            "is a template that may use {{step_N.output_summary}}, {{step_N.output_files}} and "
            "{{request}} for upstream steps. End with a short text saying what you did."
        )
    return "\n".join(lines)


def commander_prompt(job: RunJob, thread: Sequence[Any], wake: CommanderWake | None) -> str:
    """The turn's user message: the request (or new message), thread context, plan state.

    The thread window leaves out what the turn gets already (see `agents.running.thread_window`):
    the new message, the request, Flotilla's own posts and, when woken, the answers of the
    running plan's steps whose summaries the plan listing shows."""
    texts = [job.input, job.request]
    plan_id, answered = None, frozenset[int]()
    if wake is not None:
        texts += [s.output_summary for s in wake.steps if s.output_summary]
        plan_id = job.plan_id if job.plan_id is not None else newest_plan_id(thread)
        answered = frozenset(s.index for s in wake.steps if s.output_summary)
    known = Known(texts=tuple(texts), plan_id=plan_id, steps=answered)
    text = prompt_with_context(job.input, job.request, thread_window(thread, known))
    if wake is None:
        return text
    steps = "\n".join(
        f"- step {s.index} [{s.status}] ({s.assignee}) {s.title} | input: {json.dumps(s.input)}"
        + (f" | summary: {s.output_summary}" if s.output_summary else "")
        + (f" | failure: {s.failure_reason}" if s.failure_reason else "")
        for s in wake.steps
    )
    failed = f"\nFailed step: {wake.failed_step}" if wake.failed_step is not None else ""
    return f"{text}\n\nWhat happened: {wake.event}{failed}\n\nThe plan now:\n{steps}"


# --- tools ---------------------------------------------------------------------------------


async def reply(ctx: RunContext[CommanderDeps], text: str) -> ToolReturn:
    """Post `text` in the thread as your answer."""
    if not text.strip():
        raise ModelRetry("reply needs some text.")
    return ToolReturn("Your reply will be posted.", metadata={"reply": text})


PLAN_SCHEMA = PlanProposal.model_json_schema()


def _checked(ctx: RunContext[CommanderDeps], args: dict[str, Any], tool: str) -> PlanProposal:
    """The model's raw steps parsed and validated; every problem goes back as one sentence."""
    try:
        proposal = parse_plan(args)
        return validate_plan(
            proposal,
            assignees=ctx.deps.assignees,
            disabled=ctx.deps.disabled,
            existing=ctx.deps.existing,
        )
    except PlanValidationError as exc:
        ctx.deps.problems = list(exc.problems)
        raise ModelRetry(
            f"Not accepted. Fix these problems and call {tool} again:\n"
            + "\n".join(f"- {p}" for p in exc.problems)
        ) from exc


async def create_plan(ctx: RunContext[CommanderDeps], **args: Any) -> ToolReturn:
    """Write the plan: a small DAG of steps for the team (see your instructions)."""
    plan = _checked(ctx, args, "create_plan")
    return ToolReturn(
        f"Plan accepted with {len(plan.steps)} steps; the orchestrator runs it.",
        metadata={"plan": plan.model_dump(mode="json")},
    )


def _proposed(op: CommanderOperation) -> ToolReturn:
    return ToolReturn(
        f"Requested {op.op}; the orchestrator applies it if the plan's state allows.",
        metadata={"operation": op.model_dump(mode="json")},
    )


async def retry_step(
    ctx: RunContext[CommanderDeps], index: int, input: str | None = None
) -> ToolReturn:
    """Run a failed step again, optionally with a new input template."""
    return _proposed(RetryStep(index=index, input=input))


async def skip_step(ctx: RunContext[CommanderDeps], index: int, reason: str) -> ToolReturn:
    """Skip a failed or pending step; its dependants run as if it produced nothing."""
    return _proposed(SkipStep(index=index, reason=reason))


async def add_steps(ctx: RunContext[CommanderDeps], **args: Any) -> ToolReturn:
    """Append steps to the running plan (indexes continue after the last step)."""
    if ctx.deps.existing:
        return _proposed(AddSteps(steps=_checked(ctx, args, "add_steps").steps))
    try:
        return _proposed(AddSteps(steps=parse_plan(args).steps))
    except PlanValidationError as exc:
        ctx.deps.problems = list(exc.problems)
        raise ModelRetry("Not accepted:\n" + "\n".join(f"- {p}" for p in exc.problems)) from exc


async def edit_step(
    ctx: RunContext[CommanderDeps], index: int, input: str | None = None, title: str | None = None
) -> ToolReturn:
    """Change a pending step's input template and/or title."""
    return _proposed(EditStep(index=index, input=input, title=title))


async def abort_plan(ctx: RunContext[CommanderDeps], reason: str) -> ToolReturn:
    """Stop the plan because it cannot succeed; pending steps are skipped."""
    return _proposed(AbortPlan(reason=reason))


async def cancel_plan(ctx: RunContext[CommanderDeps], reason: str) -> ToolReturn:
    """Stop the plan because people no longer want it."""
    return _proposed(CancelPlan(reason=reason))


def build_commander(
    agents: Sequence[AgentSpec], *, woken: bool, plan_retries: int = 3
) -> Agent[CommanderDeps, str]:
    """The commander's pydantic-ai agent for one turn."""
    tools: list[Tool[CommanderDeps]] = [Tool(reply, takes_ctx=True)]
    if woken:
        for func in (retry_step, skip_step, edit_step, abort_plan, cancel_plan):
            tools.append(Tool(func, takes_ctx=True))
        tools.append(_plan_tool(add_steps, plan_retries))
    else:
        tools.append(_plan_tool(create_plan, plan_retries))
    for tool in tools:  # each only hands its value back: the turn applies it when it ends
        rerunnable_tool(tool)
    return Agent(
        deps_type=CommanderDeps,
        output_type=str,
        instructions=commander_instructions(agents, woken=woken),
        tools=tools,
        name=COMMANDER,
        retries=2,
        capabilities=[ProcessHistory(compact_history)],
    )


def _plan_tool(func: Any, retries: int) -> Tool[CommanderDeps]:
    """A tool taking raw steps under the plan's JSON schema, so `parse_plan` can explain
    problems (e.g. runtime fields) in sentences instead of pydantic's generic errors."""
    tool: Tool[CommanderDeps] = Tool.from_schema(
        func, func.__name__, func.__doc__, PLAN_SCHEMA, takes_ctx=True
    )
    tool.max_retries = retries
    return tool


def turn_from_history(messages: Sequence[ModelMessage]) -> CommanderTurn:
    """The turn's proposals: the accepted tool calls' values, in order; else its final text."""
    replies: list[str] = []
    plan: PlanProposal | None = None
    operations: list[CommanderOperation] = []
    for message in messages:
        for part in message.parts:
            if not isinstance(part, ToolReturnPart) or part.outcome != "success":
                continue
            meta = part.metadata if isinstance(part.metadata, dict) else {}
            if "reply" in meta:
                replies.append(str(meta["reply"]))
            elif "plan" in meta:
                plan = PlanProposal.model_validate(meta["plan"])  # the last accepted plan wins
            elif "operation" in meta:
                operations.append(_operation.validate_python(meta["operation"]))
    if not replies:
        final = next((m for m in reversed(messages) if isinstance(m, ModelResponse)), None)
        text = "".join(p.content for p in final.parts if isinstance(p, TextPart)) if final else ""
        if text.strip():
            replies.append(text.strip())
    return CommanderTurn(reply="\n\n".join(replies) or None, plan=plan, operations=operations)


async def commander_turn(
    db: Database,
    job: RunJob,
    agents: Sequence[AgentSpec],
    *,
    model: Model | str,
    wake: CommanderWake | None = None,
    limits: RunLimits = DEFAULT_LIMITS,
    plan_retries: int = 3,
    now: Clock = utcnow,
    reads: StepReads | None = None,
    close_later: bool = False,
    yields: TurnBoundary | None = None,
) -> CommanderTurn:
    """Run one commander turn for `job` (its `input` is the new message) and return proposals.
    `close_later`: its run's close is left to the caller (`CommanderTurn.close`), which
    writes it with the plan the turn starts.

    Same `job.run_key` again continues (after a crash) or returns (when finished) that turn.
    Raises `TransientError` / `PermanentError` like any run – e.g. a plan still invalid
    after `plan_retries` corrections is a `PermanentError`. `reads`: its stored session and
    the thread, if the caller read them already (`agents.running.step_reads`); `yields`:
    how a scheduled turn gives its slot to urgent work (its attempt's).
    """
    if reads is None:
        stored, thread = await load_session(db, job)
    else:
        stored, thread = reads.stored, reads.thread
    history = load_messages(stored.messages) if stored and stored.messages else None
    if stored and stored.status == "finished" and history:
        return turn_from_history(history)
    history = unsaved_history(job.run_key, history)  # what a storage outage kept back
    assignees = tuple(a.name for a in agents if a.enabled)
    woken = wake is not None
    agent = BUILT_AGENTS.get(
        COMMANDER,
        (COMMANDER, tuple(agents), woken, plan_retries),
        lambda: build_commander(agents, woken=woken, plan_retries=plan_retries),
    )
    views = tuple(wake.steps) if wake else ()
    stored_steps = tuple(s for s in views if isinstance(s, Step))
    deps = CommanderDeps(
        assignees=assignees,
        disabled=tuple(a.name for a in agents if not a.enabled),
        # added steps are checked here only against real stored steps; else the orchestrator does
        existing=stored_steps if len(stored_steps) == len(views) else (),
        thread=list(thread),
    )
    previous = stored if history else None
    session = RunSession(db, job, COMMANDER, model_label(model), now, previous, yields)
    prompt = None if history else commander_prompt(job, thread, wake)
    try:
        _output, messages = await drive(
            session, agent, model, deps, limits, prompt=prompt, history=history, deferred=None
        )
    except PermanentError as exc:
        if not deps.problems:
            raise
        # the model gave up correcting its plan: what was still wrong is for operators (the
        # log); people read one sentence, never the validator's list
        raise PermanentError(
            "I could not write a valid plan. What was still wrong:\n"
            + "\n".join(f"- {p}" for p in deps.problems),
            public=PLAN_NOT_WRITTEN,
        ) from exc
    if close_later:
        return replace(turn_from_history(messages), close=PendingClose(session, messages))
    await session.close("finished", messages)
    return turn_from_history(messages)


def commander_step_spec(model: str | None = None) -> AgentSpec:
    """The commander as the assignee of a plan step (synthesis or decision), run by `run_step`."""
    return AgentSpec(
        name=COMMANDER,
        display_name="Commander",
        description="The lead agent: plans, steers and writes the synthesis.",
        system_prompt=(
            "You are the commander of a team of agents. This step asks you to decide or to "
            "synthesise: read the results you are given and write the answer the people in "
            "the thread need, clearly and briefly."
        ),
        model=model,
        tools=("read_thread",),
    )
