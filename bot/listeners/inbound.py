"""Typed models of every inbound Slack payload Flotilla reads, with Slack's field shapes and
limits. A payload that does not fit raises `InvalidPayload` (a one-line reason, never the
payload itself), and nothing from it is stored or sent to Slack.

Shapes: https://api.slack.com/reference/interaction-payloads and the Events API. Ids are
upper-case alphanumerics after their kind's letter; a message `ts` is seconds.micros.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from flotilla.bot.listeners.payloads import IGNORED_SUBTYPES, SlackFile, SlackMessage
from flotilla.bot.views.forms import FormKey

UserId = Annotated[str, StringConstraints(pattern=r"^[UW][A-Z0-9]{2,30}$")]
ChannelId = Annotated[str, StringConstraints(pattern=r"^[CGD][A-Z0-9]{2,30}$")]
TeamId = Annotated[str, StringConstraints(pattern=r"^[TE][A-Z0-9]{2,30}$")]
Ts = Annotated[str, StringConstraints(pattern=r"^[0-9]{9,11}\.[0-9]{6}$")]
Url = Annotated[str, StringConstraints(pattern=r"^https?://[^\s]+$", max_length=2000)]
Short = Annotated[str, StringConstraints(max_length=255)]
MAX_METADATA_CHARS = 3000  # a view's private_metadata
MAX_BUTTON_VALUE = 2000  # a button's value
MAX_INPUT_VALUE = 3000  # a plain-text input's value
MAX_COMMAND_TEXT = 4000
RECORDED_EVENTS = ("app_mention", "message")
Model = TypeVar("Model", bound=BaseModel)
Body = dict[str, Any]


class InvalidPayload(Exception):
    """A payload that is not the shape Slack sends; `reason` is one line, safe to log."""

    def __init__(self, what: str, reason: str) -> None:
        super().__init__(f"refused {what}: {reason}")
        self.what = what
        self.reason = reason


def reason_of(error: ValidationError) -> str:
    """Which fields were wrong, in one short line (the values are never echoed)."""
    parts = [
        f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in error.errors()[:3]
    ]
    more = error.error_count() - len(parts)
    return "; ".join(parts)[:300] + (f" (and {more} more)" if more > 0 else "")


def parse(model: type[Model], data: Any, what: str) -> Model:
    """`data` as `model`, or InvalidPayload saying why not."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InvalidPayload(what, reason_of(exc)) from None


