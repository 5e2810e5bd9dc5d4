"""Block Kit builders: what a person sees, within Slack's limits."""

from __future__ import annotations

import json

import pytest
from slack_sdk.models.blocks import Block

from flotilla.agents.planning.plan import FormField, FormSpec, Plan, Question, Step
from flotilla.bot.views.forms import (
    INLINE_ACTION,
    MAX_INLINE_FIELDS,
    OPEN_ACTION,
    SUBMIT_ACTION,
    FormKey,
    answered_message,
    form_message,
    form_modal,
    missing_sentence,
    modal_values,
)
from flotilla.bot.views.plan_card import CANCEL_ACTION, plan_card


def as_dicts(blocks: list[Block]) -> list[dict[str, object]]:
    return [b.to_dict() for b in blocks]  # to_dict() runs slack_sdk's own validators


def body_of(blocks: list[Block]) -> str:
    return json.dumps(as_dicts(blocks), ensure_ascii=False)


def steps(n: int) -> tuple[Step, ...]:
    return tuple(
        Step(
            index=i, title=f"Step number {i}", assignee="writer", wait_for=(i - 1,) if i > 1 else ()
        )
        for i in range(1, n + 1)
    )


def test_card_lists_steps_with_assignees_and_dependencies() -> None:
    plan = Plan(
        id=7,
        conversation_id=1,
        steps=(
            Step(index=1, title="Research", assignee="researcher", status="done"),
            Step(index=2, title="Survey", assignee="analyst", status="in_progress"),
            Step(index=3, title="Confirm tiers", assignee="user", wait_for=(1, 2)),
            Step(index=4, title="Summarise", assignee="commander", wait_for=(3,)),
        ),
    )
    text, blocks = plan_card(plan, mentions={"researcher": "<@UR>"}, requester="UMAYA")
    body = body_of(blocks)
    assert text.startswith("Plan (4 steps) – running, 1 of 4 done")
    assert "1 ✅ *Research*  ·  <@UR>" in body
    assert "2 ⏳ *Survey*  ·  @analyst  ·  (no deps)" in body
    assert "3 ⏸ *Confirm tiers*  ·  <@UMAYA> (form)  ·  after 1, 2" in body
    assert "4 ⏸ *Summarise*  ·  Flotilla  ·  after 3" in body
    assert CANCEL_ACTION in body


def test_card_explains_retries_failures_and_questions() -> None:
    plan = Plan(
        id=1,
        conversation_id=1,
        steps=(
            Step(
                index=1,
                title="A",
                assignee="w",
                transient_failures=1,
                failure_reason="the model provider was overloaded",
            ),
            Step(
                index=2,
                title="B",
                assignee="w",
                status="failed",
                failure_reason='provider returned 400 "context too long"',
            ),
            Step(
                index=3,
                title="C",
                assignee="w",
                status="blocked",
                question=Question(text="Which region?"),
            ),
            Step(index=4, title="D", assignee="w", status="skipped", failure_reason="optional"),
        ),
    )
    body = body_of(plan_card(plan)[1])
    assert "retrying (2/3): the model provider was overloaded" in body
    assert 'failed: provider returned 400 \\"context too long\\"' in body
    assert "waiting for an answer: Which region?" in body
    assert "skipped: optional" in body


def test_finished_plan_has_no_cancel_button() -> None:
    plan = Plan(id=1, conversation_id=1, status="completed", steps=steps(2))
    assert CANCEL_ACTION not in body_of(plan_card(plan)[1])


def test_fifty_long_steps_stay_within_slack_limits() -> None:
    long = tuple(
        Step(index=i, title="T" * 150, assignee="researcher", wait_for=tuple(range(1, i)))
        for i in range(1, 51)
    )
    plan = Plan(id=1, conversation_id=1, steps=long)
    blocks = as_dicts(plan_card(plan)[1])
    assert len(blocks) <= 50
    sections = [b for b in blocks if b["type"] == "section"]
    assert all(len(b["text"]["text"]) <= 3000 for b in sections)  # type: ignore[index]
    assert sum(b["text"]["text"].count("*TTT") for b in sections) == 50  # type: ignore[index]


def test_mrkdwn_in_titles_is_escaped() -> None:
    plan = Plan(
        id=1, conversation_id=1, steps=(Step(index=1, title="<!channel> & co", assignee="w"),)
    )
    body = body_of(plan_card(plan)[1])
    assert "<!channel>" not in body
    assert "&lt;!channel&gt; &amp; co" in body


def test_form_key_round_trip_and_refusals() -> None:
    key = FormKey(3, 2, 1, 2)
    assert FormKey.decode(key.encode()) == key
    for bad in ["", "form:1:2", "plan:1:2:3:4", "form:a:b:c:d"]:
        with pytest.raises(ValueError):
            FormKey.decode(bad)


def test_single_text_field_is_answered_inline() -> None:
    key = FormKey(1, 3, 1)
    text, blocks = form_message(key, title="Confirm", question="Which tiers?", form=None, ask="U1")
    dicts = as_dicts(blocks)
    assert text == "Step 3 needs your input, <@U1>: Confirm"
    assert dicts[1]["type"] == "input" and dicts[1]["dispatch_action"] is True
    assert dicts[1]["block_id"] == key.encode()
    assert dicts[1]["element"]["action_id"] == INLINE_ACTION  # type: ignore[index]


