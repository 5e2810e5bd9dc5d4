"""Reads and transactions the Slack path no longer makes (issue 17), counted by call site
(`tests/db_counts.py`) while the walkthrough's diamond runs through the real Bolt app and
the local workspace: each test pins one repeated read or split write that was removed, so
it cannot come back unnoticed (`test_db_budget.py` pins only the totals, with headroom)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from tests.db_counts import DbCounts, counting
from tests.e2e.slice.diamond import walk_diamond

FORM_SITES = ("agents/delivering/form_answers.py", "bot/listeners/forms.py")


async def _counted_walk(start: Callable[..., Any]) -> DbCounts:
    """What one diamond sent to the database: by kind, by call site, by transaction."""
    with counting(callers=True) as counts:
        async with start() as run:
            await run.service.settle()
            counts.reset()  # the plan only: not the stack's start-up
            await walk_diamond(run.driver, run.stack.commander)
            await run.quiesce()
    return counts


async def _walk(start: Callable[..., Any]) -> Counter[str]:
    """Statements by kind and call site (`BEGIN` for a transaction) of one diamond."""
    return Counter((await _counted_walk(start)).callers)


def _at(callers: Counter[str], kind: str, *sites: str) -> int:
    """How many statements of `kind` were sent from a call site naming any of `sites`."""
    return sum(
        n
        for line, n in callers.items()
        if line.split("  ", 1)[0].strip() == kind and (not sites or any(s in line for s in sites))
    )


async def test_a_form_submission_reads_its_thread_once(start: Callable[..., Any]) -> None:
    """The listener reads the form's conversation and plan to know its fields; the answer is
    checked against that same read (it was read again, conversation and plan, twice). On
    SQLite the process keeps both (the conversation, and the plan its reconciler committed
    last): nothing is read at all."""
    callers = await _walk(start)
    report = "\n".join(line for line in callers if any(s in line for s in FORM_SITES))
    assert _at(callers, "SELECT plans", *FORM_SITES) == 0, report
    assert _at(callers, "SELECT conversations", *FORM_SITES) <= 1, report


async def test_the_thread_s_conversation_is_read_only_where_it_is_written(
    start: Callable[..., Any],
) -> None:
    """A conversation's record never changes once committed: the process that opened it
    keeps it (by id and by thread, bounded), so the executor's effects, the thread's message
    events and the form's click find it without a read. Left: the write that opens it reads
    it back, and the plan's start reads its request text (both inside their writes)."""
    callers = await _walk(start)
    report = "\n".join(line for line in callers if "conversations" in line)
    assert _at(callers, "SELECT conversations") == 2, report
    assert _at(callers, "SELECT conversations", "record_request") == 1, report


async def test_a_produced_file_is_shared_in_two_transactions(start: Callable[..., Any]) -> None:
    """The diamond's writer writes one file: its bytes are read in the write that stores
    Slack's file id, then it is marked shared (it was read, begun and marked in three, the
    mark reading the row back)."""
    callers = await _walk(start)
    sites = ("agents/running/file_transfer.py",)
    report = "\n".join(line for line in callers if any(s in line for s in sites))
    assert _at(callers, "BEGIN", *sites) == 2, report
    assert _at(callers, "SELECT files", *sites) == 1, report


async def test_the_plan_card_s_first_post_is_one_write_and_no_read(
    start: Callable[..., Any],
) -> None:
    """A step's dispatch shows the card first if it is not posted: its first post was taken
    by the reconcile that stored the plan, which handed this process its first step (it
    was taken in a write of its own, and before that read, then taken, in two), and the
    post's ts is kept with its claim; once posted the port keeps it, so it is never read
    again."""
    callers = await _walk(start)
    report = "\n".join(f"{n:4} {line}" for line, n in callers.items() if "slack_port" in line)
    assert _at(callers, "SELECT plans", "slack_port.py") == 0, report
    taken, claimed = (
        " plan_card",
        "show_card < agents/delivering/plan_notices.py",
    )  # their call sites
    assert _at(callers, "BEGIN", taken) == 0 and _at(callers, "BEGIN", claimed) == 1, report
    assert _at(callers, "UPDATE plans", claimed) == 1, report


async def test_a_handed_dispatch_reads_nothing_before_its_claim(
    start: Callable[..., Any],
) -> None:
    """A step's dispatch (or commander step) that this process's reconcile decided and
    handed to its sender a moment ago takes the plan that reconcile committed to know the
    step is still current, and its slot request's admission facts (not kept: the poll
    interval passed) are read in its claim: no read transaction before the claim (each
    dispatch read its plan, and the facts when due, in one of its own)."""
    with counting(callers=True) as counts:
        async with start() as run:
            await run.service.settle()
            run.clock.advance(run.service.executor.admission.options.poll_seconds + 1)  # facts due
            counts.reset()
            root = run.ask("research the history of our launch emails and write a short report")
            await run.says(root, "[offline model] commander:")
            await run.quiesce()
            assert (await run.plan(root)).status == "completed", run.transcript(root)
            callers = Counter(counts.callers)
    report = "\n".join(f"{n:4} {line}" for line, n in callers.items())
    assert _at(callers, "BEGIN", "claim_slot") >= 3, report  # researcher, writer, commander…
    assert _at(callers, "BEGIN", "current_plan") == 0, report
    assert _at(callers, "BEGIN", " facts < ") == 0, report  # the admission facts' own read
    # the agents' facts, read in claims and kept for the rest of the plan: the commander's in
    # its turn's, the plan's other agents' all in its first step's – the workspace's
    # settings and each agent's estimate by one statement (no table of its own)
    assert _at(callers, "SELECT", "facts_in") == 2, report
    assert _at(callers, "SELECT workspaces", "facts_in") == 0, report


