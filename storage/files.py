"""Files of a conversation: the ones people attach (received) and the ones agents write
(produced), with their bytes kept in the database or on disk until they expire.

A file is recorded once by its `key`: a received file by its conversation and Slack file
id, a produced one by the tool call that wrote it. Every function takes an open connection;
the caller owns the transaction (bytes on disk are written before the row that names them).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import Table, select, update
from sqlalchemy.engine import RowMapping
from sqlalchemy.ext.asyncio import AsyncConnection

from flotilla.storage.records import FileRecord
from flotilla.storage.service_tables import StoredFile
from flotilla.storage.sql import insert_ignoring_conflict

files_t: Table = StoredFile.__table__  # type: ignore[assignment]
_META = [c for c in files_t.c if c.name != "content"]


@dataclass(frozen=True, slots=True)
class ByteStore:
    """Where file bytes are kept (`database` or `disk` under `directory`) and how long."""

    where: Literal["database", "disk"] = "database"
    directory: Path | None = None
    retention: timedelta = timedelta(days=7)

    def expiry(self, now: datetime) -> datetime:
        return now + self.retention


@dataclass(frozen=True, slots=True)
class ReceivedFile:
    """A file attached to a message, as Slack described it."""

    slack_file_id: str
    name: str
    mimetype: str
    size: int | None
    url_private: str | None
    permalink: str | None
    refusal: str | None = None  # set when the file is refused at once (type, declared size)


def received_key(conversation_id: int, slack_file_id: str) -> str:
    return f"received:{conversation_id}:{slack_file_id}"


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


_KEPT = (files_t.c.content.is_not(None) | files_t.c.path.is_not(None)).label("kept")


def _record(row: RowMapping) -> FileRecord:
    return FileRecord(
        id=row["id"],
        key=row["key"],
        conversation_id=row["conversation_id"],
        direction=row["direction"],
        name=row["name"],
        mimetype=row["mimetype"],
        size=row["size"],
        sha256=row["sha256"],
        slack_file_id=row["slack_file_id"],
        url_private=row["url_private"],
        permalink=row["permalink"],
        message_ts=row["message_ts"],
        plan_id=row["plan_id"],
        step_index=row["step_index"],
        run_key=row["run_key"],
        state=row["state"],
        refusal=row["refusal"],
        upload_url=row["upload_url"],
        has_bytes=row["sha256"] is not None and row["kept"],
        created_at=row["created_at"],
        expires_at=row["expires_at"],
    )


def _select() -> Any:
    return select(*_META, _KEPT)


async def _one(conn: AsyncConnection, where: Any) -> FileRecord | None:
    row = (await conn.execute(_select().where(where))).mappings().first()
    return _record(row) if row else None


async def _many(conn: AsyncConnection, *where: Any) -> list[FileRecord]:
    rows = (await conn.execute(_select().where(*where).order_by(files_t.c.id))).mappings()
    return [_record(r) for r in rows]


async def record_received(
    conn: AsyncConnection,
    conversation_id: int,
    message_ts: str,
    files: Sequence[ReceivedFile],
    now: datetime,
) -> list[FileRecord]:
    """Record the files of a message (once each); the newly recorded ones come back."""
    new: list[FileRecord] = []
    for file in files:
        key = received_key(conversation_id, file.slack_file_id)
        result = await conn.execute(
            insert_ignoring_conflict(
                conn,
                files_t,
                key=key,
                conversation_id=conversation_id,
                direction="received",
                name=file.name,
                mimetype=file.mimetype,
                size=file.size,
                slack_file_id=file.slack_file_id,
                url_private=file.url_private,
                permalink=file.permalink,
                message_ts=message_ts,
                state="refused" if file.refusal else "pending",
                refusal=file.refusal,
                created_at=now,
            )
        )
        if result.rowcount:
            found = await _one(conn, files_t.c.key == key)
            assert found is not None
            new.append(found)
    return new


async def received_files(
    conn: AsyncConnection, conversation_id: int, *, message_ts: str | None = None
) -> list[FileRecord]:
    """The files people attached in a conversation (of one message, if `message_ts`)."""
    where = [files_t.c.conversation_id == conversation_id, files_t.c.direction == "received"]
    if message_ts is not None:
        where.append(files_t.c.message_ts == message_ts)
    return await _many(conn, *where)


async def conversation_files(conn: AsyncConnection, conversation_id: int) -> list[FileRecord]:
    """Every file of a conversation, received and produced, oldest first."""
    return await _many(conn, files_t.c.conversation_id == conversation_id)


async def produced_files(
    conn: AsyncConnection, *, run_key: str | None = None, plan_id: int | None = None
) -> list[FileRecord]:
    """Files agents wrote: of one run, or of a whole plan."""
    where = [files_t.c.direction == "produced"]
    if run_key is not None:
        where.append(files_t.c.run_key == run_key)
    if plan_id is not None:
        where.append(files_t.c.plan_id == plan_id)
    return await _many(conn, *where)


async def get_file(conn: AsyncConnection, file_id: int) -> FileRecord | None:
    return await _one(conn, files_t.c.id == file_id)


def _disk_path(store: ByteStore, key: str, sha: str) -> Path:
    if store.directory is None:
        raise ValueError("file bytes on disk need a directory")
    name = hashlib.sha256(key.encode()).hexdigest()[:24]
    return store.directory / f"{name}-{sha[:16]}"


def _where_bytes_go(store: ByteStore, key: str, data: bytes, sha: str) -> dict[str, Any]:
    """The columns that keep `data`: the bytes themselves, or the path they were written to."""
    if store.where == "database":
        return {"content": data, "path": None}
    path = _disk_path(store, key, sha)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return {"content": None, "path": str(path)}


async def record_produced(
    conn: AsyncConnection,
    *,
    key: str,
    conversation_id: int,
    run_key: str,
    plan_id: int | None,
    step_index: int | None,
    name: str,
    mimetype: str,
    data: bytes,
    store: ByteStore,
    now: datetime,
) -> FileRecord:
    """Record a file an agent wrote, with its bytes; the same `key` again changes nothing
    and returns the first record. One statement (the insert returns the new row) unless
    the key was recorded before."""
    if store.where != "database":  # bytes go to disk only for a file not recorded yet
        found = await _one(conn, files_t.c.key == key)
        if found is not None:
            return found
    sha = sha256_of(data)
    inserted = await conn.execute(
        insert_ignoring_conflict(
            conn,
            files_t,
            key=key,
            conversation_id=conversation_id,
            direction="produced",
            name=name,
            mimetype=mimetype,
            size=len(data),
            sha256=sha,
            run_key=run_key,
            plan_id=plan_id,
            step_index=step_index,
            state="stored",
            created_at=now,
            expires_at=store.expiry(now),
            **_where_bytes_go(store, key, data, sha),
        ).returning(*_META, _KEPT)
    )
    row = inserted.mappings().first()
    if row is not None:
        return _record(row)
    stored = await _one(conn, files_t.c.key == key)  # recorded before: the first record
    assert stored is not None
    return stored


async def keep_received_bytes(
    conn: AsyncConnection, file: FileRecord, data: bytes, store: ByteStore, now: datetime
) -> FileRecord:
    """A received file's downloaded bytes kept (its state becomes `ready`)."""
    sha = sha256_of(data)
    await conn.execute(
        update(files_t)
        .where(files_t.c.id == file.id)
        .values(
            state="ready",
            sha256=sha,
            size=len(data),
            expires_at=store.expiry(now),
            **_where_bytes_go(store, file.key, data, sha),
        )
    )
    kept = await get_file(conn, file.id)
    assert kept is not None
    return kept


