"""Files in and out, end to end: the real Bolt app over HTTP against the local workspace.

An attachment of the request reaches every step's prompt; one Flotilla does not take gets a
sentence; a file an agent writes is uploaded into the thread once – also across a restart
between writing it and uploading it, and across one in the middle of its upload – and it is
listed in the step's `output_files`, in the next step's rendered input and on the plan card.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from pydantic_ai.messages import (
    BinaryContent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from flotilla.agents.running import offline
from flotilla.agents.running.offline import first_prompt
from flotilla.agents.tools.file_policy import FilePolicy
from flotilla.bot.views.forms import OPEN_ACTION, SUBMIT_ACTION
from flotilla.local_slack import Message
from flotilla.storage.files import conversation_files
from tests.e2e.slice.conftest import REQUEST, Run
from tests.e2e.slice.scripts import Script, answered, call, combine, plans, tools_of
from tests.e2e.slice.test_bad_input import post
from tests.e2e.slice.test_edge_validation import headers_for, mention

Hook = Callable[[list[ModelMessage], AgentInfo], Awaitable[None]]
RESEARCH = "research our launch emails and write a short report"
PRICES = b"tier,monthly price\nStarter,9 EUR\nPro,29 EUR\n"
NOTE_PLAN = [
    {
        "index": 1,
        "title": "Draft the note",
        "assignee": "writer",
        "input": "Draft a note on the quarterly numbers for the team.",
    },
    {
        "index": 2,
        "title": "Post it",
        "assignee": "commander",
        "input": "Post the note.\nFiles: {{step_1.output_files}}",
        "wait_for": [1],
    },
]


def agent_of(info: AgentInfo) -> str:
    found = re.search(r"\(`([^`]+)`\)", info.instructions or "")
    return found.group(1) if found else "?"


@dataclass
class Prompts:
    """The offline model (plus scripts), remembering each step run's first prompt."""

    seen: list[tuple[str, str]] = field(default_factory=list)

    def model(self, before: Hook | None = None, script: Script | None = None) -> FunctionModel:
        """`before` runs first on every model request (e.g. to stop the process there);
        `script` answers where it returns a response."""
        script = combine(plans({"quarterly": NOTE_PLAN}), *([script] if script else []))

        async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            tools = tools_of(info)
            if "create_plan" not in tools and "retry_step" not in tools and len(messages) == 1:
                self.seen.append((agent_of(info), first_prompt(messages)))
            if before is not None:
                await before(messages, info)
            return script(messages, info) or offline.respond(messages, info)

        return FunctionModel(respond, model_name="recording")

    def of(self, agent: str) -> str:
        found = [p for a, p in self.seen if a == agent]
        assert found, f"no step run of {agent}: {[a for a, _ in self.seen]}"
        return found[-1]


def file_messages(run: Run, root: Message) -> list[Message]:
    return [m for m in run.messages(root) if m.files]


def names(run: Run, message: Message) -> list[str]:
    return [run.stack.workspace.state.files.files[f].name for f in message.files]


async def test_an_attached_text_file_reaches_every_step_including_step_3(
    start: Callable[..., Any],
) -> None:
    prompts = Prompts()
    async with start(model=prompts.model()) as run:
        attached = ("prices.csv", PRICES, "text/csv")
        root = run.driver.mention("maya", "launch", run.stack.commander, RESEARCH, files=[attached])
        await run.says(root, "[offline model] commander:")
        await run.quiesce()
        plan = await run.plan(root)
        assert plan.status == "completed", run.transcript(root)
        assert [s.assignee for s in plan.steps] == ["researcher", "writer", "commander"]
        for agent in ("researcher", "writer", "commander"):  # step 3 is the commander's
            prompt = prompts.of(agent)
            assert "prices.csv (text/csv, 44 bytes)" in prompt, prompt
            assert "Pro,29 EUR" in prompt
        # the researcher read it (the offline model quotes what it reads)
        await run.says(root, "read prices.csv: tier,monthly price; Starter,9 EUR; Pro,29 EUR")
        downloads = run.stack.workspace.state.files.downloads
        assert [app for _file, app in downloads] == [run.stack.commander.app_id]  # once


