"""A step never waits for ever on an answer Slack keeps refusing for the moment: the answer
is tried again a bounded number of times (the stored run answers each time, at no model
cost), then the step fails with a sentence and its failure policy applies."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flotilla.agents.core.errors import TransientError
from flotilla.agents.core.retry_policy import JOB
from flotilla.agents.reconciling.ports import StepTag
from flotilla.storage.records import ConversationRecord
from tests.e2e.slice.faults import FaultyPort, Gate, gated, outbox_row

CHAIN = "research the history of our launch emails and write a short report"


class AnswersAlwaysBusy(FaultyPort):
    """Slack answers 503 to every post of `agent`'s answer; everything else works."""

    def __init__(self, port: Any, agent: str) -> None:
        super().__init__(port)
        self.agent = agent
        self.tries = 0

    async def say(
        self,
        conversation: ConversationRecord,
        text: str,
        *,
        agent: str | None = None,
        result_of: StepTag | None = None,
        **kwargs: Any,
    ) -> str:
        if result_of is not None and agent == self.agent:
            self.tries += 1
            raise TransientError("Slack answered 503")
        return await super().say(conversation, text, agent=agent, result_of=result_of, **kwargs)


async def test_an_answer_slack_keeps_refusing_fails_its_step_after_bounded_tries(
    start: Callable[..., Any],
) -> None:
    researcher = Gate("Research this and list the key findings")
    async with start(model=gated(researcher)) as run:
        busy = AnswersAlwaysBusy(run.service.port, "researcher")
        busy.install(run)
        root = run.ask(CHAIN)
        await researcher.reached()
        key = f"plan:{(await run.plan(root)).id}:step:1:attempt:1"
        researcher.release.set()
        await run.service.settle()
        for _ in range(JOB.maximum_attempts + 2):
            if (await run.plan(root)).steps[0].status != "in_progress":
                break
            run.clock.advance(JOB.cap.total_seconds() + 1)
            run.service.wake()
            await run.service.settle()
        await run.quiesce()
        plan = await run.plan(root)
        assert plan.steps[0].status != "in_progress"
        assert busy.tries == JOB.maximum_attempts  # bounded, and none after the give-up
        assert researcher.calls == 1  # every try answered from the stored run
        assert (await outbox_row(run, key))[0] == "failed"
        notes = [m.text for m in run.messages(root) if "kept failing" in m.text]
        assert notes, run.transcript(root)  # the failure is told in words
