"""A streamed answer's final text, stored with its step's outcome.

A streamed answer is kept in the thread's stored messages from its start, marked
`streaming` with the text it started with (`bot/answer_stream.py`). When the stream is
finished in Slack, its final text and metadata are still to be stored: `AnswerStream.finish`
hands them back as a `FinalText` instead of storing them in a write of its own, and the
step's report carries them into its reconcile as data (`reconcile_units.AttemptWrites`). On
SQLite the write is made in the reconcile's transaction, beside the job's release: the
outcome and the answer's final text commit together. PostgreSQL's reconcile is an
optimistic read and one version-checked write, so there the text is stored on its own,
just before it (`storage/locks.py` `run_unit`).

Why a later step never sees a text that is not final: the steps that depend on this one,
and the plan's final answer, are dispatched by the reconcile that stores the text; a step
dispatched meanwhile by another reconcile sees the message still marked `streaming`, and
the thread window leaves such a message out (`agents/running/thread_window.py`).

A process stopped after Slack finished the stream but before the reconcile committed
leaves the message marked `streaming` with its first text. The redelivered job finds the
answer in Slack (`thread_has_key`) and posts nothing; its stream, found left open
(`AnswerStream.finished_before`), gives the final text to store with the outcome then.
Storing it is idempotent: the same text and metadata on the same message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flotilla.storage.conversations import update_message
from flotilla.storage.db import Database


@dataclass(frozen=True, slots=True)
class FinalText:
    """What a finished answer's stored message is to say: its text and its metadata (no
    longer marked `streaming`)."""

    channel_id: str
    ts: str
    text: str
    metadata: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class FinishedAnswer:
    """A finished answer in the thread: its message, and its final text still to be stored
    (None: stored already, e.g. an answer posted whole)."""

    ts: str
    final: FinalText | None = None


async def store_final_text(db: Database, final: FinalText | None) -> None:
    """The final text in a write transaction of its own (where no reconcile carries it)."""
    if final is None:
        return
    async with db.write() as conn:
        await update_message(
            conn, final.channel_id, final.ts, text=final.text, metadata=final.metadata
        )
