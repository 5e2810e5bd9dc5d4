"""Log formats: ids of domain lines in text and JSON, library chatter at WARNING."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from flotilla.bot.logs import LIBRARY_LOGGERS, setup_logging

IDS = {"team": "T1", "channel": "C1", "thread_ts": "171.2", "plan": 4, "step": 2, "attempt": 1}
PRINTED = {**{k: v for k, v in IDS.items() if k != "thread_ts"}, "thread": "171.2"}


@pytest.fixture(autouse=True)
def restore() -> Iterator[None]:
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    levels = {name: logging.getLogger(name).level for name in LIBRARY_LOGGERS}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, old in levels.items():
        logging.getLogger(name).setLevel(old)


def test_json_is_one_object_per_line_with_the_ids() -> None:
    out = io.StringIO()
    setup_logging("INFO", "json", stream=out)
    log = logging.getLogger("flotilla.executor")
    log.info("step dispatched", extra=IDS)
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("step failed", extra={"plan": 4})
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["message"] == "step dispatched" and first["level"] == "INFO"
    assert {k: first[k] for k in PRINTED} == PRINTED
    assert first["time"].endswith("Z") and first["logger"] == "flotilla.executor"
    assert second["plan"] == 4 and "ValueError: boom" in second["error"]
    assert "team" not in second  # absent ids are left out, not null


def test_text_appends_the_present_ids() -> None:
    out = io.StringIO()
    setup_logging("INFO", "text", stream=out)
    logging.getLogger("flotilla.executor").info("plan started", extra=IDS)
    line = out.getvalue().strip()
    assert line.endswith(
        "INFO flotilla.executor: plan started team=T1 channel=C1 thread=171.2 plan=4 step=2 "
        "attempt=1"
    )


def test_library_chatter_stays_below_warning_and_out_of_the_console() -> None:
    out = io.StringIO()
    setup_logging("INFO", "text", stream=out)
    logging.getLogger("httpx").info("HTTP Request: POST https://api.openai.com/v1/responses")
    logging.getLogger("openai._base_client").info("Retrying request in 0.4 seconds")
    logging.getLogger("slack_bolt.App").warning("a real library warning")
    assert "HTTP Request" not in out.getvalue() and "Retrying" not in out.getvalue()
    assert "a real library warning" in out.getvalue()

    console = io.StringIO()
    setup_logging("INFO", "text", console=True, stream=console)
    logging.getLogger("slack_bolt.App").warning("not in the console")
    logging.getLogger("flotilla.serve").info("not in the console either")
    logging.getLogger("flotilla.serve").warning("the trial's own warning")
    assert console.getvalue().count("\n") == 1 and "the trial's own warning" in console.getvalue()


def test_setting_up_twice_does_not_double_lines() -> None:
    out = io.StringIO()
    setup_logging("INFO", "text", stream=out)
    setup_logging("INFO", "text", stream=out)
    logging.getLogger("flotilla").info("once")
    assert out.getvalue().count("once") == 1


def test_a_library_that_sets_its_own_level_stays_quiet_too() -> None:
    out = io.StringIO()
    setup_logging("INFO", "text", stream=out)
    bolt = logging.getLogger("slack_bolt.AsyncApp")
    level = bolt.level
    bolt.setLevel(logging.INFO)  # as slack_bolt's get_bolt_logger does, from the root's level
    try:
        bolt.info("Bolt app is running")
        assert out.getvalue() == ""
    finally:
        bolt.setLevel(level)
