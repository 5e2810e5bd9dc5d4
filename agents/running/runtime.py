"""One full agent run per step, on pydantic-ai: crash-safe, classified, accounted.

A run is the agent's complete loop (model turns, tool calls, output validation, the
provider client's own retries). Its message history is stored after every model turn
under the job's `run_key`, so running the same key again continues where it stopped:
after a crash (status `running`), or after `ask_user` blocked it (status `suspended`,
continued by `resume_step` with the person's answer). A finished run is never run again:
its result is rebuilt from the stored history.

A step's first prompt carries the conversation's files (`agents/running/step_files.py`), and every
step agent has the built-in `write_file` and `read_file` tools (`agents/tools/files.py`).

Failures leave here only as `TransientError` or `PermanentError` (see `classify_error`);
the orchestrator re-dispatches the first kind and applies `on_failure` to the second.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AsyncExitStack
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.messages import ModelMessage, UserContent
from pydantic_ai.models import Model
from pydantic_ai.output import OutputSpec
from pydantic_ai.tools import DeferredToolRequests, DeferredToolResults, Tool
from pydantic_ai.toolsets import AbstractToolset

from flotilla.agents.core.clock import Clock, utcnow
from flotilla.agents.core.errors import PermanentError
from flotilla.agents.core.failures import classify_error, is_storage_error, storage_error
from flotilla.agents.planning.plan import Plan
from flotilla.agents.reconciling.run_history import load_messages
from flotilla.agents.reconciling.run_results import (
    SUMMARY_MAX_CHARS,
    StepQuestion,
    StepReport,
    StepRunResult,
    bounded_summary,
    pending_question,
    result_from_history,
    result_of,
    step_outcome,
)
from flotilla.agents.running.answer_text import ShowText
from flotilla.agents.running.built_agents import BUILT_AGENTS
from flotilla.agents.running.history_compaction import compact_history
from flotilla.agents.running.models import model_label
from flotilla.agents.running.preemption import TurnBoundary
from flotilla.agents.running.session import (
    DEFAULT_LIMITS,
    AtClose,
    RunLimits,
    RunSession,
    unsaved_history,
)
from flotilla.agents.running.step_files import PromptFiles, media_reader, prompt_files
from flotilla.agents.running.step_reads import StepReads, given, on_demand, read_step, read_step_in
from flotilla.agents.running.thread_window import (
    Known,
    given_steps,
    prompt_with_context,
    thread_window,
)
from flotilla.agents.tools.builtin import ASK_USER, ask_user, read_thread
from flotilla.agents.tools.context import RunDeps, RunJob
from flotilla.agents.tools.file_policy import FilePolicy
from flotilla.agents.tools.files import read_file, write_file
from flotilla.agents.tools.http_fetch import http_fetch
from flotilla.agents.tools.journal import rerunnable_tool
from flotilla.agents.tools.mcp import mcp_toolsets
from flotilla.agents.tools.net_guard import FetchPolicy
from flotilla.agents.tools.registry import AgentSpec
from flotilla.storage.db import Database
from flotilla.storage.records import AgentRunRecord

__all__ = [
    "DEFAULT_LIMITS",
    "RunDeps",
    "RunJob",
    "RunLimits",
    "RunSession",
    "SUMMARY_MAX_CHARS",
    "StepQuestion",
    "StepReport",
    "StepRunResult",
    "bounded_summary",
    "classify_error",
    "drive",
    "resume_step",
    "run_step",
    "step_outcome",
]


def step_prompt(job: RunJob, thread: Sequence[Any], plan: Plan | None = None) -> str:
    """The first user message of a step: its task, the original request and the thread
    window – without what the step already gets (see `agents.running.thread_window`). `plan` (the
    stored plan of `job.plan_id`) names the upstream answers whose summaries it was given."""
    given = given_steps(plan, job.step_index, job.input) if plan is not None else frozenset()
    known = Known(texts=(job.input, job.request), plan_id=job.plan_id, steps=given)
    return prompt_with_context(job.input, job.request, thread_window(thread, known))


def step_instructions(spec: AgentSpec) -> str:
    return (
        f"{spec.system_prompt.strip()}\n\n"
        f"You are {spec.display_name} (`{spec.name}`), one agent of a team working in a Slack "
        "thread. Do only the task you are given, with the context given. When you are done, "
        "call `final_result` with `message` (your answer for the thread) and `summary` "
        "(at most three sentences: what the next steps need from your answer). "
        + (
            "If you truly cannot continue without a person's input, call `ask_user`."
            if spec.has_tool(ASK_USER)
            else ""
        )
    ).strip()


StepAgent = Agent[RunDeps, StepReport | str | DeferredToolRequests]


def step_agent(spec: AgentSpec, toolsets: Sequence[AbstractToolset[RunDeps]] = ()) -> StepAgent:
    """The built agent of `spec` (see `agents.running.built_agents`); extra `toolsets` (tests only)
    make a one-off agent, since they are not part of the configuration."""
    if toolsets:
        return build_step_agent(spec, toolsets)
    return BUILT_AGENTS.get(spec.name, ("step", spec), lambda: build_step_agent(spec))


def build_step_agent(
    spec: AgentSpec, toolsets: Sequence[AbstractToolset[RunDeps]] = ()
) -> StepAgent:
    """The pydantic-ai agent of a sub-agent: its instructions, built-in tools and toolsets."""
    tools: list[Tool[RunDeps]] = []
    if spec.has_tool(ASK_USER):
        tools.append(Tool(ask_user, takes_ctx=True))
    if spec.has_tool("read_thread"):
        tools.append(rerunnable_tool(Tool(read_thread, takes_ctx=True)))
    if spec.has_tool("http_fetch"):
        tools.append(Tool(http_fetch, takes_ctx=True))
    # every step may write a file for the thread and read the conversation's files
    tools += [
        # recorded under the call's key, with the response that made the call
        rerunnable_tool(Tool(write_file, takes_ctx=True), stores_response=True),
        rerunnable_tool(Tool(read_file, takes_ctx=True)),
    ]
    toolsets = [*mcp_toolsets(spec), *toolsets]
    output: OutputSpec[StepReport | str | DeferredToolRequests] = [
        StepReport,
        str,
        DeferredToolRequests,
    ]
    return Agent(
        deps_type=RunDeps,
        output_type=output,
        instructions=step_instructions(spec),
        tools=tools,
        toolsets=list(toolsets),
        name=spec.name,
        retries=3,
        capabilities=[ProcessHistory(compact_history)],
    )


def run_deps(
    job: RunJob,
    thread: list[Any],
    spec: AgentSpec,
    fetch_policy: FetchPolicy | None,
    *,
    db: Database | None = None,
    files: FilePolicy | None = None,
    model: Model | str = "",
    now: Clock = utcnow,
) -> RunDeps:
    """The deps of a run; `fetch_policy` defaults to public addresses only (tests pass another)."""
    policy = fetch_policy if fetch_policy is not None else FetchPolicy()
    return RunDeps(
        job=job,
        thread=thread,
        http_domains=spec.http_domains,
        fetch_policy=policy,
        db=db,
        file_policy=files if files is not None else FilePolicy(),
        reads_media=media_reader(model),
        now=now,
    )


async def load_session(db: Database, job: RunJob) -> tuple[AgentRunRecord | None, list[Any]]:
    """The stored session of `job.run_key` (if any) and the thread's stored messages."""
    reads = await read_step(db, job, with_plan=False, with_files=False)
    return reads.stored, reads.thread


