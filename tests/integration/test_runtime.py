"""A step is one full pydantic-ai run: scripted with FunctionModel against a real database."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic_ai import ModelHTTPError, ModelRateLimitError, ModelServerError
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from sqlalchemy import Table, insert, select

from flotilla.agents.core.errors import PermanentError, RunError, StorageError, TransientError
from flotilla.agents.core.failures import PUBLIC_STORAGE
from flotilla.agents.reconciling.run_results import bounded_summary
from flotilla.agents.running.runtime import (
    RunJob,
    RunLimits,
    StepQuestion,
    StepRunResult,
    resume_step,
    run_step,
)
from flotilla.agents.running.session import RunSession
from flotilla.agents.tools.registry import AgentSpec
from flotilla.storage.conversations import open_conversation, store_message
from flotilla.storage.db import Database
from flotilla.storage.files import produced_files
from flotilla.storage.records import MessageRecord
from flotilla.storage.runs import load_run
from flotilla.storage.tables import Plan
from flotilla.storage.usage import usage_t

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
plans_t: Table = Plan.__table__  # type: ignore[assignment]

SPEC = AgentSpec(
    name="researcher",
    display_name="Researcher",
    description="finds facts",
    system_prompt="You research.",
    tools=("ask_user", "read_thread"),
)


def clock() -> datetime:
    return NOW


async def make_job(
    db: Database, *, step: int = 1, attempt: int = 1, text: str = "Find prices"
) -> RunJob:
    async with db.write() as conn:
        conv = await open_conversation(
            conn,
            team_id="T1",
            channel_id="C1",
            thread_ts="100.1",
            requested_by="U1",
            request_text="compare our pricing",
            now=NOW,
        )
        await store_message(
            conn,
            conv.id,
            MessageRecord("C1", "100.1", "U1", None, "alice", "compare our pricing", None),
            NOW,
        )
        inserted = await conn.execute(
            insert(plans_t).values(
                conversation_id=conv.id, status="running", created_at=NOW, updated_at=NOW
            )
        )
        assert inserted.inserted_primary_key is not None
        plan_id = inserted.inserted_primary_key[0]
    return RunJob(
        run_key=f"plan:{plan_id}:step:{step}:attempt:{attempt}",
        team_id="T1",
        input=text,
        request="compare our pricing",
        channel_id="C1",
        conversation_id=conv.id,
        plan_id=plan_id,
        step_index=step,
    )


def last_parts(messages: list[ModelMessage]) -> list[Any]:
    return list(messages[-1].parts)


def final(message: str, summary: str = "") -> ModelResponse:
    return ModelResponse(
        parts=[ToolCallPart("final_result", {"message": message, "summary": summary})]
    )


async def stored_run(db: Database, key: str) -> Any:
    async with db.read() as conn:
        return await load_run(conn, key)


async def test_a_step_runs_tools_and_returns_message_and_summary(db: Database) -> None:
    job = await make_job(db)
    seen_prompt: list[str] = []

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        parts = last_parts(messages)
        if isinstance(parts[0], UserPromptPart):
            seen_prompt.append(str(parts[0].content))
            return ModelResponse(parts=[ToolCallPart("read_thread", {"last": 5})])
        assert isinstance(parts[0], ToolReturnPart)
        assert "alice: compare our pricing" in str(parts[0].content)
        return final("Prices: A 10, B 12.", "A costs 10 and B 12.")

    result = await run_step(db, job, SPEC, model=FunctionModel(script), now=clock)

    assert result == StepRunResult("Prices: A 10, B 12.", "A costs 10 and B 12.", [])
    assert seen_prompt[0].startswith("Find prices")
    assert "compare our pricing" in seen_prompt[0]
    run = await stored_run(db, job.run_key)
    assert run.status == "finished" and len(run.messages) == 5


async def test_a_text_answer_gets_a_bounded_fallback_summary(db: Database) -> None:
    job = await make_job(db)
    long_text = "word " * 400

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(long_text)])

    result = await run_step(db, job, SPEC, model=FunctionModel(script), now=clock)
    assert isinstance(result, StepRunResult)
    assert result.message == long_text
    assert len(result.summary) <= 500 and result.summary.endswith("…")


async def test_usage_is_recorded_with_workspace_channel_plan_step_agent_and_model(
    db: Database,
) -> None:
    job = await make_job(db, step=2)

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return final("done", "ok")

    await run_step(db, job, SPEC, model=FunctionModel(script, model_name="scripted"), now=clock)

    async with db.read() as conn:
        rows = (await conn.execute(select(usage_t))).mappings().all()
    assert rows  # one entry per stored model turn
    for row in rows:
        assert (row["team_id"], row["channel_id"], row["plan_id"], row["step_index"]) == (
            "T1",
            "C1",
            job.plan_id,
            2,
        )
        assert (row["agent_name"], row["model"]) == ("researcher", "function:scripted")
    spent = (sum(r["input_tokens"] for r in rows), sum(r["output_tokens"] for r in rows))
    assert spent[0] > 0 and spent[1] > 0
    run = await stored_run(db, job.run_key)
    assert (run.input_tokens, run.output_tokens) == spent


async def test_ask_user_suspends_the_run_and_the_answer_resumes_it_from_history(
    db: Database,
) -> None:
    job = await make_job(db)
    calls: list[str] = []

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        parts = last_parts(messages)
        if isinstance(parts[0], UserPromptPart):
            calls.append("ask")
            form = {"fields": [{"name": "tiers", "label": "Which tiers?", "kind": "text"}]}
            return ModelResponse(
                parts=[ToolCallPart("ask_user", {"question": "Which tiers?", "form": form})]
            )
        assert isinstance(parts[0], ToolReturnPart) and parts[0].tool_name == "ask_user"
        calls.append(f"answer={parts[0].content}")
        answer: dict[str, str] = parts[0].content  # type: ignore[assignment]
        return final(f"Compared tiers {answer['tiers']}", "tiers compared")

    model = FunctionModel(script)
    first = await run_step(db, job, SPEC, model=model, now=clock)
    assert isinstance(first, StepQuestion)
    assert first.question == "Which tiers?"
    assert first.form is not None and first.form.fields[0].name == "tiers"
    assert (await stored_run(db, job.run_key)).status == "suspended"

    # dispatching the same run again while it waits asks the same question, no model call
    again = await run_step(db, job, SPEC, model=model, now=clock)
    assert again == first and calls == ["ask"]

    result = await resume_step(db, job, SPEC, {"tiers": "Pro"}, model=model, now=clock)
    assert result == StepRunResult("Compared tiers Pro", "tiers compared", [])
    assert calls == ["ask", "answer={'tiers': 'Pro'}"]
    run = await stored_run(db, job.run_key)
    assert run.status == "finished"
    # the resumed run continued the stored history: one user prompt in the whole session
    assert sum(1 for m in run.messages for p in m["parts"] if p["part_kind"] == "user-prompt") == 1

    with pytest.raises(PermanentError):
        await resume_step(db, job, SPEC, "again", model=model, now=clock)


class Crash(BaseException):
    """Stands for the process dying: not an Exception, so nothing in the run handles it."""


async def test_a_run_resumed_after_a_crash_continues_from_the_stored_history(db: Database) -> None:
    job = await make_job(db)
    tool_runs: list[str] = []
    model_turns: list[str] = []

    def before_crash(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        parts = last_parts(messages)
        if isinstance(parts[0], UserPromptPart):
            model_turns.append("first")
            return ModelResponse(parts=[ToolCallPart("read_thread", {"last": 3})])
        tool_runs.append(str(parts[0].content))
        raise Crash()

    with pytest.raises(Crash):
        await run_step(db, job, SPEC, model=FunctionModel(before_crash), now=clock)
    stored = await stored_run(db, job.run_key)
    assert stored.status == "running"
    # the response that called the tool is stored; `read_thread` is rerunnable (it changes
    # nothing): its return is not stored, the resumed run reads the thread again
    assert [m["kind"] for m in stored.messages] == ["request", "response"]
    assert await ledger_total(db) == (stored.input_tokens, stored.output_tokens) != (0, 0)

    def after_restart(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        parts = last_parts(messages)
        assert not isinstance(parts[0], UserPromptPart), "the run must not start over"
        tool_runs.append(str(parts[0].content))
        model_turns.append("second")
        return final("finished after restart", "restart ok")

    result = await run_step(db, job, SPEC, model=FunctionModel(after_restart), now=clock)
    assert isinstance(result, StepRunResult) and result.summary == "restart ok"
    assert model_turns == ["first", "second"]  # the first turn was not paid for again
    assert len(tool_runs) == 2 and tool_runs[0] == tool_runs[1]  # read again, the same

    # a finished run dispatched again is rebuilt from storage, never run again
    def never(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise AssertionError("a finished run was run again")

    assert await run_step(db, job, SPEC, model=FunctionModel(never), now=clock) == result
    finished = await stored_run(db, job.run_key)
    assert await ledger_total(db) == (finished.input_tokens, finished.output_tokens)
    assert finished.input_tokens > stored.input_tokens  # the resumed turn was added, once


async def test_a_file_written_before_a_crash_is_written_once_when_the_run_resumes(
    db: Database,
) -> None:
    """`write_file` is rerunnable: its return is not stored before the next model call, and
    the call run again after a crash finds its file recorded under the call's key."""
    job = await make_job(db)
    turns: list[str] = []

    def before_crash(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if isinstance(last_parts(messages)[0], UserPromptPart):
            turns.append("write")
            return ModelResponse(
                parts=[ToolCallPart("write_file", {"name": "note.md", "text": "A costs 10."})]
            )
        raise Crash()

    with pytest.raises(Crash):
        await run_step(db, job, SPEC, model=FunctionModel(before_crash), now=clock)
    stored = await stored_run(db, job.run_key)
    assert [m["kind"] for m in stored.messages] == ["request", "response"]

    returns: list[str] = []

    def after_restart(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns.append(str(last_parts(messages)[0].content))
        turns.append("answer")
        return final("Wrote the note.", "note written")

    result = await run_step(db, job, SPEC, model=FunctionModel(after_restart), now=clock)
    assert isinstance(result, StepRunResult) and result.files == ["note.md"]
    assert turns == ["write", "answer"]  # the response that wrote the file: paid once
    assert len(returns) == 1 and returns[0].startswith("Wrote note.md")
    async with db.read() as conn:
        files = await produced_files(conn, run_key=job.run_key)
    assert [f.name for f in files] == ["note.md"]  # one file, though the call ran twice


async def test_a_new_runs_prompt_is_stored_with_the_models_response_to_it(db: Database) -> None:
    """Nothing is stored before a new run's first model call (nothing was paid for yet: a
    run killed during it starts afresh from its step); its prompt is stored with the
    response, which is stored before the tools it calls run."""
    job = await make_job(db)
    seen: list[Any] = []

    async def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(await stored_run(db, job.run_key))
        if len(seen) == 1:
            return ModelResponse(parts=[ToolCallPart("read_thread", {"last": 3})])
        return final("Prices: A 10.", "A costs 10.")

    result = await run_step(db, job, SPEC, model=FunctionModel(answer), now=clock)
    assert isinstance(result, StepRunResult) and result.summary == "A costs 10."
    assert seen[0] is None
    # the response, stored before its tool ran; `read_thread` is rerunnable: its return is
    # not stored before the next model call (a run resumed there simply reads again)
    assert [m["kind"] for m in seen[1].messages] == ["request", "response"]
    assert seen[1].messages[0]["parts"][-1]["part_kind"] == "user-prompt"


async def ledger_total(db: Database) -> tuple[int, int]:
    async with db.read() as conn:
        rows = (await conn.execute(select(usage_t))).mappings().all()
    return sum(r["input_tokens"] for r in rows), sum(r["output_tokens"] for r in rows)


def failing(exc: Exception) -> FunctionModel:
    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise exc

    return FunctionModel(script)


@pytest.mark.parametrize(
    ("response", "summary"),
    [
        # the output tool's call: the answer and its summary
        (final("Prices: A 10.", "A costs 10."), "A costs 10."),
        # an answer in words: before, pydantic-ai sent the stored history (instructions,
        # prompt, answer) to the model again, a second paid request
        (ModelResponse(parts=[TextPart("Prices: A 10.")]), bounded_summary("", "Prices: A 10.")),
    ],
    ids=["output tool", "words"],
)
async def test_a_run_stopped_after_its_answer_was_stored_returns_it_without_the_model(
    db: Database, monkeypatch: pytest.MonkeyPatch, response: ModelResponse, summary: str
) -> None:
    """The answer that ends a run calls no tool: it is stored once, by the close, with the
    run's status (before, a save of its own came first, with nothing between the two). A
    process killed after that, before the step's outcome was reported, runs the step again:
    it continues from the stored answer and pays nothing again."""
    job = await make_job(db)
    calls: list[int] = []
    saves: list[str] = []
    save = RunSession.save

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append(len(messages))
        return response

    async def counted(self: RunSession, status: str, *args: Any, **kwargs: Any) -> None:
        saves.append(status)
        await save(self, status, *args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(RunSession, "save", counted)
        first = await run_step(db, job, SPEC, model=FunctionModel(answer), now=clock)
    assert saves == ["finished"]  # one write for the answer and the close
    result = await run_step(db, job, SPEC, model=FunctionModel(answer), now=clock)

    assert result == first == StepRunResult("Prices: A 10.", summary, [])
    assert calls == [1]  # the model answered once
    assert (await stored_run(db, job.run_key)).status == "finished"


async def test_a_run_whose_close_met_a_storage_outage_returns_its_answer_without_the_model(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database went away as the run was closed: the history kept in this process ends
    with the output tool's return, and the run, taken again once storage is back, ends from
    the answer it has – before, that last request was sent to the model as a new turn."""
    import sqlite3

    from sqlalchemy.exc import OperationalError

    job = await make_job(db)
    calls: list[int] = []

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append(len(messages))
        return final("Prices: A 10.", "A costs 10.")

    save = RunSession.save

    async def away_at_close(self: RunSession, status: str, *args: Any, **kwargs: Any) -> None:
        if status == "finished":
            locked = sqlite3.OperationalError("database is locked")
            raise OperationalError("UPDATE agent_runs", {}, locked)
        await save(self, status, *args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(RunSession, "save", away_at_close)
        with pytest.raises(StorageError) as raised:  # a storage outage: the job tries again
            await run_step(db, job, SPEC, model=FunctionModel(answer), now=clock)
    assert raised.value.retryable and raised.value.public == PUBLIC_STORAGE
    result = await run_step(db, job, SPEC, model=FunctionModel(answer), now=clock)

    assert result == StepRunResult("Prices: A 10.", "A costs 10.", [])
    assert calls == [1]  # the model answered once
    assert (await stored_run(db, job.run_key)).status == "finished"


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (
            ModelHTTPError.for_category(ModelRateLimitError, status_code=429, model_name="m"),
            TransientError,
        ),
        (
            ModelHTTPError.for_category(ModelServerError, status_code=500, model_name="m"),
            TransientError,
        ),
        (ModelHTTPError(503, "m"), TransientError),
        (ModelHTTPError(400, "m", {"error": "bad"}), PermanentError),
        (ModelHTTPError(401, "m"), PermanentError),
        (ConnectionResetError("reset"), TransientError),
    ],
)
async def test_each_provider_error_class_is_classified_and_the_run_marked_failed(
    db: Database, exc: Exception, kind: type[Exception]
) -> None:
    job = await make_job(db)
    with pytest.raises(kind) as raised:
        await run_step(db, job, SPEC, model=failing(exc), now=clock)
    assert isinstance(raised.value, RunError)
    assert raised.value.retryable is (kind is TransientError)
    assert "Traceback" not in str(raised.value)
    assert (await stored_run(db, job.run_key)).status == "failed"


async def test_output_still_invalid_after_retries_is_a_real_failure(db: Database) -> None:
    job = await make_job(db)
    turns: list[int] = []

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turns.append(1)
        return ModelResponse(parts=[ToolCallPart("final_result", {"msg": "wrong field"})])

    with pytest.raises(PermanentError):
        await run_step(db, job, SPEC, model=FunctionModel(script), now=clock)
    assert len(turns) == 4  # the first answer and three retries with the validation errors
    # each invalid answer went back to the model as the tool's error result
    returned = [
        p
        for m in (await stored_run(db, job.run_key)).messages
        for p in m["parts"]
        if p["part_kind"] == "tool-return" and p["tool_name"] == "final_result"
    ]
    assert len(returned) == 3


async def test_the_per_run_token_limit_is_a_real_failure(db: Database) -> None:
    job = await make_job(db)

    def chatty(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart("read_thread", {"last": 1})])

    with pytest.raises(PermanentError, match="usage limit"):
        await run_step(
            db,
            job,
            SPEC,
            model=FunctionModel(chatty),
            limits=RunLimits(total_tokens=400),
            now=clock,
        )
    async with db.read() as conn:
        spent = (await conn.execute(select(usage_t.c.input_tokens))).scalars().all()
    assert spent and spent[0] > 0  # a failed run's tokens are still accounted


async def test_long_runs_see_a_compacted_context_and_store_it(db: Database) -> None:
    from pydantic_ai.toolsets import FunctionToolset

    def fetch(i: int) -> str:
        """Big page."""
        return "z" * 20_000

    job = await make_job(db)
    seen_sizes: list[int] = []

    def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen_sizes.append(
            sum(len(str(getattr(p, "content", ""))) for m in messages for p in m.parts)
        )
        turns = sum(1 for m in messages if isinstance(m, ModelResponse))
        if turns < 6:
            return ModelResponse(parts=[ToolCallPart("fetch", {"i": turns})])
        return final("read them all", "six pages")

    result = await run_step(
        db, job, SPEC, model=FunctionModel(script), toolsets=[FunctionToolset([fetch])], now=clock
    )
    assert isinstance(result, StepRunResult)
    # without compaction the 7th request would carry 6 x 20,000 characters of pages
    assert seen_sizes[-1] < 4 * 20_000
    stored = await stored_run(db, job.run_key)
    assert any("[compacted:" in str(p.get("content")) for m in stored.messages for p in m["parts"])
