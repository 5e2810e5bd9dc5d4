"""What a step's first prompt carries of the conversation's files.

- The original request's attachments go to every step (files attached later in the thread
  are listed by name, for `read_file`): a text file as its content (fenced,
  up to a cap), an image or document as the file itself when the run's model reads that
  type (pydantic-ai's `BinaryContent`), anything else as a named reference the agent can
  open with `read_file`.
- The files of the upstream steps whose `{{step_N.output_files}}` the step's input asked
  for: name, type, link, and for a text file its content up to a (smaller) cap.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pydantic_ai.messages import BinaryContent, UserContent
from pydantic_ai.models import Model

from flotilla.agents.planning.plan import Plan
from flotilla.agents.running.step_reads import Connect, Upstream, output_refs, upstream_outputs
from flotilla.agents.tools.file_policy import (
    FilePolicy,
    as_text,
    describe,
    fenced,
    is_text,
    rendered_output,
)
from flotilla.storage.files import read_bytes, received_files
from flotilla.storage.records import FileRecord

ATTACHED_HEADER = "Files attached to the request:"
OUTPUTS_HEADER = "Files from earlier steps:"
LATER_HEADER = "Files attached later in the thread (open them with `read_file`):"


@dataclass(slots=True)
class PromptFiles:
    """The files part of a first prompt: text to append, and media parts to send along."""

    text: str = ""
    media: list[BinaryContent] = field(default_factory=list)

    def prompt(self, base: str) -> str | Sequence[UserContent]:
        text = f"{base}\n\n{self.text}" if self.text else base
        return [text, *self.media] if self.media else text


def media_reader(model: Model | str) -> Callable[[str], bool]:
    """Which non-text media types the model reads as images or documents (its profile)."""
    if isinstance(model, str):
        return lambda _type: False
    profile = model.profile

    def reads(mimetype: str) -> bool:
        base = mimetype.split(";", 1)[0].strip().lower()
        if base.startswith("image/"):
            return bool(profile.get("supports_image_input", True))
        if not profile.get("supports_document_input", True):
            return False
        supported = profile.get("supported_document_media_types")
        return supported is None or base in supported

    return reads


async def prompt_files(
    connect: Connect,
    *,
    conversation_id: int,
    request_ts: str | None,
    plan: Plan | None,
    step_index: int | None,
    policy: FilePolicy,
    reads_media: Callable[[str], bool],
    received: list[FileRecord] | None = None,
    upstream: list[Upstream] | None = None,
) -> PromptFiles:
    """The files a step's first prompt carries (see the module's docstring); `received`:
    the conversation's received files as just read (else read here). `connect` is asked
    for a connection only when something is left to read (bytes, upstream outputs)."""
    out = PromptFiles()
    lines: list[str] = []
    if received is None:
        received = await received_files(await connect(), conversation_id)
    for file in received:
        if file.message_ts == request_ts:
            lines.append(await _attachment(connect, file, policy, reads_media, out))
    if lines:
        out.text = "\n".join([ATTACHED_HEADER, *lines])
    later = [f for f in received if f.message_ts != request_ts and f.state == "ready"]
    if later:
        named = "\n".join(f"- {describe(f)}" for f in later)
        out.text = "\n\n".join(t for t in (out.text, f"{LATER_HEADER}\n{named}") if t)
    step = plan.step(step_index) if plan is not None and step_index is not None else None
    if upstream is None and step is not None and output_refs(step.input):  # not read yet
        upstream = await upstream_outputs(await connect(), plan, step_index)
    outputs = _rendered_outputs(upstream or [], policy)
    if outputs:
        out.text = "\n\n".join(t for t in (out.text, OUTPUTS_HEADER + "\n" + outputs) if t)
    return out


async def _attachment(
    connect: Connect,
    file: FileRecord,
    policy: FilePolicy,
    reads_media: Callable[[str], bool],
    out: PromptFiles,
) -> str:
    if file.state == "refused":
        return f"- {describe(file)}: not available ({file.refusal or 'refused'})"
    data = await read_bytes(await connect(), file) if file.has_bytes else None
    if data is None:
        return f"- {describe(file)}: not fetched; try `read_file` later"
    if is_text(file.mimetype, file.name):
        text, cut = as_text(data, policy.inline_chars)
        return f"- {describe(file)}:\n{fenced(file.name, text, cut)}"
    if reads_media(file.mimetype):
        out.media.append(BinaryContent(data=data, media_type=file.mimetype, identifier=file.name))
        return f"- {describe(file)}: sent with this message"
    return f"- {describe(file)}: open it with `read_file` (name {file.name!r})"


def _rendered_outputs(upstream: list[Upstream], policy: FilePolicy) -> str:
    lines: list[str] = []
    for index, file, data in upstream:
        text, cut = as_text(data, policy.render_chars) if data is not None else (None, False)
        lines.append(f"(step {index}) " + rendered_output(file, text, cut).removeprefix("- "))
    return "\n".join(lines)