async def test_a_refused_type_and_a_file_too_big_get_a_sentence_and_are_never_fetched(
    start: Callable[..., Any],
) -> None:
    prompts = Prompts()
    async with start(model=prompts.model(), files=FilePolicy(max_bytes=100)) as run:
        files = [
            ("setup.exe", b"MZ\x90\x00", "application/x-msdownload"),
            ("big.txt", b"x" * 1000, "text/plain"),
            ("prices.csv", PRICES, "text/csv"),
        ]
        root = run.driver.mention("maya", "launch", run.stack.commander, RESEARCH, files=files)
        said = await run.says(root, "I cannot use these attachments", from_="Flotilla")
        assert "setup.exe is application/x-msdownload, a type I do not take" in said.text
        assert "big.txt is 1000 bytes, more than the 100 bytes I take" in said.text
        await run.quiesce()
        assert (await run.plan(root)).status == "completed"  # the plan went on
        prompt = prompts.of("researcher")
        assert "Pro,29 EUR" in prompt and "xxxx" not in prompt
        assert "setup.exe (application/x-msdownload, 4 bytes): not available" in prompt
        fetched = {f for f, _app in run.stack.workspace.state.files.downloads}
        state = run.stack.workspace.state.files.files
        assert {state[f].name for f in fetched} == {"prices.csv"}
        texts = [m.text for m in run.messages(root)]
        assert sum("I cannot use" in t for t in texts) == 1  # said once


async def produced_rows(run: Run, root: Message) -> list[Any]:
    conversation = await run.service.find_conversation(root.channel, root.ts)
    assert conversation is not None
    async with run.service.db.read() as conn:
        files = await conversation_files(conn, conversation.id)
    return [f for f in files if f.direction == "produced"]


async def assert_note_delivered_once(run: Run, root: Message, prompts: Prompts) -> None:
    plan = await run.plan(root)
    assert plan.status == "completed", run.transcript(root)
    uploads = file_messages(run, root)
    assert [names(run, m) for m in uploads] == [["note.md"]], run.transcript(root)
    assert uploads[0].username == "Writer"  # under the writer's identity (a persona)
    assert plan.steps[0].output_files == ("note.md",)
    rows = await produced_rows(run, root)
    assert [(r.name, r.state, r.mimetype) for r in rows] == [("note.md", "shared", "text/markdown")]
    assert rows[0].slack_file_id == uploads[0].files[0]
    step2 = prompts.of("commander")
    assert "Files: note.md" in step2  # {{step_1.output_files}} rendered
    assert "(step 1) note.md (text/markdown" in step2
    assert "# Draft a note on the quarterly numbers for the team." in step2  # its content
    card = next(m for m in run.messages(root) if m.text.startswith("Plan ("))
    assert "📎 `note.md`" in str(card.blocks)


async def test_a_written_file_is_uploaded_once_listed_rendered_and_on_the_card(
    start: Callable[..., Any],
) -> None:
    prompts = Prompts()
    async with start(model=prompts.model()) as run:
        root = run.ask("the quarterly note please")
        await run.says(root, "[offline model] commander:")
        await run.quiesce()
        await assert_note_delivered_once(run, root, prompts)


def wrote_the_file(messages: list[ModelMessage]) -> bool:
    last = messages[-1]
    return isinstance(last, ModelRequest) and any(
        isinstance(p, ToolReturnPart) and p.tool_name == "write_file" for p in last.parts
    )