async def refuse_file(conn: AsyncConnection, file_id: int, reason: str) -> bool:
    """Mark a received file refused (too big, a refused type, unreachable); True when this
    call refused it (it was not refused already)."""
    result = await conn.execute(
        update(files_t)
        .where(files_t.c.id == file_id, files_t.c.state != "refused")
        .values(state="refused", refusal=reason)
    )
    return bool(result.rowcount)


async def read_bytes(conn: AsyncConnection, file: FileRecord) -> bytes | None:
    """A file's kept bytes, or None once they expired (or were never kept)."""
    row = (
        await conn.execute(select(files_t.c.content, files_t.c.path).where(files_t.c.id == file.id))
    ).first()
    if row is None:
        return None
    if row.content is not None:
        return bytes(row.content)
    if row.path is not None:
        path = Path(row.path)
        return path.read_bytes() if path.exists() else None
    return None


async def begin_upload(
    conn: AsyncConnection, file_id: int, slack_file_id: str, upload_url: str
) -> None:
    """A produced file's upload began: Slack's file id is known before any byte is sent."""
    await conn.execute(
        update(files_t)
        .where(files_t.c.id == file_id)
        .values(state="uploading", slack_file_id=slack_file_id, upload_url=upload_url)
    )


async def mark_shared(conn: AsyncConnection, file_id: int, permalink: str | None) -> None:
    """A produced file is in its thread."""
    await conn.execute(
        update(files_t)
        .where(files_t.c.id == file_id)
        .values(state="shared", permalink=permalink, upload_url=None)
    )


async def forget_expired_bytes(conn: AsyncConnection, now: datetime) -> int:
    """Delete the bytes of files past their retention (the records stay); how many."""
    rows = (
        await conn.execute(
            select(files_t.c.id, files_t.c.path).where(
                files_t.c.expires_at <= now,
                (files_t.c.content.is_not(None) | files_t.c.path.is_not(None)),
            )
        )
    ).all()
    for row in rows:
        if row.path:
            Path(row.path).unlink(missing_ok=True)
    if rows:
        await conn.execute(
            update(files_t)
            .where(files_t.c.id.in_([r.id for r in rows]))
            .values(content=None, path=None)
        )
    return len(rows)
