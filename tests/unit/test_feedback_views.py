"""👍/👎 blocks: the buttons rating own-app agents' answers under the commander's answer."""

from __future__ import annotations

from flotilla.bot.views.feedback import (
    FEEDBACK_ACTION,
    FEEDBACK_ACTIONS,
    RATED_MAX,
    feedback_block,
    parse_click,
    rating_blocks,
)


def test_each_rated_answer_gets_a_line_and_its_own_buttons() -> None:
    rated = [(1, "researcher", "<@U0RES>"), (4, "scout", "<@U0SCO>")]
    blocks = rating_blocks(7, rated)
    assert [b["type"] for b in blocks] == ["context", "context_actions"] * 2
    assert "<@U0RES>'s answer (step 1)" in str(blocks[0])
    buttons = [b["elements"][0] for b in blocks[1::2]]
    ids = [b["action_id"] for b in buttons]
    assert len(set(ids)) == 2 and all(FEEDBACK_ACTIONS.fullmatch(i) for i in ids)
    click = parse_click(buttons[1]["negative_button"]["value"])
    assert click is not None and (click.plan_id, click.step, click.agent) == (7, 4, "scout")
    assert click.verdict == "bad"
    many = [(i, "researcher", "<@U0RES>") for i in range(1, 10)]
    assert len(rating_blocks(7, many)) == 2 * RATED_MAX  # the message stays small
    assert FEEDBACK_ACTIONS.fullmatch(feedback_block(7, 0, "commander")["elements"][0]["action_id"])
    assert not FEEDBACK_ACTIONS.fullmatch(f"{FEEDBACK_ACTION}_other")
