"""Logging for operators: one line (text) or one JSON object (json) per record.

Domain lines carry their ids as `extra` fields (`log.info("step dispatched", extra={"team":
…, "channel": …, "thread_ts": …, "plan": …, "step": …, "attempt": …})`); both formats show
every id that is present, the Slack thread as `thread`. (`extra={"thread": …}` is refused
by the logging module itself: a LogRecord's `thread` is the OS thread id.) Library loggers
(HTTP clients, SDKs, asyncio) speak at WARNING and above only, and never inside the
`flotilla dev` console.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, Literal, TextIO

# ids a domain log line may carry (`extra` key, printed name), in the order they are printed
CONTEXT_KEYS = (
    ("team", "team"),
    ("channel", "channel"),
    ("thread_ts", "thread"),
    ("plan", "plan"),
    ("step", "step"),
    ("attempt", "attempt"),
    ("agent", "agent"),
    ("model", "model"),
    ("key", "key"),
)
LIBRARY_LOGGERS = (
    "httpx",
    "httpcore",
    "openai",
    "anthropic",
    "slack_bolt",
    "slack_sdk",
    "mcp",
    "aiosqlite",
    "asyncio",
    "alembic",
    "aiohttp",
    "sqlalchemy",
    "pydantic_ai",
)
_HANDLER_NAME = "flotilla"


def _context(record: logging.LogRecord) -> dict[str, Any]:
    return {
        name: getattr(record, key)
        for key, name in CONTEXT_KEYS
        if getattr(record, key, None) not in (None, "")
    }


class TextFormatter(logging.Formatter):
    """`2026-12-01T02:40:00Z INFO flotilla.executor: step dispatched team=T1 plan=4 step=2`."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        return _timestamp(record)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        ids = " ".join(f"{key}={value}" for key, value in _context(record).items())
        if not ids:
            return line
        first, newline, rest = line.partition("\n")  # ids stay on the line, before a traceback
        return f"{first} {ids}{newline}{rest}"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the ids, and `error`."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": _timestamp(record),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(_context(record))
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


class LibraryFilter(logging.Filter):
    """Drops library records below `level`: some libraries (Bolt) set their loggers' levels
    themselves, so the logger levels alone do not keep their chatter out."""

    def __init__(self, level: int) -> None:
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= self.level:
            return True
        return record.name.split(".", 1)[0] not in LIBRARY_LOGGERS


def _timestamp(record: logging.LogRecord) -> str:
    moment = datetime.fromtimestamp(record.created, UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def setup_logging(
    level: str,
    fmt: Literal["text", "json"],
    console: bool = False,
    *,
    stream: TextIO | None = None,
) -> None:
    """Configure the root logger once (calling it again replaces Flotilla's handler).

    `console=True` is for `flotilla dev`: the terminal is the conversation, so only
    Flotilla's own warnings and errors are printed there, and libraries stay silent.
    """
    root = logging.getLogger()
    for handler in list(root.handlers):
        if handler.get_name() == _HANDLER_NAME:
            root.removeHandler(handler)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root.addHandler(handler)
    numeric = logging.getLevelName(level.upper())
    numeric = numeric if isinstance(numeric, int) else logging.INFO
    root.setLevel(max(numeric, logging.WARNING) if console else numeric)
    # libraries talk at WARNING and above, unless an operator asked for DEBUG
    library = (
        logging.ERROR
        if console
        else numeric
        if numeric <= logging.DEBUG
        else max(numeric, logging.WARNING)
    )
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(library)
    handler.addFilter(LibraryFilter(library))
    logging.captureWarnings(True)  # Python warnings go through the same handler and format
