"""Issue 10's executor defects, end to end through the real Bolt app and the local workspace
(5): other apps and people cannot silence Flotilla by posting its own metadata keys."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from flotilla.agents.planning.effects import finished_key, question_key, result_key, step_key
from flotilla.agents.running import offline
from flotilla.bot.listeners.payloads import DISPATCH_EVENT, FORM_EVENT, NOTICE_EVENT, RESULT_EVENT
from flotilla.bot.views.forms import INLINE_ACTION
from flotilla.storage.db import Database
from tests.e2e.slice.conftest import Run
from tests.e2e.slice.faults import WAIT, FirstPostsFail, Gate, gated, impersonate, posted, said

CHAIN = "research the history of our launch emails and write a short report"


async def test_other_apps_and_people_cannot_silence_flotilla(
    start: Callable[..., Any], empty_db: Database
) -> None:
    researcher = Gate("Research this and list the key findings")
    async with start(db=empty_db, model=gated(researcher)) as run:
        ws = run.stack.workspace
        impostor = ws.install_app("Impostor", scopes=["chat:write"], bot_events=[])
        ws.invite(run.stack.channel, impostor)
        root = run.ask(CHAIN)
        await researcher.reached()  # step 1 in flight: its dispatch is in the thread
        plan = await run.plan(root)
        p = plan.id
        keys = [
            (DISPATCH_EVENT, step_key(p, 2, 1)),
            (FORM_EVENT, question_key(p, 1, 1, 1)),
            (NOTICE_EVENT, finished_key(p)),
        ] + [(RESULT_EVENT, result_key(p, step, 1)) for step in (1, 2, 3)]
        await impersonate(run, root, impostor.bot_token, keys)  # the very keys Flotilla will use
        # a person's message carrying a result key (e.g. copied by a script) counts neither
        person = run.driver.post("dev", "launch", "my own result", thread_ts=root.ts)
        person.metadata = {
            "event_type": RESULT_EVENT,
            "event_payload": {"key": result_key(p, 1, 1)},
        }
        conversation = await run.service.find_conversation(root.channel, root.ts)
        assert conversation is not None
        port = run.service.port
        for _, key in keys:
            assert not await port.thread_has_key(conversation, key, agent="researcher"), key
        assert await port.thread_has_key(conversation, step_key(p, 1, 1))  # Flotilla's own

        # Flotilla stops mid-step without settling; the next process redelivers it all
        await run.stack.restart(model=offline.offline_model())
        resumed = Run(run.stack, run.driver, run.clock)
        await resumed.says(root, "[offline model] commander:")
        await resumed.quiesce()

        plan = await resumed.plan(root)
        assert plan.status == "completed", resumed.transcript(root)
        assert [s.attempts for s in plan.steps] == [1, 1, 1]
        ours = [m for m in resumed.messages(root) if m.bot_id != impostor.bot_id]
        dispatches = [
            (m.metadata or {}).get("event_payload", {}).get("step")
            for m in ours
            if (m.metadata or {}).get("event_type") == DISPATCH_EVENT
        ]
        assert dispatches == [1, 2]
        texts = [m.text for m in ours]
        for prefix in (
            "[offline model] researcher:",
            "[offline model] writer:",
            "[offline model] commander:",
        ):
            assert sum(t.startswith(prefix) for t in texts) == 1, (prefix, texts)


async def test_a_redelivered_dispatch_and_form_are_not_silenced(
    start: Callable[..., Any],
) -> None:
    async with start() as run:
        ws = run.stack.workspace
        impostor = ws.install_app("Impostor", scopes=["chat:write"], bot_events=[])
        ws.invite(run.stack.channel, impostor)
        port = FirstPostsFail(run.service.port)
        port.install(run)
        root = run.ask(f"[ask] {CHAIN}")
        await run.says(root, "Plan (")  # the card: the plan exists, its dispatch is due
        plan = await run.plan(root)
        p = plan.id
        await port.failure(step_key(p, 1, 1))  # the dispatch's first post is failing
        await impersonate(
            run,
            root,
            impostor.bot_token,
            [
                (DISPATCH_EVENT, step_key(p, 1, 1)),
                (FORM_EVENT, question_key(p, 1, 1, 1)),
                (RESULT_EVENT, result_key(p, 1, 1)),
            ],
        )
        dev = run.driver.post("dev", "launch", "copied", thread_ts=root.ts)
        dev.metadata = {
            "event_type": FORM_EVENT,
            "event_payload": {"key": question_key(p, 1, 1, 1)},
        }

        port.go.set()
        await asyncio.wait_for(port.raised.wait(), WAIT)
        run.clock.advance(5)  # past the outbox's backoff: delivered again, the thread checked
        run.service.wake()
        await run.driver.wait_for(
            lambda: posted(run, root, impostor.bot_id, DISPATCH_EVENT, step_key(p, 1, 1)),
            what="the dispatch, delivered again",
        )
        await port.failure(question_key(p, 1, 1, 1))  # the question's first post failed
        run.clock.advance(5)
        run.service.wake()
        question = await run.says(root, "asks:", from_="Flotilla")
        await run.driver.click("maya", question, INLINE_ACTION, value="2024 only")
        await run.says(root, "[offline model] commander:")
        await run.quiesce()

        plan = await run.plan(root)
        assert plan.status == "completed", run.transcript(root)
        bot = impostor.bot_id
        assert posted(run, root, bot, DISPATCH_EVENT, step_key(p, 1, 1)) == 1
        assert posted(run, root, bot, FORM_EVENT, question_key(p, 1, 1, 1)) == 1
        assert posted(run, root, bot, RESULT_EVENT, result_key(p, 1, 1)) == 1
        assert said(run, root, "[offline model] researcher:") == 1
