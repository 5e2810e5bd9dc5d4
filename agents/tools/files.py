"""Built-in file tools of a step's run: `write_file` (a file for the thread and later steps)
and `read_file` (a file of this conversation, by name).

`write_file` records the file with the run in its own transaction, keyed by the tool call
(`tool_call_key`): the tool journal answers the call from its stored return when the run is
resumed, and even a call run again – its return lost in a crash – finds the file already
recorded instead of writing a second one. The file is uploaded into the thread when the
step's answer is posted (`agents/running/file_transfer.py`).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence

from pydantic_ai import RunContext
from pydantic_ai.exceptions import ModelRetry
from pydantic_ai.messages import BinaryContent, ModelMessage, ModelResponse, ToolCallPart

from flotilla.agents.tools.context import RunDeps, call_key
from flotilla.agents.tools.file_policy import (
    as_text,
    clean_name,
    describe,
    fenced,
    human_size,
    is_text,
)
from flotilla.agents.tools.journal import response_stored, store_response_in
from flotilla.storage.files import conversation_files, read_bytes, record_produced

WRITE_FILE = "write_file"
READ_FILE = "read_file"
FILE_TOOLS = (WRITE_FILE, READ_FILE)


def called_write_file(messages: Sequence[ModelMessage]) -> bool:
    """Whether a run's history holds a `write_file` call (else the run wrote no file)."""
    return any(
        isinstance(part, ToolCallPart) and part.tool_name == WRITE_FILE
        for message in messages
        if isinstance(message, ModelResponse)
        for part in message.parts
    )


async def write_file(
    ctx: RunContext[RunDeps],
    name: str,
    content_type: str = "text/plain",
    text: str | None = None,
    content_base64: str | None = None,
) -> str:
    """Write a file that is posted in the thread with your answer, and that later steps get.

    Give `text` for a text file, or `content_base64` for bytes (exactly one of them).
    `name` is the file's name (e.g. `note.md`), `content_type` its media type.
    """
    deps = ctx.deps
    if deps.db is None or deps.job.conversation_id is None:
        raise ModelRetry("Files cannot be written in this run.")
    clean = clean_name(name)
    if not clean:
        raise ModelRetry("Give the file a name, e.g. `note.md`.")
    kind = content_type.strip().lower()
    if "/" not in kind or len(kind) > 255 or any(ch.isspace() for ch in kind):
        raise ModelRetry("`content_type` must be a media type such as text/markdown.")
    data = _content(text, content_base64)
    if len(data) > deps.file_policy.max_bytes:
        raise ModelRetry(
            f"The file is {human_size(len(data))}; keep it under "
            f"{human_size(deps.file_policy.max_bytes)}."
        )
    async with deps.db.write() as conn:
        # the response that made this call, if not stored
        await store_response_in(conn, deps.response_stores, ctx.tool_call_id)
        file = await record_produced(
            conn,
            key=f"produced:{call_key(ctx)}",
            conversation_id=deps.job.conversation_id,
            run_key=deps.job.run_key,
            plan_id=deps.job.plan_id,
            step_index=deps.job.step_index,
            name=clean,
            mimetype=kind,
            data=data,
            store=deps.file_policy.store,
            now=deps.now(),
        )
    response_stored(deps.response_stores, ctx.tool_call_id)
    if file.name not in deps.files:
        deps.files.append(file.name)
    return f"Wrote {describe(file)}; it is posted in the thread with your answer."


def _content(text: str | None, content_base64: str | None) -> bytes:
    if (text is None) == (content_base64 is None):
        raise ModelRetry("Give exactly one of `text` or `content_base64`.")
    if text is not None:
        return text.encode("utf-8")
    try:
        return base64.b64decode(content_base64 or "", validate=True)
    except (binascii.Error, ValueError):
        raise ModelRetry("`content_base64` is not valid base64.") from None


async def read_file(ctx: RunContext[RunDeps], name: str) -> str | BinaryContent:
    """Read a file of this conversation by name: one attached by a person or written by a step."""
    deps = ctx.deps
    if deps.db is None or deps.job.conversation_id is None:
        return "There are no files in this run."
    async with deps.db.read() as conn:
        files = await conversation_files(conn, deps.job.conversation_id)
        usable = [f for f in files if f.state != "refused" and f.has_bytes]
        found = next((f for f in reversed(usable) if f.name == name), None)
        data = await read_bytes(conn, found) if found is not None else None
    if found is None or data is None:
        names = ", ".join(sorted({f.name for f in usable})) or "none"
        return f"There is no readable file named {name!r}. Files here: {names}."
    if is_text(found.mimetype, found.name):
        content, cut = as_text(data, deps.file_policy.inline_chars)
        return fenced(found.name, content, cut)
    if deps.reads_media(found.mimetype):
        return BinaryContent(data=data, media_type=found.mimetype, identifier=found.name)
    return f"{describe(found)} is not text, and this model cannot read it."