async def test_a_restart_between_writing_and_uploading_uploads_once(
    start: Callable[..., Any],
) -> None:
    wrote = asyncio.Event()

    async def dies_after_writing(messages: list[ModelMessage], info: AgentInfo) -> None:
        if agent_of(info) == "writer" and wrote_the_file(messages):
            wrote.set()
            await asyncio.Event().wait()  # the process stops while the model thinks

    prompts = Prompts()
    async with start(model=prompts.model(dies_after_writing)) as run:
        root = run.ask("the quarterly note please")
        await asyncio.wait_for(wrote.wait(), 20)
        assert [r.state for r in await produced_rows(run, root)] == ["stored"]
        assert file_messages(run, root) == []  # written, not uploaded

        await run.stack.restart(model=prompts.model())
        resumed = Run(run.stack, run.driver, run.clock)
        await resumed.says(root, "[offline model] commander:")
        await resumed.quiesce()
        await assert_note_delivered_once(resumed, root, prompts)
        assert [s.attempts for s in (await resumed.plan(root)).steps] == [1, 1]


@pytest.mark.parametrize(
    "dies_at", ["start_upload", "before send_upload", "send_upload", "complete_upload"]
)
async def test_a_restart_in_the_middle_of_an_upload_finishes_it_once(
    start: Callable[..., Any], dies_at: str
) -> None:
    """The process dies once Slack gave the upload its file id (not stored yet: the bytes
    are read with the write that stores it), with the file id stored and nothing sent,
    after the bytes were sent (the file is not shared yet), or after Slack shared it
    (before Flotilla recorded that): whichever, the file is shared once."""
    prompts = Prompts()
    async with start(model=prompts.model()) as run:
        port = run.service.port
        reached = asyncio.Event()
        before, method = dies_at.startswith("before "), dies_at.removeprefix("before ")
        real = getattr(port, method)

        async def then_dies(*args: Any, **kwargs: Any) -> Any:
            if not before:
                await real(*args, **kwargs)
            reached.set()
            await asyncio.Event().wait()  # the process stops here

        setattr(port, method, then_dies)
        root = run.ask("the quarterly note please")
        await asyncio.wait_for(reached.wait(), 20)
        rows = await produced_rows(run, root)
        if dies_at == "start_upload":  # nothing of the upload stored: it is begun again
            assert [(r.state, r.slack_file_id) for r in rows] == [("stored", None)]
        else:
            assert [r.state for r in rows] == ["uploading"] and rows[0].slack_file_id
        shared = len(file_messages(run, root))
        assert shared == (1 if dies_at == "complete_upload" else 0)

        await run.stack.restart()
        resumed = Run(run.stack, run.driver, run.clock)
        await resumed.says(root, "[offline model] commander:")
        await resumed.quiesce()
        await assert_note_delivered_once(resumed, root, prompts)


