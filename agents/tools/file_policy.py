"""Files in and out, the pure part: which attachments are taken, what is text, and how a
file is shown to a model or a person. No I/O here (see `agents/running/file_transfer.py`)."""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from flotilla.storage.files import ByteStore
from flotilla.storage.records import FileRecord

DEFAULT_MAX_BYTES = 5 * 1024 * 1024
DEFAULT_TYPES: tuple[str, ...] = (
    "text/*",
    "application/json",
    "application/xml",
    "application/x-yaml",
    "application/yaml",
    "application/pdf",
    "image/png",
    "image/jpeg",
    "image/gif",
    "image/webp",
)
# text types that do not start with text/
_TEXT_TYPES = frozenset(
    {"application/json", "application/xml", "application/x-yaml", "application/yaml"}
)
_TEXT_SUFFIXES = frozenset(
    {".txt", ".md", ".csv", ".tsv", ".json", ".yaml", ".yml", ".xml", ".html", ".log"}
)
NAME_MAX = 255
MIMETYPE_MAX = 255


@dataclass(frozen=True, slots=True)
class FilePolicy:
    """What Flotilla takes and keeps of files (read from the settings in bot/)."""

    max_bytes: int = DEFAULT_MAX_BYTES
    allowed_types: tuple[str, ...] = DEFAULT_TYPES
    inline_chars: int = 20_000  # a text file's content in a prompt, at most
    render_chars: int = 2_000  # a text file's content in a later step's input, at most
    store: ByteStore = field(default_factory=ByteStore)


def type_allowed(mimetype: str, policy: FilePolicy) -> bool:
    base = mimetype.split(";", 1)[0].strip().lower()
    return any(fnmatch.fnmatchcase(base, pattern.lower()) for pattern in policy.allowed_types)


def refusal(name: str, mimetype: str, size: int | None, policy: FilePolicy) -> str | None:
    """Why an attachment is not taken, as a sentence; None when it is."""
    if not type_allowed(mimetype, policy):
        kind = mimetype or "an unknown type"
        return f"{name} is {kind}, a type I do not take"
    if size is not None and size > policy.max_bytes:
        return f"{name} is {human_size(size)}, more than the {human_size(policy.max_bytes)} I take"
    return None


def refusal_note(refusals: Sequence[str]) -> str:
    """The sentence people read in the thread about attachments not taken."""
    listed = "; ".join(refusals)
    return (
        f"I cannot use {'this attachment' if len(refusals) == 1 else 'these attachments'}: "
        f"{listed}. The plan goes on without {'it' if len(refusals) == 1 else 'them'}."
    )


def is_text(mimetype: str, name: str) -> bool:
    base = mimetype.split(";", 1)[0].strip().lower()
    if base.startswith("text/") or base in _TEXT_TYPES:
        return True
    return base in ("", "application/octet-stream") and (
        PurePosixPath(name).suffix.lower() in _TEXT_SUFFIXES
    )


def human_size(size: int) -> str:
    if size < 1024:
        return f"{size} bytes"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} kB"
    return f"{size / (1024 * 1024):.1f} MB"


def describe(file: FileRecord) -> str:
    """E.g. `prices.csv (text/csv, 1.2 kB)`."""
    size = f", {human_size(file.size)}" if file.size is not None else ""
    return f"{file.name} ({file.mimetype or 'unknown type'}{size})"


def as_text(data: bytes, limit: int) -> tuple[str, bool]:
    """Bytes as text (UTF-8, undecodable bytes replaced) cut to `limit`; and whether cut."""
    text = data.decode("utf-8", errors="replace")
    return (text, False) if len(text) <= limit else (text[:limit], True)


def fenced(name: str, text: str, cut: bool) -> str:
    """A text file's content for a prompt, fenced so it reads as material, not orders."""
    tail = "\n(cut: the file is longer)" if cut else ""
    return f"--- {name} ---\n{text.rstrip()}\n--- end of {name} ---{tail}"


def clean_name(name: str) -> str:
    """A produced file's name: no directories, no control characters, at most 255 chars."""
    base = PurePosixPath(name.replace("\\", "/")).name
    base = "".join(ch for ch in base if ch.isprintable()).strip().lstrip(".")
    return base[:NAME_MAX]


def rendered_output(file: FileRecord, text: str | None, cut: bool) -> str:
    """How a produced file appears where `{{step_N.output_files}}` asked for it."""
    link = f" {file.permalink}" if file.permalink else ""
    head = f"- {describe(file)}{link}"
    if text is None:
        return head
    return f"{head}\n{fenced(file.name, text, cut)}"
