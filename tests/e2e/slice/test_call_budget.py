"""Web API calls per plan step on the walkthrough's diamond (5 steps, one a form, the
writer's note shared as a file), through the real Bolt app and the local workspace with the
native plan display on, counted as `bench/live.py` counts them: a streamed message is one
call, the status calls are left out, a person's views.open would be counted.

Pinned at 13 calls (2.6 a step; it was 14, 2.8, then 15, 3.0, and 17, 3.4 before that): the
form of two fields is answered in its own message (input blocks and a [Submit] that carries
them), so nobody opens a modal (views.open, −1), and the answered form is rewritten through
the [Submit] click's response_url, not chat.update (−1). Without the writer's file upload (2
calls) it is 11, 2.2 a step – the walkthrough as the design shows it, where the writer
answers in the thread, pinned by the second test; with the upload the issue's goal of 2.5 is
not met: see bench/README.md, section `live.py`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from flotilla.bot.views.forms import SUBMIT_ACTION
from flotilla.local_slack import Message
from flotilla.storage.db import Database
from tests.e2e.slice.call_budget import counted_calls, per_step, walkthrough_model
from tests.e2e.slice.conftest import REQUEST
from tests.e2e.slice.faults import card_of

STEPS = 5
BUDGET = 2.6  # 13 calls: card 2, plan display 1, dispatches 3, answers 4, form 1, file 2


async def walk(run: Any) -> tuple[Message, Counter[str]]:
    """The walkthrough through the thread, to the card's final edit; the counted calls."""
    run.stack.workspace.api_log.clear()
    root = run.ask(REQUEST)
    form = await run.says(root, "needs your input")
    await run.driver.click("maya", form, SUBMIT_ACTION, values={"field:tiers": "Pro"})
    await run.says(root, "[offline model] commander:", from_="Flotilla")
    await run.quiesce()
    assert (await run.plan(root)).status == "completed"
    await run.driver.wait_for(  # the card's last edit (its Cancel button gone)
        lambda: "Cancel plan" not in str(card_of(run, root).blocks), what="the final card"
    )
    return root, counted_calls(run.stack.workspace.api_log)


async def test_the_walkthrough_as_shown_costs_at_most_2_2_calls_a_step(
    start: Callable[..., Any], empty_db: Database
) -> None:
    """The writer answers in the thread (no file): 11 calls – the card 2, the plan display 1,
    the dispatches 3, the answers 4, the form 1."""
    async with start(db=empty_db, native_plan_display=True, model=walkthrough_model()) as run:
        root, calls = await walk(run)
        assert per_step(calls, STEPS) <= 2.2, (dict(calls), run.transcript(root))
        assert not calls["files.getUploadURLExternal"], dict(calls)


async def test_the_walkthrough_diamond_costs_at_most_2_6_calls_a_step(
    start: Callable[..., Any], empty_db: Database
) -> None:
    async with start(db=empty_db, native_plan_display=True) as run:
        root, calls = await walk(run)
        assert per_step(calls, STEPS) <= BUDGET, (dict(calls), run.transcript(root))
        assert calls["conversations.replies"] == 0, dict(calls)  # no look-up on a first post
        assert calls["views.open"] == 0, dict(calls)  # the form is answered in its message
        # the card's final edit; the answered form is rewritten through the response_url
        assert calls["chat.update"] == 1, dict(calls)
        # the first thing in the thread is the card, and it carries the commander's words
        first = run.messages(root)[1]
        assert first is card_of(run, root) and "I wrote a plan of 5 steps" in str(first.blocks)
        assert sum("I wrote a plan" in m.text for m in run.messages(root)) == 1
