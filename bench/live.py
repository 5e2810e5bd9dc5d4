"""Benchmark: a live thread's costs and pace on the local stack (figures, no assertions).

Runs Flotilla's real Bolt app over HTTP against the local Slack workspace with a SQLite file
and the offline model (zero latency, streamed in chunks), with the production settings that
matter here: streamed answers, the native plan display, pacing at 1 message per second per
channel with a burst of 2. Prints:

1. Web API calls per plan step on the walkthrough's diamond (5 steps, one a form), by
   method – once as the walkthrough shows it (the writer answers in the thread) and once
   with the offline writer attaching its draft as `note.md` (an upload: two calls more).
   A streamed message (start, appends, stop) counts as one call; the status calls
   (agents.sessions.setStatus, assistant.threads.setStatus) are left out; a views.open
   would be counted (the walkthrough's form is answered in its message: inputs and Submit;
   the answered form is rewritten through the click's response_url, not a Web API call).
2. Time from a mention to the first visible sign of work in the thread (a session status,
   a status line or a first message), median over several mentions.
3. chat.postMessage per channel: the most in any 10-second window during a 20-step chain,
   with the time stamps the local workspace saw.

Usage: .venv/bin/python bench/live.py [--runs N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pydantic_ai.messages import ModelMessage, ModelResponse  # noqa: E402
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402

from flotilla.agents.running import offline  # noqa: E402
from flotilla.agents.running.streamed_function import streamed  # noqa: E402
from flotilla.bot.local import LocalStack, start_local_stack  # noqa: E402
from flotilla.bot.service import Options  # noqa: E402
from flotilla.bot.views.forms import SUBMIT_ACTION  # noqa: E402
from flotilla.local_slack import Driver, Message  # noqa: E402
from flotilla.local_slack.api import METHODS  # noqa: E402
from tests.e2e.slice.call_budget import walkthrough_model  # noqa: E402
from tests.e2e.slice.scripts import plans  # noqa: E402

REQUEST = "compare our pricing with the top three competitors and draft a note for the sales team"
DIAMOND_STEPS = 5
CHAIN_STEPS = 20
STATUS_CALLS = {"agents.sessions.setStatus", "assistant.threads.setStatus"}
STREAM_REST = {"chat.appendStream", "chat.stopStream"}  # a stream is counted at its start
PRODUCTION = Options(native_plan_display=True, channel_posts_per_second=1.0, channel_post_burst=2)
CHAIN = [
    {
        "index": i,
        "title": f"Step {i}",
        "assignee": "analyst" if i % 2 else "writer",
        "input": f"Part {i} of the report."
        + (f" After: {{{{step_{i - 1}.output_summary}}}}" if i > 1 else ""),
        **({"wait_for": [i - 1]} if i > 1 else {}),
    }
    for i in range(1, CHAIN_STEPS + 1)
]


def chain_model() -> FunctionModel:
    script = plans({"CHAIN20": CHAIN})

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return script(messages, info) or offline.respond(messages, info)

    return FunctionModel(respond, stream_function=streamed(respond), model_name="bench")


async def stack_in(folder: Path, name: str, model: Any = None) -> tuple[LocalStack, Driver]:
    stack = await start_local_stack(
        f"sqlite+aiosqlite:///{folder / f'{name}.db'}", options=PRODUCTION, model=model
    )
    return stack, Driver(stack.workspace, default_timeout=180)


async def settle(stack: LocalStack, driver: Driver) -> None:
    while True:
        await driver.deliveries_settled()
        await stack.service.settle()
        if not stack.service.executor.jobs:
            return


async def diamond(folder: Path, model: Any = None, name: str = "diamond") -> Counter[str]:
    stack, driver = await stack_in(folder, name, model)
    try:
        stack.workspace.api_log.clear()
        root = driver.mention("maya", "launch", stack.commander, REQUEST)
        form = await driver.thread_has_message("launch", root.ts, containing="needs your input")
        await driver.click("maya", form, SUBMIT_ACTION, values={"field:tiers": "Pro"})
        await driver.thread_has_message("launch", root.ts, containing="[offline model] commander:")
        await settle(stack, driver)
        await driver.wait_for(  # the card's last edit (its Cancel button gone)
            lambda: all(
                "Cancel plan" not in str(m.blocks) for m in driver.thread("launch", root.ts)
            ),
            what="the final card",
        )
        return Counter(method for method, _ in stack.workspace.api_log)
    finally:
        await stack.stop()


def visible(stack: LocalStack, root: Message) -> bool:
    state = stack.workspace.state
    session = any(key[:2] == (root.channel, root.ts) for key in state.agent_sessions)
    status = (root.channel, root.ts) in state.thread_statuses
    return session or status or len(state.thread(root.channel, root.ts)) > 1


async def first_sign(folder: Path, runs: int) -> list[float]:
    stack, driver = await stack_in(folder, "first-sign")
    seconds = []
    try:
        for n in range(runs):
            began = time.perf_counter()
            root = driver.mention("maya", "launch", stack.commander, f"{REQUEST} ({n})")
            await stack.workspace.state.wait_for(partial(visible, stack, root), 60)
            seconds.append(time.perf_counter() - began)
            await settle(stack, driver)
    finally:
        await stack.stop()
    return seconds


async def chain(folder: Path) -> tuple[int, int, float]:
    """(posts, most in any 10 s, seconds) of a 20-step chain's thread."""
    stack, driver = await stack_in(folder, "chain", chain_model())
    times: list[float] = []
    handler = METHODS["chat.postMessage"]

    async def timed(call: Any) -> Any:
        times.append(time.monotonic())
        return await handler(call)

    METHODS["chat.postMessage"] = timed
    try:
        began = time.monotonic()
        root = driver.mention("maya", "launch", stack.commander, "CHAIN20 write the report")
        final = "What the team found"  # the commander's final answer ends the chain
        await driver.thread_has_message("launch", root.ts, containing=final, timeout=600)
        await settle(stack, driver)
        elapsed = time.monotonic() - began
    finally:
        METHODS["chat.postMessage"] = handler
        await stack.stop()
    worst = max((sum(t <= u < t + 10 for u in times) for t in times), default=0)
    return len(times), worst, elapsed


