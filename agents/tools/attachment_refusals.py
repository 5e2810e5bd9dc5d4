"""Attachments refused at the edge (a type not taken, a declared size too large), told: the
one sentence for the thread about the files that came with a person's message or form
answer and are not taken, and an operator's line per file. The refusals themselves are
decided when the files are received (`agents/tools/file_policy.py`, `refusal`)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from flotilla.agents.tools.file_policy import refusal_note
from flotilla.storage.files import ReceivedFile

log = logging.getLogger(__name__)


def refused_note(files: Sequence[ReceivedFile]) -> str | None:
    """The sentence about the attachments among `files` that are not taken, if any."""
    refused = [f.refusal for f in files if f.refusal]
    for file in files:
        if file.refusal:
            log.info("attachment %s not taken: %s", file.slack_file_id, file.refusal)
    return refusal_note(refused) if refused else None
