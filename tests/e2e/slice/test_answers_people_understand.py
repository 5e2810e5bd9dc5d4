"""Every plan ends with an answer, and failures and retries are said in words people
understand: the commander's final answer when the plan has no synthesis step (once, across a
lost answer and a restart; a plain summary when its model fails), one failure sentence per
policy, a transient retry edits the dispatch message instead of posting a copy, and the
commander's validation problems never reach the thread."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from pydantic_ai.exceptions import ModelHTTPError, ModelRequestRejectedError
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel

from flotilla.agents.core.retry_policy import JOB
from flotilla.agents.delivering.plan_endings import FINAL_ANSWER_TASK
from flotilla.agents.running import offline
from flotilla.agents.running.offline import first_prompt
from flotilla.local_slack import Message
from flotilla.storage.runs import load_run
from tests.e2e.slice.conftest import Run, scripted
from tests.e2e.slice.faults import LostAnswer
from tests.e2e.slice.scripts import Script, answered, call, combine, flaky, plans, steer, text

ANSWER = "[offline model] What the team found for “"
# past the job retry policy's wait (a job handed over after Slack 5xx is taken again)
RETRY_AFTER_JOB = JOB.cap.total_seconds() + 1
NO_SYNTHESIS = [
    {
        "index": 1,
        "title": "Find the numbers",
        "assignee": "researcher",
        "input": "Find the launch numbers.",
    },
    {
        "index": 2,
        "title": "Write it up",
        "assignee": "writer",
        "input": "Write up: {{step_1.output_summary}}",
    },
]
VALIDATOR_WORDS = ("wait_for", "What was still wrong", "expected", "index", "only the orchestrator")


class FinalAnswers:
    """Counts the commander's final-answer runs the model was asked to start (paid for)."""

    def __init__(self, then: Script | None = None) -> None:
        self.calls = 0
        self.then = then

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse | None:
        if not first_prompt(messages).startswith(FINAL_ANSWER_TASK):
            return None
        if not answered(messages):
            self.calls += 1
        return self.then(messages, info) if self.then else None


def said(run: Run, root: Message, start: str) -> list[Message]:
    return [m for m in run.messages(root) if m.text.startswith(start)]


async def test_a_plan_without_a_synthesis_ends_with_the_commanders_answer(
    start: Callable[..., Any],
) -> None:
    finals = FinalAnswers()
    async with start(model=scripted(combine(plans({"NOSYNTH": NO_SYNTHESIS}), finals))) as run:
        root = run.ask("NOSYNTH please")
        await run.says(root, ANSWER)
        await run.quiesce()
        plan = await run.plan(root)
        assert plan.status == "completed"
        answers = said(run, root, ANSWER)
        assert len(answers) == 1 and finals.calls == 1, run.transcript(root)
        # written from the steps' results, and the last word in the thread
        lines = answers[0].text.splitlines()
        assert lines[0] == "[offline model] What the team found for “NOSYNTH please”:"
        assert lines[1] == "- Find the numbers: researcher (offline) on “Find the launch numbers.”"
        assert lines[2].startswith("- Write it up: writer (offline) on “Write up: researcher")
        assert run.messages(root)[-1].ts == answers[0].ts
        assert "All steps are done" not in run.transcript(root)
        async with run.service.db.read() as conn:
            stored = await load_run(conn, f"plan:{plan.id}:final")
        assert stored is not None and stored.status == "finished"


async def test_a_final_answer_whose_post_was_lost_is_said_and_paid_once(
    start: Callable[..., Any],
) -> None:
    finals = FinalAnswers()
    async with start(model=scripted(combine(plans({"NOSYNTH": NO_SYNTHESIS}), finals))) as run:
        port = LostAnswer(run.service.port, ANSWER)
        port.install(run)
        root = run.ask("NOSYNTH please")
        await asyncio.wait_for(port.lost.wait(), 20)
        await run.quiesce()
        run.clock.advance(RETRY_AFTER_JOB)  # the job was handed over: delivered again
        run.service.wake()
        await run.quiesce()
        assert len(said(run, root, ANSWER)) == 1, run.transcript(root)
        assert finals.calls == 1  # the redelivery found the answer: no second model run


