"""Files in and out of a step's run, the effectful part.

In: before a step runs, the conversation's attachments are fetched (on demand, once;
again after their bytes expired) through the Slack port, which only fetches from Slack's
file host and counts the bytes against the cap. One that cannot be taken is marked refused
and the thread is told in a sentence – once, by whichever process refused it first.

Out: the files a run wrote (`write_file`, recorded with the run) are uploaded into the
thread under the agent's identity, each exactly once: Slack's file id is stored before a
byte is sent, so a process that dies half-way looks the file up again (`files.info`) and
finishes or redoes only what is missing.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import TYPE_CHECKING

from flotilla.agents.core.errors import TransientError
from flotilla.agents.reconciling.ports import FileRefused
from flotilla.agents.tools.file_policy import refusal_note
from flotilla.storage.files import (
    begin_upload,
    keep_received_bytes,
    mark_shared,
    produced_files,
    read_bytes,
    received_files,
    refuse_file,
)
from flotilla.storage.records import ConversationRecord, FileRecord

if TYPE_CHECKING:
    from flotilla.agents.running.run_context import Context

log = logging.getLogger(__name__)


async def fetch_attachments(
    ctx: Context, conversation: ConversationRecord, received: list[FileRecord] | None = None
) -> bool:
    """Fetch the conversation's attachments (the request's and later replies') whose bytes
    are not kept (yet, or any more); `received`: its received files as just read (else
    read here). True when any was tried (its files, and maybe the thread, changed)."""
    if received is None:
        async with ctx.db.read() as conn:
            received = await received_files(conn, conversation.id)
    refused: list[str] = []
    tried = False
    for file in received:
        if file.state == "refused" or (file.state == "ready" and file.has_bytes):
            continue
        tried = True
        reason = await _fetch(ctx, file)
        if reason is not None:
            async with ctx.db.write() as conn:
                if await refuse_file(conn, file.id, reason):
                    refused.append(f"{file.name}: {reason}")
    if refused:
        await ctx.port.say(conversation, refusal_note(refused))
    return tried


async def _fetch(ctx: Context, file: FileRecord) -> str | None:
    """Fetch and keep one attachment; the reason it was refused, or None."""
    policy = ctx.options.files
    if not file.url_private:
        return "Slack gave me no address to fetch it from"
    try:
        data = await ctx.port.download_file(file.url_private, max_bytes=policy.max_bytes)
    except FileRefused as exc:
        log.warning("attachment %s refused: %s", file.slack_file_id, exc.detail)
        return exc.public
    except TransientError as exc:  # not refused: the next step's run tries again
        log.warning("attachment %s not fetched yet: %s", file.slack_file_id, exc.detail)
        return None
    async with ctx.db.write() as conn:
        await keep_received_bytes(conn, file, data, policy.store, ctx.clock())
    return None


async def share_produced(
    ctx: Context,
    conversation: ConversationRecord,
    run_key: str,
    agent: str | None,
    files: list[FileRecord] | None = None,
) -> list[FileRecord]:
    """Upload the files a run wrote into the thread (each once); all of them, shared.
    `files`: the run's files as just read (else read here)."""
    if files is None:
        async with ctx.db.read() as conn:
            files = await produced_files(conn, run_key=run_key)
    shared: list[FileRecord] = []
    for file in files:
        done = file.state == "shared"
        shared.append(file if done else await _share(ctx, conversation, file, agent))
    return shared


async def _share(
    ctx: Context, conversation: ConversationRecord, file: FileRecord, agent: str | None
) -> FileRecord:
    """Upload one produced file into the thread, in two transactions: its bytes are read
    with the write that stores Slack's file id (before a byte is sent), then it is marked
    shared. A process that dies between any two steps is finished by the next: with the
    file id stored, `files.info` tells whether it is in the thread already."""
    port = ctx.port
    file_id = file.slack_file_id
    if file_id is not None:  # begun before: is it in the thread already?
        permalink = await port.shared_permalink(conversation, file_id, agent=agent)
        if permalink is not None:
            return await _shared(ctx, file, file_id, permalink)
    if not file.has_bytes:
        raise _gone(file)
    data: bytes | None = None
    sent = False
    if file_id is not None and file.upload_url:  # its upload may still take the bytes
        data = await _bytes(ctx, file)
        sent = await port.send_upload(file.upload_url, data)
    if not sent:
        if data is None and file.size is None:  # the size Slack is told first is not known
            data = await _bytes(ctx, file)
        size = len(data) if data is not None else file.size
        assert size is not None
        file_id, url = await port.start_upload(name=file.name, size=size, agent=agent)
        async with ctx.db.write() as conn:
            if data is None:  # the bytes recorded with the file (storage/files.py: its size)
                data = await read_bytes(conn, file)
                if data is None:
                    raise _gone(file)  # expired meanwhile: nothing of the upload is stored
            await begin_upload(conn, file.id, file_id, url)
        if not await port.send_upload(url, data):
            raise TransientError(f"the upload of {file.name} was not taken")
    assert file_id is not None
    permalink = await port.complete_upload(conversation, file_id, title=file.name, agent=agent)
    return await _shared(ctx, file, file_id, permalink)


async def _bytes(ctx: Context, file: FileRecord) -> bytes:
    async with ctx.db.read() as conn:
        data = await read_bytes(conn, file)
    if data is None:
        raise _gone(file)
    return data


def _gone(file: FileRecord) -> FileRefused:
    return FileRefused(f"the bytes of {file.name} are no longer kept")


async def _shared(
    ctx: Context, file: FileRecord, file_id: str, permalink: str | None
) -> FileRecord:
    """Mark the file shared; the record as it is now stored (what `mark_shared` and
    `begin_upload` wrote, no read back)."""
    async with ctx.db.write() as conn:
        await mark_shared(conn, file.id, permalink)
    return replace(
        file, state="shared", slack_file_id=file_id, permalink=permalink, upload_url=None
    )