async def _load(
    db: Database, job: RunJob, deps: RunDeps, reads: StepReads | None
) -> tuple[StepReads, PromptFiles]:
    """The step's reads (`reads`, when the caller read them already) and – for a first
    prompt – the files it carries, in the same read transaction (or one opened only if
    something is left to read)."""
    async with AsyncExitStack() as stack:
        if reads is None:
            conn = await stack.enter_async_context(db.read())
            reads = await read_step_in(conn, job, with_plan=True, with_files=False)
            connect = given(conn)
        else:
            connect = on_demand(db, stack)
        files = PromptFiles()
        if reads.first and job.conversation_id is not None:
            files = await prompt_files(
                connect,
                conversation_id=job.conversation_id,
                request_ts=job.request_ts,
                plan=reads.plan,
                step_index=job.step_index,
                policy=deps.file_policy,
                reads_media=deps.reads_media,
                received=reads.received,
                upstream=reads.upstream,
            )
    return reads, files


async def run_step(
    db: Database,
    job: RunJob,
    spec: AgentSpec,
    *,
    model: Model | str,
    limits: RunLimits = DEFAULT_LIMITS,
    toolsets: Sequence[AbstractToolset[RunDeps]] = (),
    now: Clock = utcnow,
    fetch_policy: FetchPolicy | None = None,
    files: FilePolicy | None = None,
    show: ShowText | None = None,
    reads: StepReads | None = None,
    at_close: AtClose | None = None,
    yields: TurnBoundary | None = None,
) -> StepRunResult | StepQuestion:
    """Run `spec` on `job` to completion, or continue the stored session of `job.run_key`.

    Returns the result, or the question when the agent called `ask_user` (then the run is
    suspended: answer it with `resume_step`). Raises `TransientError` or `PermanentError`.
    A session stored as `running` or `failed` continues from its last stored turn; a
    `finished` one returns its stored result and a `suspended` one its open question.
    `toolsets` are extra toolsets only: the agent's built-in tools and its MCP servers are
    built here from `spec` (passing them again would duplicate their tool names).
    `fetch_policy` is for tests only (e.g. a loopback site); by default `http_fetch` reaches
    public addresses only. `show` sees the answer's text while the model writes it.
    `reads`: what the caller read of the step already (`agents.running.step_reads`; with its plan).
    `at_close`: the caller's work in the transaction that stores the finished run.
    `yields`: how a scheduled run gives its slot to urgent work (its attempt's).
    """
    deps = run_deps(job, [], spec, fetch_policy, db=db, files=files, model=model, now=now)
    reads, attached = await _load(db, job, deps, reads)
    stored, thread, plan = reads.stored, reads.thread, reads.plan
    deps.thread = thread
    history = load_messages(stored.messages) if stored and stored.messages else None
    if stored and stored.status == "finished" and history:
        return result_from_history(history)
    # what a storage outage kept from being stored: continued, never paid for again
    history = unsaved_history(job.run_key, history)
    if stored and stored.status == "suspended" and history:
        question = pending_question(history)
        if question is not None:
            return question
    agent = step_agent(spec, toolsets)
    prompt = None if history else attached.prompt(step_prompt(job, thread, plan))
    previous = stored if stored and history else None
    return await _drive_step(
        db,
        job,
        spec,
        agent,
        model,
        deps,
        limits,
        now,
        prompt=prompt,
        history=history,
        deferred=None,
        previous=previous,
        show=show,
        at_close=at_close,
        yields=yields,
    )


