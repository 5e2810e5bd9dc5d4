"""The files table on SQLite and PostgreSQL: each file recorded once by its key, bytes kept in
the database or on disk, refused once, and deleted (record kept) after their retention."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from flotilla.storage.conversations import open_conversation
from flotilla.storage.db import Database
from flotilla.storage.files import (
    ByteStore,
    ReceivedFile,
    begin_upload,
    conversation_files,
    forget_expired_bytes,
    keep_received_bytes,
    mark_shared,
    produced_files,
    read_bytes,
    received_files,
    record_produced,
    record_received,
    refuse_file,
)

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


async def conversation_id(db: Database) -> int:
    async with db.write() as conn:
        found = await open_conversation(
            conn,
            team_id="T1",
            channel_id="C1",
            thread_ts="1.000001",
            requested_by="U1",
            request_text="hi",
            now=NOW,
        )
    return found.id


def attachment(file_id: str, refusal: str | None = None) -> ReceivedFile:
    return ReceivedFile(
        slack_file_id=file_id,
        name=f"{file_id}.csv",
        mimetype="text/csv",
        size=4,
        url_private=f"https://files.slack.com/files-pri/T1-{file_id}/x.csv",
        permalink=None,
        refusal=refusal,
    )


async def test_received_files_are_recorded_once_and_refused_once(db: Database) -> None:
    conv = await conversation_id(db)
    async with db.write() as conn:
        new = await record_received(
            conn, conv, "1.000001", [attachment("F1"), attachment("F2")], NOW
        )
        again = await record_received(conn, conv, "1.000001", [attachment("F1")], NOW)
        refused = await record_received(conn, conv, "2.000001", [attachment("F3", "a .exe")], NOW)
    assert [f.name for f in new] == ["F1.csv", "F2.csv"] and again == []
    assert [(f.state, f.refusal) for f in refused] == [("refused", "a .exe")]
    async with db.write() as conn:
        request = await received_files(conn, conv, message_ts="1.000001")
        assert await refuse_file(conn, request[1].id, "too big")
        assert not await refuse_file(conn, request[1].id, "too big")  # said once
        kept = await keep_received_bytes(conn, request[0], b"a,b\n", ByteStore(), NOW)
        assert (kept.state, kept.size, kept.has_bytes) == ("ready", 4, True)
        assert await read_bytes(conn, kept) == b"a,b\n"


async def test_a_produced_file_is_recorded_once_per_key_and_its_upload_remembered(
    db: Database, tmp_path: Path
) -> None:
    conv = await conversation_id(db)
    for store in (ByteStore(), ByteStore(where="disk", directory=tmp_path / "bytes")):
        key = f"produced:{store.where}"
        async with db.write() as conn:
            first = await record_produced(
                conn,
                key=key,
                conversation_id=conv,
                run_key=f"run:{store.where}",
                plan_id=1,
                step_index=2,
                name="note.md",
                mimetype="text/markdown",
                data=b"# hi\n",
                store=store,
                now=NOW,
            )
            second = await record_produced(
                conn,
                key=key,
                conversation_id=conv,
                run_key=f"run:{store.where}",
                plan_id=1,
                step_index=2,
                name="other.md",
                mimetype="text/markdown",
                data=b"other",
                store=store,
                now=NOW,
            )
            assert second.id == first.id and second.name == "note.md"
            assert await read_bytes(conn, first) == b"# hi\n"
            await begin_upload(conn, first.id, "F9", "http://upload/x")
            await mark_shared(conn, first.id, "https://example.slack.com/files/F9")
        async with db.read() as conn:
            (shared,) = await produced_files(conn, run_key=f"run:{store.where}")
        assert (shared.state, shared.slack_file_id, shared.upload_url) == ("shared", "F9", None)
    assert len(list((tmp_path / "bytes").iterdir())) == 1  # the disk store wrote its bytes


async def test_expired_bytes_go_and_records_stay(db: Database, tmp_path: Path) -> None:
    conv = await conversation_id(db)
    disk = ByteStore(where="disk", directory=tmp_path / "bytes", retention=timedelta(days=1))
    async with db.write() as conn:
        for index, store in enumerate((ByteStore(retention=timedelta(days=1)), disk)):
            await record_produced(
                conn,
                key=f"k{index}",
                conversation_id=conv,
                run_key="r",
                plan_id=None,
                step_index=None,
                name=f"f{index}.txt",
                mimetype="text/plain",
                data=b"x",
                store=store,
                now=NOW,
            )
        assert await forget_expired_bytes(conn, NOW + timedelta(hours=23)) == 0
        assert await forget_expired_bytes(conn, NOW + timedelta(days=1)) == 2
        files = await conversation_files(conn, conv)
        assert [(f.name, f.has_bytes, f.sha256 is not None) for f in files] == [
            ("f0.txt", False, True),
            ("f1.txt", False, True),
        ]
        assert [await read_bytes(conn, f) for f in files] == [None, None]
    assert list((tmp_path / "bytes").iterdir()) == []  # the file on disk is gone too
