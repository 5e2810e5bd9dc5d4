"""Experiment 5: generated bad input POSTed to a running `flotilla run` (HTTP mode, SQLite):
first every request unsigned (or signed with a wrong secret), then signed with the real
signing secret. Counted: the HTTP statuses (500 must be 0), tracebacks logged in each phase
(none for unsigned input), and what the input left behind: rows stored, Slack calls made."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time
from collections import Counter
from pathlib import Path

import aiohttp
from hypothesis import HealthCheck, Phase, given, seed, settings
from sqlalchemy import text

from bench.chaos.measure import (
    Figures,
    format_counts,
    secrets_in_logs,
    traceback_messages,
    tracebacks,
)
from bench.chaos.payloads import BadRequest, Ids, bad_requests
from bench.chaos.stack import CHANNEL, Stack

STORED_TABLES = ("conversations", "plans", "thread_messages", "outbox", "processed_events")
SLACK_WRITES = frozenset(
    {
        "chat.postMessage",
        "chat.postEphemeral",
        "chat.update",
        "chat.delete",
        "views.open",
        "views.publish",
        "views.update",
        "views.push",
    }
)


def generate(ids: Ids, count: int, random_seed: int) -> list[BadRequest]:
    """`count` bad requests drawn by hypothesis (reproducible for one seed)."""
    found: list[BadRequest] = []

    @settings(
        max_examples=count,
        database=None,
        deadline=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @seed(random_seed)
    @given(bad_requests(ids))
    def collect(request: BadRequest) -> None:
        found.append(request)

    collect()
    return found[:count]


def sign(secret: str, timestamp: str, body: bytes) -> str:
    base = b"v0:" + timestamp.encode() + b":" + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


async def send_all(
    url: str, requests: list[BadRequest], secret: str | None, statuses: Counter[str]
) -> None:
    """POST each request (signed with `secret`, or unsigned / wrongly signed when None)."""
    semaphore = asyncio.Semaphore(8)
    async with aiohttp.ClientSession() as session:

        async def one(number: int, request: BadRequest) -> None:
            timestamp = (
                request.timestamp if request.timestamp is not None else str(int(time.time()))
            )
            headers = {"Content-Type": request.content_type, "X-Slack-Request-Timestamp": timestamp}
            if secret is not None:
                headers["X-Slack-Signature"] = sign(secret, timestamp, request.body)
            elif number % 2:  # half of the unsigned ones carry a signature with a wrong secret
                headers["X-Slack-Signature"] = sign("not-the-secret", timestamp, request.body)
            async with semaphore:
                try:
                    async with (
                        asyncio.timeout(30),
                        session.post(url, data=request.body, headers=headers) as answer,
                    ):
                        await answer.read()
                        statuses[str(answer.status)] += 1
                except (aiohttp.ClientError, TimeoutError) as exc:
                    statuses[type(exc).__name__] += 1

        await asyncio.gather(*(one(n, r) for n, r in enumerate(requests)))


async def stored_rows(stack: Stack) -> Counter[str]:
    """Rows in the tables a Slack request can fill, by table."""
    found: Counter[str] = Counter()
    async with stack.db.read() as conn:
        for table in STORED_TABLES:
            found[table] = (await conn.execute(text(f"SELECT count(*) FROM {table}"))).scalar_one()
    return found


def slack_writes(stack: Stack) -> Counter[str]:
    """Web API calls that post or show something, by method."""
    return Counter(method for method, _ in stack.workspace.api_log if method in SLACK_WRITES)


def grown(after: Counter[str], before: Counter[str]) -> str:
    """'N (where: n, …)' – how many more than before, and where."""
    more = after - before
    return f"{sum(more.values())} ({format_counts(more)})" if more else "0"


async def bad_inputs(folder: Path, seed: int, count: int) -> Figures:
    stack = Stack(folder, f"sqlite+aiosqlite:///{folder / 'flotilla.db'}")
    await stack.start()
    try:
        process = await stack.spawn()
        state = stack.workspace.state
        maya = state.person_named("maya")
        ids = Ids(
            team=state.team_id,
            app=stack.app.app_id,
            bot_user=stack.app.bot_user_id,
            user=maya.id,
            channel=state.channel_named(CHANNEL).id,
            verification_token=stack.app.verification_token,
        )
        requests = generate(ids, count, seed)
        kinds = Counter(r.kind for r in requests)
        url = f"{process.url}/slack/events"
        rows, writes = await stored_rows(stack), slack_writes(stack)
        unsigned: Counter[str] = Counter()
        await send_all(url, requests, None, unsigned)
        await asyncio.sleep(1.0)  # anything started in the background has logged by now
        unsigned_tracebacks = tracebacks(process.raw)
        signed: Counter[str] = Counter()
        await send_all(url, requests, stack.app.signing_secret, signed)
        await asyncio.sleep(3.0)  # work acked and done after the answer: give it time to show
        figures = Figures(
            f"Experiment 5: {len(requests)} generated bad inputs, unsigned and signed"
        )
        figures.notes += [
            f"hypothesis, seed {seed}; one `flotilla run` on SQLite; every request sent twice: "
            "unsigned (half with a wrong secret's signature), then signed with the real secret",
            "kinds: " + format_counts(kinds),
        ]
        figures.add("requests sent", sum(unsigned.values()) + sum(signed.values()))
        figures.add("HTTP statuses, unsigned", format_counts(unsigned))
        figures.add("HTTP statuses, signed", format_counts(signed))
        figures.add("HTTP 500 answers", unsigned["500"] + signed["500"])
        figures.add("tracebacks logged for unsigned input", unsigned_tracebacks)
        figures.add(
            "tracebacks logged for signed input", tracebacks(process.raw) - unsigned_tracebacks
        )
        if tracebacks(process.raw):
            figures.add("what the tracebacks were", traceback_messages(process.raw))
        figures.add("log lines written", len(process.raw))
        figures.add("rows stored from the input", grown(await stored_rows(stack), rows))
        figures.add("Slack writes caused (posts, views)", grown(slack_writes(stack), writes))
        figures.add("process still serving", "yes" if stack.alive() else "NO")
        figures.add("secrets found in logs", secrets_in_logs(stack))
        return figures
    finally:
        await stack.stop()