async def test_a_handed_form_reads_no_plan_before_it_is_posted(
    start: Callable[..., Any],
) -> None:
    """The diamond's form step, decided and handed over by this process's reconcile, takes
    the plan that reconcile committed to know it is still current: no plan read of its own
    before the form is posted (it read one); nor does any handed dispatch of the diamond."""
    callers = await _walk(start)
    report = "\n".join(f"{n:4} {line}" for line, n in callers.items() if "current_plan" in line)
    assert _at(callers, "BEGIN", "current_plan") == 0, report


async def test_card_refreshes_and_plan_endings_take_the_plan_this_process_committed(
    start: Callable[..., Any],
) -> None:
    """On SQLite every plan write is this process's reconciler's, which remembers what it
    committed: the card's refreshes and the plan's ending take that plan, unread, while no
    run of the plan may be waiting with a reason (`agents/scheduling/wait_marks.py`). Each read its
    plan (and its runs' wait reasons) under the conversation's lock: 8 transactions a plan."""
    callers = await _walk(start)
    report = "\n".join(f"{n:4} {line}" for line, n in callers.items() if "plan_reads" in line)
    # at most one read: on a busy machine a run can wait for a moment (its plan is then
    # marked, rightly, and the card's next refresh reads the reasons); before the remembered
    # plan every refresh and the ending read (8 a plan)
    assert _at(callers, "SELECT plans", "plan_reads.py") <= 1, report  # `load`, on its thread
    assert _at(callers, "SELECT run_requests", "plan_reads.py") <= 1, report


async def test_the_commander_turn_that_starts_the_plan_settles_in_its_transaction(
    start: Callable[..., Any],
) -> None:
    """The turn's run request and outbox row are finished in the transaction that stores the
    plan (its report's release, `job_settling`), not in one of their own after it; and the
    mention's turn was handed to this process as it was recorded, so no claim looked for it."""
    callers = await _walk(start)
    report = "\n".join(f"{n:4} {line}" for line, n in callers.items() if "jobs.py" in line)
    assert _at(callers, "BEGIN", "_settle < agents/running/jobs.py") == 0, report
    started = "write_with_reconcile < agents/reconciling/reconciler.py"  # in the start's work
    assert _at(callers, "UPDATE run_requests", started) == 1, report


async def test_the_commander_turn_that_starts_the_plan_is_closed_in_its_transaction(
    start: Callable[..., Any],
) -> None:
    """The turn's run is stored finished (its history, the tokens of its last answer) by the
    transaction that stores the plan and settles the turn: one write where there were two,
    and nothing between them to pay for again."""
    counts = await _counted_walk(start)
    [starting] = counts.together("INSERT plans")
    assert {"INSERT agent_runs", "INSERT usage_ledger", "UPDATE run_requests"} <= starting


async def test_a_written_file_is_stored_with_the_response_that_wrote_it(
    start: Callable[..., Any],
) -> None:
    """The writer's `write_file` call records the file and the model response that made the
    call in one transaction (the response was stored in one of its own before the tool
    ran): a run resumed after it runs the same call again, at no cost, and finds the file."""
    counts = await _counted_walk(start)
    [writing] = counts.together("INSERT files")
    assert {"INSERT agent_runs", "INSERT usage_ledger"} <= writing


async def test_the_echoes_of_flotillas_own_posts_write_nothing(
    start: Callable[..., Any],
) -> None:
    """Slack sends a `message` event for each of Flotilla's posts (as its bot, or with an
    own-app agent's token); the code that posted keeps the message, so its echo is not
    stored again – the diamond has no person's reply, so nothing is recorded as one."""
    callers = await _walk(start)
    assert _at(callers, "BEGIN", "record_reply") == 0, "\n".join(callers)


async def test_the_workspace_s_slack_features_are_read_as_the_process_starts(
    start: Callable[..., Any],
) -> None:
    """What Slack refused in the workspace (streaming, agent sessions) is read in the
    transaction that registers the workspace at start-up, then kept: no plan reads it."""
    callers = await _walk(start)
    assert _at(callers, "SELECT slack_fallbacks") == 0, "\n".join(callers)


async def test_a_form_answer_without_files_finishes_its_click_with_its_store(
    start: Callable[..., Any],
) -> None:
    """The diamond's form answer (no files) is stored, and its click's inbox row finished,
    by one transaction: after it, the answer's stored row records and shows it whatever
    happens to this process, so the click needs no replay."""
    counts = await _counted_walk(start)
    assert counts.together("UPDATE inbox") == [frozenset({"INSERT outbox", "UPDATE inbox"})]