async def test_a_file_url_outside_slacks_file_host_is_never_fetched_with_the_token(
    start: Callable[..., Any],
) -> None:
    seen: list[str] = []

    async def evil(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        return web.Response(text="tier,price\nPro,1 EUR\n")

    app = web.Application()
    app.router.add_get("/{tail:.*}", evil)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    evil_url = f"http://127.0.0.1:{runner.addresses[0][1]}/files-pri/T1-F1/prices.csv"
    try:
        async with start() as run:
            # a real message in the channel (no mention: Flotilla ignores it), then a signed
            # app_mention of it whose file points elsewhere – as a forged or odd event would
            plain = run.driver.post("maya", "launch", "our launch emails")
            file = {
                "id": "FEVIL00001",
                "name": "prices.csv",
                "mimetype": "text/csv",
                "size": 20,
                "url_private": evil_url,
            }
            body = mention(run, ts=plain.ts, event_ts=plain.ts, files=[file])
            url = run.stack.commander.request_url or ""
            status, _ = await post(url, body, headers_for(run, body))
            assert status == 200
            said = await run.says(plain, "its address is not on Slack's file host")
            assert "prices.csv" in said.text
            await run.quiesce()
            assert seen == []  # never fetched, so the token never left
            conversation = await run.service.find_conversation(plain.channel, plain.ts)
            assert conversation is not None
            async with run.service.db.read() as conn:
                files = await conversation_files(conn, conversation.id)
            assert [(f.name, f.state) for f in files] == [("prices.csv", "refused")]
    finally:
        await runner.cleanup()


def reads_later_files(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse | None:
    """The writer opens the file attached in the thread with `read_file`, then answers."""
    if agent_of(info) != "writer" or "notes.txt" not in first_prompt(messages):
        return None
    if answered(messages):
        return None  # the offline model answers (its final result)
    return call("read_file", {"name": "notes.txt"})


async def test_files_attached_in_the_thread_are_fetched_and_readable_refused_ones_told(
    start: Callable[..., Any],
) -> None:
    prompts = Prompts()
    async with start(model=prompts.model(script=reads_later_files)) as run:
        root = run.ask(REQUEST)  # the diamond: it waits for maya's form at step 3
        form = await run.says(root, "needs your input")
        files = [("notes.txt", b"mention the annual discount", None), ("run.exe", b"MZ", None)]
        run.driver.post("dev", "launch", "some material", thread_ts=root.ts, files=files)
        said = await run.says(root, "I cannot use this attachment", from_="Flotilla")
        assert "run.exe is application/x-ms" in said.text and "a type I do not take" in said.text
        await run.driver.click("maya", form, SUBMIT_ACTION, values={"field:tiers": "Pro"})
        await run.says(root, "[offline model] commander:", from_="Flotilla")
        await run.quiesce()
        writer = prompts.of("writer")
        assert (
            "Files attached later in the thread" in writer and "- notes.txt (text/plain" in writer
        )
        assert "run.exe" not in writer.split("Files attached later")[1]  # refused: not offered
        conversation = await run.service.find_conversation(root.channel, root.ts)
        assert conversation is not None
        async with run.service.db.read() as conn:
            files_now = await conversation_files(conn, conversation.id)
        received = [(f.name, f.state) for f in files_now if f.direction == "received"]
        assert received == [("notes.txt", "ready"), ("run.exe", "refused")]
        run_key = f"plan:{(await run.plan(root)).id}:step:4:attempt:1"
        from flotilla.storage.runs import load_run

        async with run.service.db.read() as conn:
            stored = await load_run(conn, run_key)
        assert stored is not None and "mention the annual discount" in str(stored.messages)


PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
    "0000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)


async def test_an_attached_image_is_sent_to_a_model_that_reads_images(
    start: Callable[..., Any],
) -> None:
    media: list[tuple[str, str | None]] = []

    async def sees_media(messages: list[ModelMessage], info: AgentInfo) -> None:
        first = messages[0]
        if len(messages) == 1 and isinstance(first, ModelRequest):
            for part in first.parts:
                if isinstance(part, UserPromptPart) and not isinstance(part.content, str):
                    media.extend(
                        (agent_of(info), c.identifier)
                        for c in part.content
                        if isinstance(c, BinaryContent) and c.media_type == "image/png"
                    )

    prompts = Prompts()
    async with start(model=prompts.model(sees_media)) as run:
        chart = ("chart.png", PNG, "image/png")
        root = run.driver.mention("maya", "launch", run.stack.commander, RESEARCH, files=[chart])
        await run.says(root, "[offline model] commander:")
        await run.quiesce()
        assert (await run.plan(root)).status == "completed"
        assert media == [
            ("researcher", "chart.png"),
            ("writer", "chart.png"),
            ("commander", "chart.png"),
        ]
        assert "chart.png (image/png, 66 bytes): sent with this message" in prompts.of("writer")


FORM_PLAN = [
    {
        "index": 1,
        "title": "Give the price list",
        "assignee": "user",
        "input": "Attach our current price list.",
        "form": {"fields": [{"name": "prices", "label": "The price list", "kind": "file"}]},
    },
    {
        "index": 2,
        "title": "Read it",
        "assignee": "researcher",
        "input": "Compare the tiers.\\nGiven: {{step_1.output_summary}}",
        "wait_for": [1],
    },
]


def reads_the_forms_file(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse | None:
    if agent_of(info) != "researcher" or answered(messages):
        return None
    return call("read_file", {"name": "prices.csv"})


async def test_a_file_attached_to_a_form_answer_reaches_the_next_step(
    start: Callable[..., Any],
) -> None:
    prompts = Prompts()
    script = combine(plans({"tiers": FORM_PLAN}), reads_the_forms_file)
    async with start(model=prompts.model(script=script)) as run:
        root = run.ask("compare the tiers of our price list")
        form = await run.says(root, "needs your input")
        await run.driver.click("maya", form, OPEN_ACTION)
        await run.modal("maya")
        modal = run.stack.workspace.state.top_modal(run.driver.person("maya").id)
        assert modal is not None
        assert modal.spec["blocks"][-1]["element"]["type"] == "file_input"
        files = [("prices.csv", PRICES, "text/csv"), ("tool.exe", b"MZ", None)]
        await run.driver.submit("maya", {"field:prices": files})
        said = await run.says(root, "I cannot use this attachment", from_="Flotilla")
        assert "tool.exe" in said.text
        await run.says(root, "Answered by")
        await run.quiesce()
        plan = await run.plan(root)
        assert plan.status == "completed", run.transcript(root)
        assert plan.steps[0].output_summary is not None
        assert "prices.csv, tool.exe" in plan.steps[0].output_summary  # the answer names them
        prompt = prompts.of("researcher")
        assert "- prices.csv (text/csv, 44 bytes)" in prompt.split("Files attached later")[1]
        run_key = f"plan:{plan.id}:step:2:attempt:1"
        from flotilla.storage.runs import load_run

        async with run.service.db.read() as conn:
            stored = await load_run(conn, run_key)
        assert stored is not None and "Pro,29 EUR" in str(stored.messages)  # read_file read it


async def test_a_form_answer_with_a_file_cut_short_is_replayed_and_keeps_its_file(
    start: Callable[..., Any],
) -> None:
    """A form answer carrying files finishes its click's inbox row only once the files are
    kept (an answer without files finishes it with the answer's store: its stored row does
    the rest): a process that dies before leaves the click to the replay, which keeps the
    file, and the next step reads it."""
    prompts = Prompts()
    script = combine(plans({"tiers": FORM_PLAN}), reads_the_forms_file)
    async with start(model=prompts.model(script=script)) as run:
        root = run.ask("compare the tiers of our price list")
        form = await run.says(root, "needs your input")
        await run.quiesce()
        await run.driver.click("maya", form, OPEN_ACTION)
        await run.modal("maya")

        async def dies(*_args: Any, **_kwargs: Any) -> Any:
            raise asyncio.CancelledError  # the process dies while it handles the answer

        run.service.reconciler.reconcile = dies
        await run.driver.submit("maya", {"field:prices": [("prices.csv", PRICES, "text/csv")]})
        await run.stack.restart()
        resumed = Run(run.stack, run.driver, run.clock)
        resumed.clock.advance(resumed.service.options.inbox_claim_seconds + 1)
        assert resumed.service.replay_inbox is not None
        assert await resumed.service.replay_inbox() == 1  # the answer's click, not finished
        await resumed.says(root, "Answered by")
        await resumed.quiesce()
        plan = await resumed.plan(root)
        assert plan.status == "completed", resumed.transcript(root)
        assert "- prices.csv (text/csv, 44 bytes)" in prompts.of("researcher")


def researcher_writes(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse | None:
    if agent_of(info) != "researcher" or answered(messages):
        return None
    args = {"name": "../findings.csv", "content_type": "text/csv", "text": "a,b\n1,2\n"}
    return call("write_file", args)


async def test_an_agent_with_its_own_app_uploads_under_that_app(
    start: Callable[..., Any],
) -> None:
    prompts = Prompts()
    async with start(model=prompts.model(script=researcher_writes)) as run:
        root = run.ask(RESEARCH)
        await run.says(root, "[offline model] commander:")
        await run.quiesce()
        uploads = file_messages(run, root)
        assert [names(run, m) for m in uploads] == [["findings.csv"]]  # no way out of its folder
        researcher = run.stack.agent_apps["researcher"]
        assert uploads[0].bot_id == researcher.bot_id  # the agent's own app, its own token
        plan = await run.plan(root)
        assert plan.steps[0].output_files == ("findings.csv",)
