"""A form's answer is never left looking unanswered: the answer is stored before it is
recorded, and the form's message is rewritten from the stored answer – after a crash
between recording the answer and rewriting the message (the answer's stored row does it
once its grace is over; the click's inbox row was finished with the answer's store, so no
replay is needed – a click with files is replayed, its files kept), when
Slack fails the rewrite for a while, and when another person clicks the form later (told
who answered; the form shows the first answer, not theirs). Through the real Bolt app and
the local workspace, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from flotilla.bot.views.forms import INLINE_ACTION, SUBMIT_ACTION
from flotilla.local_slack import Message
from flotilla.local_slack.interactivity import interactivity_of
from tests.conftest import PostgresSchema, postgres_url
from tests.e2e.slice.conftest import Run, scripted
from tests.e2e.slice.scripts import plans
from tests.e2e.slice.test_durable_inbox import inbox_rows
from tests.e2e.slice.test_form_rewrite import ASK, answered
from tests.e2e.slice.test_inline_forms import STEPS as BUDGET_STEPS

ANSWER = {"field:budget": "10k", "field:size": "Large", "field:notes": "annual"}
SHOWN = "Budget: 10k; Team size: Large; Notes: annual"


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def on(request: pytest.FixtureRequest, start: Callable[..., Any]) -> Callable[..., Any]:
    """`start`, on SQLite or on a throw-away PostgreSQL schema."""

    @asynccontextmanager
    async def starter(**kwargs: Any) -> AsyncIterator[Run]:
        if request.param == "sqlite":
            async with start(**kwargs) as run:
                yield run
            return
        schema = PostgresSchema(postgres_url())
        await schema.create()
        db = schema.database()
        try:
            async with start(db=db, **kwargs) as run:
                yield run
        finally:
            await db.dispose()
            await schema.drop()

    return starter


def dies_once_recorded(run: Run) -> asyncio.Event:
    """The process dies right after a form's answer is recorded (committed), before the
    form's message is rewritten; the event is set when it did."""
    original = run.service.reconciler.reconcile
    died = asyncio.Event()

    async def recorded_then_dies(conversation_id: int, **kwargs: Any) -> Any:
        decision = await original(conversation_id, **kwargs)
        if str(kwargs.get("event_key") or "").endswith(":answered"):
            died.set()
            raise asyncio.CancelledError
        return decision

    run.service.reconciler.reconcile = recorded_then_dies  # type: ignore[method-assign]
    return died


async def processed(run: Run, count: int) -> None:
    """Until `count` stored requests are marked processed (a listener marks its request
    after answering the person; the database changes no workspace state to wait on)."""
    async with asyncio.timeout(20):
        while sum(done for _, done in await inbox_rows(run)) < count:
            await asyncio.sleep(0.01)


async def answered_then_crashed(run: Run, root: Message, form: Message) -> Run:
    """Maya answers the form; the process dies once her answer is recorded; a new one
    starts on the same database. The form still shows its inputs."""
    died = dies_once_recorded(run)
    delivery = await run.driver.click("maya", form, SUBMIT_ACTION, values=ANSWER)
    assert [a.status for a in delivery.attempts] == [200]
    await asyncio.wait_for(died.wait(), 20)
    await run.stack.restart()
    resumed = Run(run.stack, run.driver, run.clock)
    assert (await resumed.plan(root)).steps[0].status == "done"  # recorded
    assert "Answered by" not in form.text and SUBMIT_ACTION in str(form.blocks)  # not shown
    return resumed


async def test_a_crash_after_the_answer_is_recorded_is_mended_by_its_stored_row(
    on: Callable[..., Any], updated: list[str]
) -> None:
    async with on(model=scripted(plans({"BUDGET": BUDGET_STEPS}))) as run:
        root = run.ask("BUDGET please")
        form = await run.says(root, "needs your input")
        await run.quiesce()
        resumed = await answered_then_crashed(run, root, form)

        resumed.clock.advance(resumed.service.options.inbox_claim_seconds + 1)
        assert resumed.service.replay_inbox is not None
        assert await resumed.service.replay_inbox() == 0  # finished with the answer's store
        await resumed.service.settle()  # the answer's row, due now: recorded, then shown
        message = await answered(resumed, root, form)
        maya = resumed.driver.person("maya").id
        assert message.text == f"✅ Answered by <@{maya}>: {SHOWN}"
        assert SUBMIT_ACTION not in str(message.blocks)
        await resumed.says(root, "[offline model] writer:")
        await resumed.quiesce()
        assert resumed.driver.ephemerals("maya") == []  # her own answer: nothing refused
        assert updated.count(form.ts) == 1  # shown once (a replay has no response_url)
        assert resumed.transcript(root).count("Answered by") == 1
        plan = await resumed.plan(root)
        assert plan.status == "completed"
        assert plan.steps[0].output_summary == "budget: 10k\nsize: Large\nnotes: annual"