class _Inbound(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _Id(_Inbound):
    id: Short


class Actor(_Inbound):
    id: UserId


# --- events ---------------------------------------------------------------------------------


class EventEnvelope(_Inbound):
    """An Events API `event_callback` (the parts Flotilla reads)."""

    type: Literal["event_callback"]
    team_id: TeamId | None = None
    event_id: Short | None = None
    event: dict[str, Any]


MAX_FILES = 100  # files.completeUploadExternal shares at most this many in one message


class InboundFile(SlackFile):
    """A file object on a message event, within Slack's limits (ids, names, a byte size)."""

    id: Annotated[str, StringConstraints(pattern=r"^F[A-Z0-9]{2,30}$")]
    name: Annotated[str, StringConstraints(max_length=255)] = ""
    title: Annotated[str, StringConstraints(max_length=255)] = ""
    mimetype: Annotated[str, StringConstraints(max_length=255)] = ""
    filetype: Annotated[str, StringConstraints(max_length=64)] = ""
    size: Annotated[int, Field(ge=0, le=1 << 40)] | None = None
    url_private: Url | None = None
    url_private_download: Url | None = None
    permalink: Url | None = None


class MessageEvent(SlackMessage):
    """A `message` or `app_mention` event, within Slack's limits."""

    channel: ChannelId
    ts: Ts
    text: Annotated[str, StringConstraints(max_length=40_000)] = ""
    thread_ts: Ts | None = None
    user: UserId | None = None
    bot_id: Annotated[str, StringConstraints(pattern=r"^B[A-Z0-9]{2,30}$")] | None = None
    app_id: Annotated[str, StringConstraints(pattern=r"^A[A-Z0-9]{2,30}$")] | None = None
    subtype: Annotated[str, StringConstraints(max_length=64)] | None = None
    username: Short | None = None
    metadata: dict[str, Any] | None = None
    files: Annotated[tuple[InboundFile, ...], Field(max_length=MAX_FILES)] = ()


class HomeOpened(_Inbound):
    type: Literal["app_home_opened"]
    user: UserId
    tab: Literal["home", "messages"]  # Slack always says which tab was opened


def check_metadata(metadata: dict[str, Any] | None) -> None:
    if metadata is not None and len(json.dumps(metadata)) > 8000:  # Slack's own cap is 8 kB
        raise InvalidPayload("a message event", "metadata: longer than 8,000 characters")


def check_event(body: dict[str, Any]) -> str | None:
    """The type of an event Flotilla reads, once its envelope and event fit; None for
    events Flotilla does not read. InvalidPayload when one it reads does not fit."""
    if body.get("type") != "event_callback":
        return None
    envelope = parse(EventEnvelope, body, "an event envelope")
    kind = envelope.event.get("type")
    if kind == "app_home_opened":
        parse(HomeOpened, envelope.event, "an app_home_opened event")
        return "app_home_opened"
    if kind not in RECORDED_EVENTS:
        return None
    event = envelope.event
    if event.get("subtype") in IGNORED_SUBTYPES or event.get("hidden"):
        return None  # edits, deletions, joins: not acted on
    check_metadata(parse(MessageEvent, event, f"an event ({kind})").metadata)
    return "app_mention" if kind == "app_mention" else "message"


# --- interactions ---------------------------------------------------------------------------


class Container(_Inbound):
    channel_id: ChannelId | None = None
    message_ts: Ts | None = None
    thread_ts: Ts | None = None
    view_id: Short | None = None


class MessageRef(_Inbound):
    ts: Ts
    thread_ts: Ts | None = None


class Where(_Inbound):
    """Who acted, and on which message of which thread."""

    user: UserId
    channel: ChannelId
    thread_ts: Ts
    message_ts: Ts | None = None


class Action(_Inbound):
    type: Annotated[str, StringConstraints(max_length=64)] = ""
    action_id: Short
    block_id: Short = ""
    value: Annotated[str, StringConstraints(max_length=MAX_INPUT_VALUE)] | None = None
    selected_option: dict[str, Any] | None = None

    def button_value(self) -> str:
        if self.value is None or len(self.value) > MAX_BUTTON_VALUE:
            raise InvalidPayload("a button click", "actions.0.value: missing or too long")
        return self.value


class BlockActions(_Inbound):
    type: Literal["block_actions"]
    user: Actor
    trigger_id: Short | None = None
    response_url: Url | None = None
    container: Container | None = None
    channel: _Id | None = None
    message: MessageRef | None = None
    actions: Annotated[list[Action], Field(min_length=1, max_length=25)]
    # a message's inputs as the person left them: {"values": {block_id: {action_id: entry}}}
    state: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}

    @property
    def action(self) -> Action:
        return self.actions[0]

    def where(self) -> Where:
        """The thread the clicked message is in; InvalidPayload when the payload lacks it."""
        container = self.container or Container()
        message_ts = container.message_ts or (self.message.ts if self.message else None)
        thread = self.message.thread_ts if self.message else None
        where = {
            "user": self.user.id,
            "channel": container.channel_id or (self.channel.id if self.channel else None),
            "thread_ts": container.thread_ts or thread or message_ts,
            "message_ts": message_ts,
        }
        return parse(Where, where, "a block_actions payload")


class View(_Inbound):
    id: Short | None = None
    callback_id: Short = ""
    private_metadata: Annotated[str, StringConstraints(max_length=MAX_METADATA_CHARS)] = ""
    state: dict[str, dict[str, dict[str, dict[str, Any]]]] = {}


class ViewSubmission(_Inbound):
    type: Literal["view_submission"]
    user: Actor
    view: View


class FormMetadata(_Inbound):
    """What a form modal carries in its private_metadata."""

    key: Short
    channel: ChannelId
    thread_ts: Ts
    message_ts: Ts | None = None


class AgentMetadata(_Inbound):
    """What the agent modal carries in its private_metadata."""

    mode: Literal["add", "edit"] = "add"
    name: Annotated[str, StringConstraints(max_length=80)] = ""
    channel: ChannelId | Literal[""] = ""


def metadata_of(view: View, model: type[Model]) -> Model:
    """A view's private_metadata as `model`; InvalidPayload for anything else."""
    try:
        data = json.loads(view.private_metadata or "{}")
    except (ValueError, RecursionError):
        raise InvalidPayload("a view submission", "private_metadata: not JSON") from None
    return parse(model, data, "a view submission's private_metadata")


def form_key(value: str | None) -> FormKey:
    """An encoded form key; InvalidPayload for anything else."""
    try:
        return FormKey.decode(value or "")
    except ValueError:
        raise InvalidPayload("a form interaction", "not a form key") from None


def plan_number(value: str) -> int:
    if not value.isascii() or not value.isdigit() or len(value) > 18:
        raise InvalidPayload("a Cancel click", "actions.0.value: not a plan number")
    return int(value)


class SlashCommand(_Inbound):
    command: Annotated[str, StringConstraints(pattern=r"^/[a-z0-9_-]{1,31}$")]
    text: Annotated[str, StringConstraints(max_length=MAX_COMMAND_TEXT)] = ""
    user_id: UserId
    channel_id: ChannelId
    team_id: TeamId | None = None
    trigger_id: Short | None = None
    response_url: Url | None = None
