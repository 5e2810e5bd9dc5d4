"""The fault injection the chaos suite relies on: the fake model server's fault rate (HTTP
errors, a hang that drops the connection) and the local workspace's 429 fault rate."""

from __future__ import annotations

import asyncio
import random

import aiohttp

from flotilla.local_slack.ratelimit import RateLimiter
from tests.eventually import eventually
from tests.fakes.openai_server import CLIENT_GONE, HANG, FakeOpenAI

BODY = {"model": "gpt-test", "messages": [{"role": "user", "content": "hi"}]}


async def post(url: str) -> int | str:
    async with aiohttp.ClientSession() as session:
        try:
            headers = {"Authorization": "Bearer sk-test"}
            async with session.post(f"{url}/chat/completions", json=BODY, headers=headers) as r:
                await r.read()
                return r.status
        except aiohttp.ClientError as exc:
            return type(exc).__name__


async def test_the_model_server_fails_the_share_it_is_told_to_and_records_each_answer() -> None:
    model = FakeOpenAI(fault_rate=0.5, fault_kinds=(503, 429), rng=random.Random(3))
    await model.start()
    try:
        answers = [await post(model.base_url) for _ in range(40)]
    finally:
        await model.close()
    assert set(answers) == {200, 503, 429}
    assert 8 < answers.count(200) < 32
    assert [r.status for r in model.requests] == answers


async def test_a_hang_drops_the_connection_without_an_answer() -> None:
    model = FakeOpenAI(fault_rate=1.0, fault_kinds=(HANG,), hang_seconds=0.1)
    await model.start()
    try:
        answer = await post(model.base_url)
    finally:
        await model.close()
    assert answer == "ServerDisconnectedError"
    assert [r.status for r in model.requests] == [HANG]


def test_the_rate_limiter_answers_429_at_its_fault_rate_except_for_exempt_methods() -> None:
    limiter = RateLimiter(fault_rate=0.3, rng=random.Random(1), exempt=frozenset({"auth.test"}))
    answers = [limiter.retry_after("chat.postMessage", "A1", "C1") for _ in range(200)]
    assert 30 < answers.count(1) < 90 and set(answers) == {None, 1}
    assert len(limiter.limited) == answers.count(1)
    assert all(limiter.retry_after("auth.test", "A1", None) is None for _ in range(50))
    assert RateLimiter().retry_after("chat.postMessage", "A1", "C1") is None  # off by default


async def test_an_answer_nobody_waits_for_any_more_is_recorded_as_such() -> None:
    """A process killed mid-request did not get (nor pay for) the answer: the chaos suite
    counts a prompt as paid twice only after an answer that reached its client."""
    model = FakeOpenAI(latency=0.5)
    await model.start()
    try:
        async with aiohttp.ClientSession() as session:
            request = session.post(
                f"{model.base_url}/chat/completions",
                json=BODY,
                headers={"Authorization": "Bearer sk-test"},
            )
            try:
                async with asyncio.timeout(0.1):
                    await request
            except TimeoutError:
                pass  # the client hangs up before the answer is ready
        await eventually(
            lambda: bool(model.requests) and model.requests[0].status is not None,
            what="the abandoned request's answer (ready after the server's latency)",
        )
        assert await post(model.base_url) == 200
    finally:
        await model.close()
    assert [r.status for r in model.requests] == [CLIENT_GONE, 200]