async def resume_step(
    db: Database,
    job: RunJob,
    spec: AgentSpec,
    answer: dict[str, str] | str,
    *,
    model: Model | str,
    limits: RunLimits = DEFAULT_LIMITS,
    toolsets: Sequence[AbstractToolset[RunDeps]] = (),
    now: Clock = utcnow,
    fetch_policy: FetchPolicy | None = None,
    files: FilePolicy | None = None,
    show: ShowText | None = None,
    reads: StepReads | None = None,
    at_close: AtClose | None = None,
    yields: TurnBoundary | None = None,
) -> StepRunResult | StepQuestion:
    """Continue a suspended run with a person's answer to its `ask_user` question
    (`reads`: its stored session and thread, if the caller read them already; `at_close`:
    as for `run_step`)."""
    if reads is None:
        reads = await read_step(db, job, with_plan=False, with_files=False)
    stored, thread = reads.stored, reads.thread
    if stored is None or stored.status != "suspended":
        raise PermanentError("There is no suspended run waiting for this answer.")
    history = load_messages(stored.messages)
    question = pending_question(history)
    if question is None:
        raise PermanentError("The suspended run has no open question.")
    deferred = DeferredToolResults(calls={question.tool_call_id: answer})
    deps = run_deps(job, thread, spec, fetch_policy, db=db, files=files, model=model, now=now)
    agent = step_agent(spec, toolsets)
    return await _drive_step(
        db,
        job,
        spec,
        agent,
        model,
        deps,
        limits,
        now,
        prompt=None,
        history=history,
        deferred=deferred,
        previous=stored,
        show=show,
        at_close=at_close,
        yields=yields,
    )


async def _drive_step(
    db: Database,
    job: RunJob,
    spec: AgentSpec,
    agent: StepAgent,
    model: Model | str,
    deps: RunDeps,
    limits: RunLimits,
    now: Clock,
    *,
    prompt: str | Sequence[UserContent] | None,
    history: list[ModelMessage] | None,
    deferred: DeferredToolResults | None,
    previous: AgentRunRecord | None,
    show: ShowText | None = None,
    at_close: AtClose | None = None,
    yields: TurnBoundary | None = None,
) -> StepRunResult | StepQuestion:
    session = RunSession(db, job, spec.name, model_label(model), now, previous, yields)
    output, messages = await drive(
        session,
        agent,
        model,
        deps,
        limits,
        prompt=prompt,
        history=history,
        deferred=deferred,
        show=show,
    )
    if isinstance(output, DeferredToolRequests):
        question = pending_question(messages)
        if question is None:
            await close(session, "failed", messages)
            raise PermanentError("The agent deferred a tool call Flotilla cannot answer.")
        await close(session, "suspended", messages)
        return question
    await close(session, "finished", messages, at_close)
    return result_of(output, deps.files)


async def close(
    session: RunSession,
    status: str,
    messages: list[ModelMessage],
    at_close: AtClose | None = None,
) -> None:
    """`session.close`, with the database being away turned into `StorageError` (the
    run's answer is kept in this process: tried again, it re-reports without a model
    call); other failures as they came."""
    try:
        await session.close(status, messages, at_close)
    except Exception as exc:
        if is_storage_error(exc):
            raise storage_error(exc) from exc
        raise


async def drive(
    session: RunSession,
    agent: Agent[Any, Any],
    model: Model | str,
    deps: Any,
    limits: RunLimits,
    *,
    prompt: str | Sequence[UserContent] | None,
    history: list[ModelMessage] | None,
    deferred: DeferredToolResults | None,
    show: ShowText | None = None,
) -> tuple[Any, list[ModelMessage]]:
    """`session.drive`, with every failure turned into `TransientError` or `PermanentError`."""
    try:
        return await session.drive(
            agent,
            model,
            deps,
            limits,
            prompt=prompt,
            history=history,
            deferred=deferred,
            show=show,
        )
    except Exception as exc:
        raise classify_error(exc, model_label(model)) from exc
