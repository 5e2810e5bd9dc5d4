"""The thread window of a run's first prompt: what it leaves out, and its character budget."""

from __future__ import annotations

from typing import Any

from flotilla.agents.planning.plan import Plan, Step
from flotilla.agents.running.commander import CommanderWake, commander_prompt
from flotilla.agents.running.runtime import RunJob, step_prompt
from flotilla.agents.running.thread_window import Known, given_steps, thread_window
from flotilla.storage.records import MessageRecord

REQUEST = "compare our pricing with the top three competitors and draft a note"


def msg(author: str, text: str, event: str | None = None, **payload: Any) -> MessageRecord:
    meta = {"event_type": event, "event_payload": payload} if event else None
    return MessageRecord(
        "C1", "1.0", None if event else "U1", "B1" if event else None, author, text, meta
    )


def plan_of(*inputs: str, summaries: tuple[str, ...] = ()) -> Plan:
    steps = tuple(
        Step(
            index=i,
            title=f"s{i}",
            assignee="researcher",
            input=text,
            output_summary=summaries[i - 1] if i <= len(summaries) else None,
        )
        for i, text in enumerate(inputs, start=1)
    )
    return Plan(id=7, conversation_id=1, request=REQUEST, steps=steps)


def test_given_steps_follow_the_summaries_upstream_but_not_other_branches() -> None:
    plan = plan_of(
        "research",
        "more: {{step_1.output_summary}}",
        "other branch",
        "join: {{step_2.output_summary}}",
    )
    assert given_steps(plan, 4, "join: …") == {1, 2}  # 1 reached 4 through 2's summary
    assert given_steps(plan, 3, "other branch") == set()
    pasted = plan_of("a", "b", summaries=("Prices: A costs 10 and B costs 12 per seat.",))
    assert given_steps(pasted, 2, "use Prices: A costs 10 and B costs 12 per seat.") == {1}


def test_the_window_leaves_out_own_posts_given_answers_and_known_texts() -> None:
    thread = [
        msg("alice", REQUEST),
        msg("Flotilla", "@researcher research", "flotilla_dispatch", plan_id=7, step=1),
        msg("Researcher", "Answer one", "flotilla_result", plan_id=7, step=1),
        msg("Flotilla", "Plan (2 steps)", "flotilla_notice", key="card"),
        msg("Flotilla", "Pick a tier", "flotilla_form", plan_id=7, step=2),
        msg("Analyst", "Answer three", "flotilla_result", plan_id=7, step=3),
        msg("Researcher", "Answer from an old plan", "flotilla_result", plan_id=6, step=1),
        msg("bob", "ok"),
    ]
    known = Known(texts=(REQUEST,), plan_id=7, steps=frozenset({1}))
    assert thread_window(thread, known) == [
        "- Analyst: Answer three",
        "- Researcher: Answer from an old plan",
        "- bob: ok",  # short: not taken for a repeat of a known text that contains "ok"
    ]


def test_the_window_leaves_out_an_answer_whose_final_text_is_not_stored_yet() -> None:
    thread = [
        msg("Researcher", "Prices: A costs", "flotilla_result", plan_id=7, step=1, streaming=True),
        msg("Analyst", "Answer two, whole", "flotilla_result", plan_id=7, step=2),
    ]
    assert thread_window(thread, Known(plan_id=7)) == ["- Analyst: Answer two, whole"]


def test_the_window_is_bounded_in_characters_newest_first() -> None:
    thread = [msg("alice", f"message {i} " + "x" * 500) for i in range(30)]
    lines = thread_window(thread, Known(), budget=1_000, per_message=300)
    assert sum(len(line) + 1 for line in lines) <= 1_000
    assert len(lines) == 3 and lines[-1].startswith("- alice: message 29 ")
    assert lines[0].startswith("- alice: message 27 ")  # still oldest first


def test_a_step_prompt_keeps_interjections_and_drops_its_own_dispatch() -> None:
    job = RunJob(
        run_key="k",
        team_id="T1",
        input="Write the note: Prices A 10.",
        request=REQUEST,
        plan_id=7,
        step_index=2,
    )
    thread = [
        msg("alice", REQUEST),
        msg(
            "Flotilla",
            "@writer Write the note: Prices A 10.",
            "flotilla_dispatch",
            plan_id=7,
            step=2,
        ),
        msg("alice", "please mention the annual discount"),
    ]
    prompt = step_prompt(job, thread, plan_of("research", "{{step_1.output_summary}}"))
    assert prompt.count(REQUEST) == 1 and "@writer" not in prompt
    assert "- alice: please mention the annual discount" in prompt


def test_a_woken_commander_is_not_shown_answers_its_plan_listing_summarises() -> None:
    steps = (
        Step(index=1, title="r", assignee="researcher", status="done", output_summary="A costs 10"),
        Step(index=2, title="w", assignee="writer", status="failed", failure_reason="boom"),
    )
    thread = [
        msg("alice", REQUEST),
        msg("Researcher", "A long answer: A costs 10", "flotilla_result", plan_id=7, step=1),
        msg("alice", "stop after step 2"),
    ]
    job = RunJob(run_key="c", team_id="T1", input="stop after step 2", request=REQUEST)
    wake = CommanderWake(event="alice wrote: stop after step 2", steps=steps)
    prompt = commander_prompt(job, thread, wake)
    assert "A long answer" not in prompt and prompt.count("stop after step 2") == 2
    assert prompt.startswith("stop after step 2") and "summary: A costs 10" in prompt
    first = commander_prompt(
        RunJob(run_key="c", team_id="T1", input=REQUEST, request=REQUEST), thread[:1], None
    )
    assert first == REQUEST  # a first turn: the request once, no window repeating it