def per_step(calls: Counter[str]) -> tuple[int, Counter[str]]:
    counted = Counter({m: n for m, n in calls.items() if m not in STATUS_CALLS | STREAM_REST})
    return sum(counted.values()), counted


async def main(runs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for label, model, name in (
            ("as the walkthrough shows it", walkthrough_model(), "walkthrough"),
            ("the offline writer attaching note.md", None, "diamond"),
        ):
            calls = await diamond(folder, model, name)
            total, counted = per_step(calls)
            print(f"1. walkthrough diamond ({DIAMOND_STEPS} steps), {label}, Web API calls:")
            print(
                f"   {total} counted = {total / DIAMOND_STEPS:.1f} per step "
                f"(streams as one call, status calls left out)"
            )
            for method, count in sorted(calls.items(), key=lambda kv: (-kv[1], kv[0])):
                note = " (left out)" if method in STATUS_CALLS else ""
                note = " (part of a stream)" if method in STREAM_REST else note
                print(f"     {method:<28} {count:>3}{note}")
        signs = await first_sign(folder, runs)
        print(
            f"2. mention -> first visible sign: median {statistics.median(signs) * 1000:.0f} ms, "
            f"max {max(signs) * 1000:.0f} ms over {len(signs)} mentions"
        )
        posts, worst, elapsed = await chain(folder)
        print(
            f"3. {CHAIN_STEPS}-step chain: {posts} chat.postMessage in one channel over "
            f"{elapsed:.0f} s; most in any 10 s: {worst}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    asyncio.run(main(parser.parse_args().runs))