def test_a_small_form_of_several_fields_is_answered_in_its_message() -> None:
    form = FormSpec(
        fields=[
            FormField(name="tiers", label="Tiers?", kind="select", options=["Pro", "Team"]),
            FormField(name="notes", label="Notes", kind="long_text", required=False),
        ]
    )
    key = FormKey(4, 3, 2, 1)
    text, blocks = form_message(key, title="Choose", question="Tiers?", form=form, ask=None)
    dicts = as_dicts(blocks)
    assert [d["type"] for d in dicts] == ["section", "input", "input", "actions"]
    assert "Tiers?" not in str(dicts[0])  # the question is the first field's label: once
    assert [d["block_id"] for d in dicts[1:3]] == ["field:tiers", "field:notes"]
    assert dicts[1]["element"]["type"] == "static_select"  # type: ignore[index]
    assert dicts[2]["element"]["multiline"] is True and dicts[2]["optional"] is True  # type: ignore[index]
    assert not any(d.get("dispatch_action") for d in dicts)  # only [Submit] sends
    button = dicts[3]["elements"][0]  # type: ignore[index]
    assert button["action_id"] == SUBMIT_ACTION and button["value"] == key.encode()
    assert dicts[3]["block_id"] == key.encode()

    # what a click on [Submit] carries: the message's inputs as Slack's state.values
    notes = {"value": {"type": "plain_text_input", "value": "annual"}}
    unpicked = {"value": {"type": "static_select", "selected_option": None}}
    state = {"values": {"field:tiers": unpicked, "field:notes": notes}}
    values, errors = modal_values(state, form)
    assert values == {"notes": "annual"} and errors == {"field:tiers": "Tiers? is required."}
    sentence = missing_sentence(errors)
    assert "Tiers? is required." in sentence and sentence.endswith(".")
    picked = {"value": {"type": "static_select", "selected_option": {"value": "Pro", "text": {}}}}
    state = {"values": {"field:tiers": picked, "field:notes": notes}}
    assert modal_values(state, form) == ({"tiers": "Pro", "notes": "annual"}, {})


def test_large_forms_and_file_fields_keep_the_modal() -> None:
    large = FormSpec(fields=[FormField(name=f"f{i}", label=f"F{i}") for i in range(6)])
    assert len(large.fields) > MAX_INLINE_FIELDS
    with_file = FormSpec(
        fields=[FormField(name="a", label="A"), FormField(name="doc", label="D", kind="file")]
    )
    for form in (large, with_file):
        dicts = as_dicts(
            form_message(FormKey(1, 1, 1), title="t", question="q", form=form, ask=None)[1]
        )
        assert [d["type"] for d in dicts] == ["section", "actions"]
        assert dicts[1]["elements"][0]["action_id"] == OPEN_ACTION  # type: ignore[index]
    five = FormSpec(fields=[FormField(name=f"f{i}", label=f"F{i}") for i in range(5)])
    dicts = as_dicts(
        form_message(FormKey(1, 1, 1), title="t", question="q", form=five, ask=None)[1]
    )
    assert [d["type"] for d in dicts] == ["section"] + ["input"] * 5 + ["actions"]


def test_single_select_is_a_menu_and_a_large_form_opens_a_modal() -> None:
    select = FormSpec(
        fields=[
            FormField(name="tiers", label="Tiers", kind="select", options=["Team", "Enterprise"])
        ]
    )
    dicts = as_dicts(
        form_message(FormKey(1, 1, 1), title="t", question="q", form=select, ask=None)[1]
    )
    assert dicts[1]["elements"][0]["type"] == "static_select"  # type: ignore[index]

    several = FormSpec(
        fields=[FormField(name="a", label="A"), FormField(name="b", label="B", required=False)]
        + [FormField(name=f"more{i}", label=f"More {i}", required=False) for i in range(4)]
    )
    dicts = as_dicts(
        form_message(FormKey(1, 1, 1), title="t", question="q", form=several, ask=None)[1]
    )
    assert dicts[1]["elements"][0]["action_id"] == OPEN_ACTION  # type: ignore[index]

    view = form_modal(
        FormKey(1, 1, 1), title="t", question="q", form=several, metadata={"channel": "C1"}
    ).to_dict()
    assert json.loads(view["private_metadata"]) == {"key": "form:1:1:1:1", "channel": "C1"}
    assert [b["block_id"] for b in view["blocks"][1:3]] == ["field:a", "field:b"]
    # a question that is a field's own label is not shown twice
    same = form_modal(FormKey(1, 1, 1), title="t", question="A", form=several, metadata={})
    assert [b["type"] for b in same.to_dict()["blocks"]] == ["input"] * 6

    values, errors = modal_values(
        {
            "values": {
                "field:a": {"value": {"type": "plain_text_input", "value": "  "}},
                "field:b": {"value": {"type": "plain_text_input", "value": "x"}},
                "field:more0": {"value": {"type": "plain_text_input", "value": None}},
            }
        },
        several,
    )
    assert values == {"b": "x"}
    assert errors == {"field:a": "A is required."}


def test_answered_message_says_who_and_what() -> None:
    text, _ = answered_message(
        step_index=3, title="Confirm", values={"answer": "Team"}, form=None, user="U9"
    )
    assert text == "✅ Answered by <@U9>: Team"
