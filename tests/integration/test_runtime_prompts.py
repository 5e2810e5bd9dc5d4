"""A step's prompt does not grow with the plan: the thread window leaves out what the step
already gets (a 20-step chain through the real reconciler and runtime; characters counted)."""

from __future__ import annotations

from flotilla.storage.db import Database
from tests.integration.prompt_chain import INTERJECTION, REQUEST, run_chain


async def test_step_20s_prompt_is_at_most_one_and_a_half_times_step_2s(db: Database) -> None:
    chain = await run_chain(db, 20, interject_after=12)
    before_2, after_2 = chain.chars(2)
    before_20, after_20 = chain.chars(20)
    assert before_20 > 3 * before_2  # the old rule: the thread window repeated the steps
    assert after_20 <= 1.5 * after_2
    for p in chain.prompts:
        assert p.after.count(REQUEST) == 1  # the request once, not again from the thread
        assert "Step " + str(p.step) in p.after and "@researcher" not in p.after  # no dispatches
        assert "Plan (20 steps)" not in p.after  # nor the plan card
        assert (INTERJECTION in p.after) == (p.step > 12)  # a person's message still reaches it


async def test_answers_the_step_was_not_given_stay_in_the_window(db: Database) -> None:
    # step 2's summary reaches step 3 only: step 1's answer came through it; none is repeated
    chain = await run_chain(db, 3)
    assert "Answer 1:" not in chain.prompts[2].after and "Answer 2:" not in chain.prompts[2].after
    assert "Answer 1:" in chain.prompts[2].before  # the old rule repeated them
    assert "I made a plan of 3 steps" in chain.prompts[2].after  # the commander's reply stays