async def test_the_final_answer_survives_a_restart_mid_way(start: Callable[..., Any]) -> None:
    thinking = asyncio.Event()
    planner = plans({"NOSYNTH": NO_SYNTHESIS})

    async def hangs(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if first_prompt(messages).startswith(FINAL_ANSWER_TASK):
            thinking.set()
            await asyncio.Event().wait()  # the process stops while the commander writes
        return planner(messages, info) or offline.respond(messages, info)

    async with start(model=FunctionModel(hangs)) as run:
        root = run.ask("NOSYNTH please")
        await asyncio.wait_for(thinking.wait(), 20)
        assert said(run, root, ANSWER) == []

        await run.stack.restart(model=offline.offline_model())
        resumed = Run(run.stack, run.driver, run.clock)
        await resumed.says(root, ANSWER)
        await resumed.quiesce()
        assert len(said(resumed, root, ANSWER)) == 1, resumed.transcript(root)
        plan = await resumed.plan(root)
        assert [s.attempts for s in plan.steps] == [1, 1]  # nothing ran again
        assert "All steps are done" not in resumed.transcript(root)


async def test_a_failing_model_still_ends_the_plan_with_a_summary(
    start: Callable[..., Any],
) -> None:
    def refuses(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise ModelHTTPError.for_category(
            ModelRequestRejectedError,
            status_code=400,
            model_name="scripted",
            body={"error": "the commander's model refused"},
        )

    script = combine(plans({"NOSYNTH": NO_SYNTHESIS}), FinalAnswers(refuses))
    async with start(model=scripted(script)) as run:
        root = run.ask("NOSYNTH please")
        summary = await run.says(root, "All steps are done: Find the numbers – researcher")
        await run.quiesce()
        assert "Write it up – writer (offline)" in summary.text
        assert len(said(run, root, "All steps are done")) == 1
        transcript = run.transcript(root)
        assert "refused" not in transcript and "Traceback" not in transcript


def three_steps(on_failure: str) -> list[dict[str, Any]]:
    return [
        {
            "index": 1,
            "title": "Find the numbers",
            "assignee": "researcher",
            "input": "Find the launch numbers.",
        },
        {
            "index": 2,
            "title": "Survey our pricing",
            "assignee": "analyst",
            "input": "[fail] survey our pricing",
            "on_failure": on_failure,
        },
        {
            "index": 3,
            "title": "Write it up",
            "assignee": "writer",
            "wait_for": [1, 2],
            "input": "Write up: {{step_1.output_summary}} {{step_2.output_summary}}",
        },
    ]


@pytest.mark.parametrize(
    ("policy", "next_"),
    [
        ("continue", "I'm skipping it and continuing."),
        ("abort_plan", "the plan stops here."),
        ("ask_commander", "I'm deciding what to do."),
    ],
)
async def test_a_real_failure_is_said_once_in_words(
    start: Callable[..., Any], policy: str, next_: str
) -> None:
    async with start(model=scripted(plans({"FAILS": three_steps(policy)}))) as run:
        root = run.ask("FAILS please")
        sentence = await run.says(root, "The analyst could not finish “Survey our pricing”: ")
        await run.quiesce()
        assert sentence.text.endswith(next_), sentence.text
        assert "400" not in sentence.text and "Traceback" not in sentence.text
        assert len(said(run, root, "The analyst could not finish")) == 1, run.transcript(root)
        plan = await run.plan(root)
        if policy == "abort_plan":
            assert plan.status == "aborted"
            (closing,) = said(run, root, "The plan was stopped")
            # one sentence: what happened and what is kept
            assert closing.text.startswith("The plan was stopped: step 2 failed (")
            assert closing.text.endswith(
                "; nothing else will run, and what finished is kept: step 1 (Find the numbers)."
            )
        else:
            assert plan.status == "completed", run.transcript(root)


async def test_a_transient_retry_edits_the_dispatch_message(start: Callable[..., Any]) -> None:
    steps = [{**NO_SYNTHESIS[0], "input": "FLAKY find the launch numbers."}, NO_SYNTHESIS[1]]
    model = scripted(combine(plans({"FLAKY": steps}), flaky("FLAKY", failures=1)))
    async with start(model=model) as run:
        root = run.ask("FLAKY please")
        await run.says(root, "retrying (2/3)")  # the card says it while the step backs off
        await run.quiesce()
        run.clock.advance(31)  # past the first backoff
        run.service.wake()
        await run.says(root, ANSWER)
        await run.quiesce()
        assert (await run.plan(root)).steps[0].attempts == 2
        dispatches = [m for m in run.messages(root) if dispatch_of(m) == 1]
        assert len(dispatches) == 1, run.transcript(root)  # no second, identical message
        assert dispatches[0].text.endswith("— retrying, 2 of 3")
        assert dispatches[0].edited is not None
        assert [d for d in run.dispatches(root) if d[0] == 1] == [(1, 2)]  # now attempt 2's
        assert "could not finish" not in run.transcript(root)  # a retry is no failure


def dispatch_of(message: Message) -> int | None:
    """The step a dispatch message is for (None: not a dispatch)."""
    meta = message.metadata or {}
    if meta.get("event_type") != "flotilla_dispatch":
        return None
    return int(meta["event_payload"]["step"])


def assert_one_sentence(answer: Message) -> None:
    assert "\n" not in answer.text.strip()
    for word in VALIDATOR_WORDS:
        assert word not in answer.text, answer.text


async def test_a_plan_the_commander_cannot_correct_is_one_sentence(
    start: Callable[..., Any],
) -> None:
    broken = [
        {"index": 1, "title": "Research", "assignee": "researcher", "input": "go", "wait_for": [2]}
    ]

    def always_broken(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse | None:
        if "create_plan" in {t.name for t in info.function_tools}:
            return call("create_plan", {"steps": broken})  # however often it is told why
        return None

    async with start(model=scripted(always_broken)) as run:
        root = run.ask("BROKEN PLAN please")
        await run.says(root, "workable plan")
        await run.quiesce()
        replies = run.messages(root)[1:]
        assert len(replies) == 1, run.transcript(root)
        assert_one_sentence(replies[0])


async def test_an_interjection_the_commander_cannot_apply_is_one_sentence(
    start: Callable[..., Any],
) -> None:
    def bad_steps() -> list[ModelResponse]:  # an index the plan already has, every time
        step = {"index": 1, "title": "More", "assignee": "writer", "input": "more"}
        return [call("add_steps", {"steps": [step]}) for _ in range(4)]

    def refused_retry() -> list[ModelResponse]:  # step 1 is done: the plan refuses it
        return [call("retry_step", {"index": 1}), text("Retrying step 1.")]

    form = {"fields": [{"name": "ok", "label": "Go on?"}]}
    steps = [*NO_SYNTHESIS[:1], {"index": 2, "title": "Confirm", "assignee": "user", "form": form}]
    script = combine(
        # "redo" first: the later turn's prompt also quotes the earlier message
        plans({"STEER": steps}),
        steer("redo", refused_retry),
        steer("add more", bad_steps),
    )
    async with start(model=scripted(script)) as run:
        root = run.ask("STEER please")
        await run.says(root, "needs your input")
        await run.quiesce()
        run.driver.post("dev", "launch", "please add more detail", thread_ts=root.ts)
        first = await run.says(root, "workable plan", from_="Flotilla")
        run.driver.post("dev", "launch", "please redo step 1", thread_ts=root.ts)
        second = await run.says(root, "I could not change the plan as asked", from_="Flotilla")
        await run.quiesce()
        for answer in (first, second):
            assert_one_sentence(answer)
        assert "already" not in second.text and "failed or skipped" not in run.transcript(root)
        assert (await run.plan(root)).status == "paused"  # the plan carries on as it was
