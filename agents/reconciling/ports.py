"""The narrow port through which `agents/` acts in Slack, and what it reports.

The reconciler decides typed effects (`agents/planning/effects.py`); the executor performs them:
it runs steps and commander turns itself and asks the Slack layer – through `SlackPort`,
which `bot/slack_port.py` implements – to post, update and look things up in a thread. The
port knows Block Kit, identities and Slack's errors; `agents/` knows none of them.

Errors: the port raises `TransientError` for what is worth trying again (429, 5xx, a
network failure) and `PostingRefused` (a `PermanentError`) when Slack refused for good
(`not_in_channel`, `channel_not_found`, …), with a sentence a person can act on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

from flotilla.agents.core.errors import PermanentError

if TYPE_CHECKING:
    from pydantic_ai.models import Model

    from flotilla.agents.planning.effects import AskUser, FormAnswer, PostDispatch, ShowForm
    from flotilla.agents.planning.plan import Plan, Step
    from flotilla.agents.planning.session_status import SessionStatus
    from flotilla.agents.reconciling.final_texts import FinalText, FinishedAnswer
    from flotilla.storage.plans import PlanCard
    from flotilla.storage.records import ConversationRecord, MessageRecord


class PostingRefused(PermanentError):
    """Slack refused a post for good; `str()` says why in a sentence."""


class FileRefused(PermanentError):
    """An attachment Flotilla will not fetch or keep; `str()` says why in a sentence."""


class StepTag(Protocol):
    """Which step attempt a posted message belongs to (carried in its metadata)."""

    @property
    def plan_id(self) -> int: ...
    @property
    def step(self) -> int: ...
    @property
    def attempt(self) -> int: ...


class AnswerStream(Protocol):
    """One answer shown in the thread while it is written (streamed where the workspace
    allows it, else posted whole at the end)."""

    async def show(self, text: str) -> None:
        """The answer so far (a preview; never raises: a display problem only stops it)."""
        ...

    async def finish(self, text: str) -> FinishedAnswer:
        """The final answer in the thread, with its step's metadata: its ts, and the final
        text its stored message is still to be given (the caller stores it, see
        `agents/reconciling/final_texts.py`). Raises like `SlackPort.say`."""
        ...

    def finished_before(self, text: str) -> FinalText | None:
        """The answer `text` was found finished in the thread already (a redelivery): the
        final text to store if its stored message was left streaming (a process stopped
        after Slack finished it, before storing it); None when there is nothing to store."""
        ...

    async def discard(self) -> None:
        """Take back what was shown (the run failed or is no longer wanted)."""
        ...


class SlackPort(Protocol):
    """What the executor needs from Slack (or the local workspace)."""

    async def post_dispatch(
        self, conversation: ConversationRecord, effect: PostDispatch
    ) -> MessageRecord | None:
        """Post `@agent <input>` in the thread, carrying the effect's key, without keeping
        it: the message to keep (stored with the step's claim, `claim_slot`), or None when
        a retry edited the step's earlier message instead (kept as edited)."""
        ...

    async def dispatch_posted(
        self, conversation: ConversationRecord, effect: PostDispatch
    ) -> MessageRecord | None:
        """The step's dispatch message if Flotilla posted it already (looked for in the
        thread by the effect's key, as `thread_has_key`), as `post_dispatch` returns it:
        a redelivery after a crash keeps it instead of posting it again."""
        ...

    async def post_form(
        self, conversation: ConversationRecord, effect: ShowForm | AskUser, plan: Plan | None
    ) -> None:
        """Post a user step's form, or a blocked step's question, carrying the key."""
        ...

    async def show_card(
        self,
        conversation: ConversationRecord,
        plan: Plan,
        *,
        first: bool,
        card: PlanCard | None = None,
    ) -> bool:
        """Post the plan card once, then edit it in place (`first`: only if not posted;
        `card`: its message as just read by `plan_card`, else read here). True when
        another sender's first post won over this one's (then this one was deleted)."""
        ...

    async def plan_card(self, plan_id: int) -> PlanCard:
        """The plan card's message as stored. Once posted it is in the thread already (then
        `show_card(first=True)` does nothing: its plan need not be read); not posted, its
        first post is taken for the caller, which then posts it (`PlanCard.taken`)."""
        ...

    async def close_forms(self, conversation: ConversationRecord, plan: Plan, note: str) -> None:
        """Replace the plan's open forms with `note` (no buttons left to click)."""
        ...

    async def show_answer(
        self, conversation: ConversationRecord, answer: FormAnswer, step: Step
    ) -> None:
        """Rewrite an answered form's message to show who answered what (`step`: its step as
        stored); the same message again when repeated."""
        ...

    async def say(
        self,
        conversation: ConversationRecord,
        text: str,
        *,
        agent: str | None = None,
        result_of: StepTag | None = None,
        key: str | None = None,
    ) -> str:
        """Post in the thread as the commander, or as `agent`; the message's ts.

        `result_of` + `key` mark a step's answer (metadata), so a redelivery can find it.
        """
        ...

    async def open_answer(
        self,
        conversation: ConversationRecord,
        *,
        agent: str | None,
        result_of: StepTag | None,
        key: str,
        plan_id: int,
        thread: list[MessageRecord] | None = None,
        plan: Plan | None = None,
    ) -> AnswerStream:
        """A stream for the answer carrying `key`, as the commander or `agent`: a step's
        answer (`result_of`) or the plan's final answer, in plan `plan_id` (people's 👍/👎 on
        it are kept for that plan and agent). It carries on a stream of `key` left
        unfinished by a stopped process instead of starting another (looked for in
        `thread`, the thread's stored messages, when the caller read them already)."""
        ...

    async def show_status(
        self, conversation: ConversationRecord, status: SessionStatus, words: str = ""
    ) -> None:
        """Show the thread's agent session status (`words`: the same, for a status line).
        Best effort: never raises."""
        ...

    async def thread_has_key(
        self, conversation: ConversationRecord, key: str, *, agent: str | None = None
    ) -> bool:
        """Whether Flotilla (its own bot, or `agent`'s identity) already posted a message
        carrying `key` in its metadata. Messages of other apps and people never count."""
        ...

    # --- files (bot/slack_files.py) -------------------------------------------------

    async def download_file(self, url: str, *, max_bytes: int) -> bytes:
        """An attachment's bytes (bot token; Slack's file host only; at most `max_bytes`).
        Raises `FileRefused` (a sentence) or `TransientError`."""
        ...

    async def start_upload(self, *, name: str, size: int, agent: str | None) -> tuple[str, str]:
        """Begin an upload as `agent` (or the commander): Slack's file id and upload URL."""
        ...

    async def send_upload(self, upload_url: str, data: bytes) -> bool:
        """Send the bytes; False when the upload URL no longer takes them."""
        ...

    async def complete_upload(
        self, conversation: ConversationRecord, file_id: str, *, title: str, agent: str | None
    ) -> str | None:
        """Share an uploaded file into the conversation's thread; its permalink."""
        ...

    async def shared_permalink(
        self, conversation: ConversationRecord, file_id: str, *, agent: str | None
    ) -> str | None:
        """The permalink of the file if it is already shared in the thread's channel."""
        ...


ChooseModel = Callable[[str | None], Awaitable["Model"]]


class RunObserver(Protocol):
    """Telemetry of the executor (bot/ implements it with Prometheus metrics)."""

    def queued(self, seconds: float) -> None: ...
    def ran(self, agent: str, seconds: float) -> None: ...
    def dispatched(self, kind: str) -> None: ...
    def outcome(self, kind: str) -> None: ...
    def commander_turn(self, result: str) -> None: ...
    def jobs_running(self, count: int) -> None: ...