async def test_a_later_click_by_someone_else_is_told_who_answered_and_shows_that_answer(
    on: Callable[..., Any], updated: list[str]
) -> None:
    model = scripted(plans({"BUDGET": BUDGET_STEPS}))
    async with on(model=model, form_answerers="anyone") as run:
        root = run.ask("BUDGET please")
        form = await run.says(root, "needs your input")
        await run.quiesce()
        resumed = await answered_then_crashed(run, root, form)
        maya = resumed.driver.person("maya").id

        # before the replay, Dev (who may answer too) sends other values from the form
        theirs = {"field:budget": "99k", "field:size": "Small"}
        await resumed.driver.click("dev", form, SUBMIT_ACTION, values=theirs)
        await resumed.driver.wait_for(lambda: resumed.driver.ephemerals("dev"), what="a refusal")
        assert [e.text for e in resumed.driver.ephemerals("dev")] == [
            f"This form was already answered by <@{maya}>."
        ]
        message = await answered(resumed, root, form)
        assert message.text == f"✅ Answered by <@{maya}>: {SHOWN}"  # hers, not Dev's
        assert "99k" not in str(message.blocks)

        # Maya's click is not replayed (finished with her answer's store): she is told nothing
        await processed(resumed, 2)  # both clicks: done
        resumed.clock.advance(resumed.service.options.inbox_claim_seconds + 1)
        assert resumed.service.replay_inbox is not None
        assert await resumed.service.replay_inbox() == 0
        await resumed.quiesce()
        assert resumed.driver.ephemerals("maya") == []
        assert form.text == f"✅ Answered by <@{maya}>: {SHOWN}"
        assert updated.count(form.ts) == 0  # through Dev's click's response_url
        step = (await resumed.plan(root)).steps[0]
        assert step.output_summary == "budget: 10k\nsize: Large\nnotes: annual"


class LogWatch(logging.Handler):
    """An event set when a log line matching `matches` is emitted (from any thread), for a
    line that no change in the workspace follows (`Driver.wait_for` re-checks on those)."""

    def __init__(self, matches: Callable[[str], bool]) -> None:
        super().__init__(logging.INFO)
        self.matches = matches
        self.seen = asyncio.Event()
        self.loop = asyncio.get_running_loop()

    def emit(self, record: logging.LogRecord) -> None:
        if self.matches(record.getMessage()):
            self.loop.call_soon_threadsafe(self.seen.set)

    def __enter__(self) -> asyncio.Event:
        logging.getLogger().addHandler(self)
        return self.seen

    def __exit__(self, *exc: object) -> None:
        logging.getLogger().removeHandler(self)


async def test_a_rewrite_slack_fails_for_a_while_is_done_once_it_works(
    on: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with on() as run:
        interactivity_of(run.stack.workspace).response_url_seconds = -1.0  # every url expired
        root = run.ask(ASK)
        question = await run.says(root, "asks:")
        await run.quiesce()
        run.stack.workspace.refuse("chat.update", "internal_error")  # Slack fails for a while
        # the executor's line comes after the workspace's last change: awaited on the log
        with LogWatch(lambda line: ":answered failed" in line and "retrying" in line) as retried:
            await run.driver.click("maya", question, INLINE_ACTION, value="2024 only")
            await asyncio.wait_for(retried.wait(), 30)  # the rewrite failed, to be retried
        assert "Answered by" not in question.text
        asked = (await run.plan(root)).steps[0].question
        assert asked is not None and asked.answer == {"answer": "2024 only"}  # recorded

        del run.stack.workspace.refusals["chat.update"]  # Slack is back
        run.clock.advance(60)  # past the retry's backoff
        run.service.wake()
        message = await answered(run, root, question)
        assert message.text.endswith(": 2024 only") and INLINE_ACTION not in str(message.blocks)
        await run.quiesce()
        assert run.driver.ephemerals("maya") == []  # the person reads nothing about it
