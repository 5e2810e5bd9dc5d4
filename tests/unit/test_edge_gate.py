"""The gate's pure parts: the per-source log limit and the signature/shape checks."""

from __future__ import annotations

import hashlib
import hmac
import logging

import pytest

from flotilla.bot.edge import RateLimitedLog, Refused, RequestGate
from tests.fakes.clock import FakeClock


def test_one_line_per_source_per_minute_then_the_count_of_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="flotilla.bot.edge")
    clock = FakeClock()
    limited = RateLimitedLog(60.0, clock=clock.monotonic, keys=2)
    assert limited.warning("10.0.0.1", "refused a")
    assert not limited.warning("10.0.0.1", "refused b")
    assert not limited.warning("10.0.0.1", "refused c")
    assert limited.warning("10.0.0.2", "refused d")  # another source has its own minute
    clock.advance(60)
    assert limited.warning("10.0.0.1", "refused e")
    assert [r.getMessage() for r in caplog.records] == [
        "refused a",
        "refused d",
        "refused e (2 more refused since the last line)",
    ]
    limited.warning("10.0.0.3", "refused f")  # bounded: the oldest source is forgotten
    assert len(limited.last) == 2 and "10.0.0.2" not in limited.last


def signature(secret: str, timestamp: str, body: bytes) -> str:
    base = f"v0:{timestamp}:".encode() + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


@pytest.mark.parametrize(
    ("body", "timestamp", "status"),
    [
        (
            b'{"type": "event_callback", "team_id": "T1", "event": {"type": "app_mention"}}',
            "1000",
            None,
        ),
        (b'{"type": "event_callback", "event": {"type": "app_mention"}}', "1000", 400),  # no team
        (
            b'{"type": "view_submission", "view": {"type": "modal", "callback_id": ""}}',
            "1000",
            None,
        ),
        (b'{"type": "view_submission", "view": {"type": "modal"}}', "1000", 400),  # no callback_id
        (b'{"type": "event_callback"}', "1000", 400),  # no event
        (b'{"type": "block_actions", "actions": [{"value": "1"}]}', "1000", 400),
        (b"[]", "1000", 400),
        (b"payload=%5B%5D", "1000", 400),
        (b"command=%2Fflotilla&text=help", "1000", None),
        (b"text=help", "1000", 400),
        (b"\xff\xfe", "1000", 400),
        (b'{"type": "event_callback"}', "nan", 400),
        (b'{"type": "event_callback"}', "1", 401),  # stale
    ],
)
def test_signed_bodies_are_checked_for_the_shape_bolt_assumes(
    body: bytes, timestamp: str, status: int | None
) -> None:
    gate = RequestGate("secret", clock=lambda: 1000.0)
    ctype = (
        "application/json" if body.startswith((b"{", b"[")) else "application/x-www-form-urlencoded"
    )
    headers = {
        "X-Slack-Request-Timestamp": timestamp,
        "Content-Type": ctype,
        "X-Slack-Signature": signature("secret", timestamp, body),
    }
    if status is None:
        gate.check(body, headers)
        return
    with pytest.raises(Refused) as refused:
        gate.check(body, headers)
    assert refused.value.status == status


def test_a_wrong_or_missing_signature_is_401_whatever_the_body() -> None:
    gate = RequestGate("secret", clock=lambda: 1000.0)
    for headers in ({}, {"X-Slack-Request-Timestamp": "1000", "X-Slack-Signature": "v0=00"}):
        with pytest.raises(Refused) as refused:
            gate.check(b"[[[", headers)
        assert refused.value.status == 401
    RequestGate(None).check(b'{"type": "url_verification"}', {})  # no secret: not verified


def test_the_content_type_is_read_as_bolt_reads_it() -> None:
    gate = RequestGate("secret", clock=lambda: 1000.0)
    body = b' {"type": "url_verification", "challenge": "x"}'  # JSON by its content type only
    headers = {
        "X-Slack-Request-Timestamp": "1000",
        "X-Slack-Signature": signature("secret", "1000", body),
        "Content-Type": "application/json; charset=utf-8",
    }
    gate.check(body, headers)
