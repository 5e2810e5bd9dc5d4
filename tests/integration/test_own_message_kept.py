"""A message Flotilla posted is kept with what only Flotilla knows about it, even when its
own event stored it first (a streamed answer's event carries no metadata: without its
streaming mark, a stopped process's successor would not find it and would answer twice)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from flotilla.bot.answer_stream import STREAMING_MARK, answer_metadata
from flotilla.bot.identities import Poster, make_client
from flotilla.bot.secrets import TokenCipher
from flotilla.bot.slack_port import SlackPort
from flotilla.storage.conversations import open_conversation, store_message, thread_messages
from flotilla.storage.db import Database
from flotilla.storage.records import MessageRecord

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Tag:  # an `agents.reconciling.ports.StepTag`
    plan_id: int
    step: int
    attempt: int


async def test_the_ports_own_metadata_replaces_its_event_stored_first(db: Database) -> None:
    async with db.write() as conn:
        conversation = await open_conversation(
            conn,
            team_id="T1",
            channel_id="C1",
            thread_ts="1.0",
            requested_by="U1",
            request_text="research",
            now=NOW,
        )
        event = MessageRecord(
            channel_id="C1",
            ts="2.0",
            user_id="UBOT",
            bot_id="BBOT",
            author_name=None,
            text="[offline model] researcher",
            metadata=None,
        )
        assert await store_message(conn, conversation.id, event, NOW)  # its event came first
    url = "http://127.0.0.1:1/api/"
    client = make_client("xoxb-commander", url)
    port = SlackPort(
        db, client, Poster(client, url), TokenCipher(TokenCipher.new_key()), lambda: NOW
    )
    tag = Tag(plan_id=1, step=1, attempt=1)
    metadata = answer_metadata(tag, "plan:1:step:1:attempt:1:result", streaming=True)
    await port.keep(conversation, "2.0", "[offline model] researcher", None, metadata)
    await port.keep(conversation, "2.0", "[offline model] researcher", None, metadata)  # again
    async with db.read() as conn:
        kept = await thread_messages(conn, conversation.id)
    assert [(m.ts, m.metadata) for m in kept] == [("2.0", metadata)]
    assert metadata["event_payload"][STREAMING_MARK] is True
