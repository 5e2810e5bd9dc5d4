"""The test driver: act as people in the local workspace (post, mention, click, fill and submit
modals, run slash commands, open App Home) and await conditions on its state – no sleeps."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any

from flotilla.local_slack.events import Delivery
from flotilla.local_slack.host import Workspace
from flotilla.local_slack.interactivity import SubmissionOutcome, interactivity_of
from flotilla.local_slack.records import Ephemeral, InstalledApp, Json, Message, Person, View
from flotilla.local_slack.shapes import message_json, rich_text_block
from flotilla.local_slack.transcript import render_thread

Who = Person | str
Attachment = tuple[str, bytes, str | None]  # a file a person attaches: name, bytes, mimetype


class Driver:
    """People's side of the workspace, for tests and the terminal trial."""

    def __init__(self, ws: Workspace, *, default_timeout: float = 10.0) -> None:
        self.ws = ws
        self.state = ws.state
        self.default_timeout = default_timeout

    def person(self, who: Who) -> Person:
        return who if isinstance(who, Person) else self.state.person_named(who)

    def _channel_id(self, channel: str) -> str:
        return self.state.channel_named(channel).id

    # ----- acting --------------------------------------------------------------------------

    def post(
        self,
        who: Who,
        channel: str,
        text: str,
        *,
        thread_ts: str | None = None,
        blocks: list[Json] | None = None,
        broadcast: bool = False,
        files: Sequence[Attachment] = (),
    ) -> Message:
        """A person writes a message (in a thread when `thread_ts` is given), with `files`
        attached as (name, bytes, mimetype or None) – a `file_share` message, as in Slack."""
        person = self.person(who)
        channel_id = self._channel_id(channel)
        if person.id not in self.state.channels[channel_id].members:
            raise PermissionError(
                f"@{person.name} is not in #{self.state.channels[channel_id].name}"
            )
        shared = [
            self.state.files.add(name, data, user=person.id, mimetype=mimetype)
            for name, data, mimetype in files
        ]
        subtype = "file_share" if shared else None
        msg = Message(
            channel=channel_id,
            ts=self.state.ts_clock.next(),
            text=text,
            user=person.id,
            blocks=blocks if blocks is not None else [rich_text_block(text)],
            thread_ts=thread_ts,
            subtype="thread_broadcast" if broadcast and thread_ts else subtype,
            client_msg_id=None if shared else str(uuid.uuid4()),  # file_share has none
            files=[f.id for f in shared],
        )
        for file in shared:
            file.channels.append(channel_id)
            file.shares.setdefault(channel_id, []).append(msg.ts)
        self.state.add_message(msg)
        self.ws.events.message_posted(msg)
        return msg

    def edit(self, who: Who, msg: Message, text: str) -> None:
        """A person edits their own message; apps hear `message_changed`."""
        if msg.user != self.person(who).id:
            raise PermissionError("people can only edit their own messages")
        previous = message_json(self.state, msg)
        msg.text, msg.blocks = text, [rich_text_block(text)]
        msg.edited = {"user": msg.user, "ts": self.state.ts_clock.next()}
        self.state.changed()
        self.ws.events.message_changed(msg, previous)

    def delete(self, who: Who, msg: Message) -> None:
        """A person deletes their own message; apps hear `message_deleted`."""
        if msg.user != self.person(who).id:
            raise PermissionError("people can only delete their own messages")
        previous = message_json(self.state, msg)
        msg.deleted = True
        self.state.changed()
        self.ws.events.message_deleted(msg, previous)

    def dm(
        self, who: Who, app: InstalledApp, text: str, *, thread_ts: str | None = None
    ) -> Message:
        """A person writes to an app in its Messages tab (the direct-message channel)."""
        channel, _ = self.state.dm(self.person(who).id, app.bot_user_id)
        return self.post(who, channel.id, text, thread_ts=thread_ts)

    def mention(
        self,
        who: Who,
        channel: str,
        app: InstalledApp,
        text: str,
        *,
        thread_ts: str | None = None,
        files: Sequence[Attachment] = (),
    ) -> Message:
        """A person writes `<@app-bot> text` (with `files` attached, if any)."""
        return self.post(
            who, channel, f"<@{app.bot_user_id}> {text}", thread_ts=thread_ts, files=files
        )

    async def click(
        self,
        who: Who,
        msg: Message,
        action_id: str,
        *,
        value: Any = None,
        values: dict[str, Any] | None = None,
    ) -> Delivery:
        """A person clicks a button (or picks `value` in a select) of a message from an app,
        having typed `values` into the message's inputs first (see `type_into`); the click
        carries the message's inputs in `state.values`, as Slack's does."""
        app = self.state.apps.get(msg.app_id or "")
        if app is None:
            raise ValueError("only messages posted by apps have interactive elements")
        if values:
            self.type_into(who, msg, values)
        element, block_id = _find_element(msg.blocks or [], action_id)
        return await interactivity_of(self.ws).message_action(
            self.person(who),
            app,
            msg,
            block_action(element, block_id, value, self.state.ts_clock.next()),
        )

    def type_into(self, who: Who, msg: Message, values: dict[str, Any]) -> None:
        """Type into (or pick in) a message's input blocks, as `who` sees the message; keys
        are block_id or action_id. Nothing is sent: Slack's client keeps it until a click."""
        person = self.person(who)
        typed = msg.typed.setdefault(person.id, {})
        known = False
        for block in msg.blocks or []:
            element = block.get("element")
            if block.get("type") != "input" or not isinstance(element, dict):
                continue
            for key in (block["block_id"], element.get("action_id")):
                if key in values:
                    known = True
                    entry = input_value(element, values[key])
                    typed.setdefault(block["block_id"], {})[element["action_id"]] = entry
        if values and not known:
            raise LookupError(f"no input {sorted(values)!r} in this message")
        self.state.changed()

    async def click_in_view(self, who: Who, action_id: str, *, value: Any = None) -> Delivery:
        """A person clicks an element of the modal they have open."""
        view = self.open_view(who)
        element, block_id = _find_element(view.spec.get("blocks", []), action_id)
        app = self.state.apps[view.app_id]
        action = block_action(element, block_id, value, self.state.ts_clock.next())
        return await interactivity_of(self.ws).view_action(self.person(who), app, view, action)

    def open_view(self, who: Who) -> View:
        view = self.state.top_modal(self.person(who).id)
        if view is None:
            raise LookupError(f"@{self.person(who).name} has no modal open")
        return view

    def fill(self, who: Who, values: dict[str, Any]) -> View:
        """Type into the open modal's inputs; keys are block_id or action_id. A file input
        takes attachments, (name, bytes, mimetype or None) each, given to the modal's app."""
        view = self.open_view(who)
        for block in view.spec.get("blocks", []):
            if block.get("type") != "input":
                continue
            element = block["element"]
            for key in (block["block_id"], element.get("action_id")):
                if key in values:
                    value = values[key]
                    if element.get("type") == "file_input":
                        value = self._form_files(who, view, value)
                    view.state_values.setdefault(block["block_id"], {})[element["action_id"]] = (
                        input_value(element, value)
                    )
        self.state.changed()
        return view

    def _form_files(self, who: Who, view: View, attachments: Sequence[Attachment]) -> list[Json]:
        """Files a person picks in a modal's file input, as Slack's file objects."""
        person = self.person(who)
        store = self.state.files
        files = [
            store.add(name, data, user=person.id, mimetype=kind) for name, data, kind in attachments
        ]
        for file in files:
            file.granted.add(view.app_id)
        return [store.shape(self.state.team_id, f, domain=self.state.domain) for f in files]

    async def submit(self, who: Who, values: dict[str, Any] | None = None) -> SubmissionOutcome:
        """Fill (optionally) and press Submit; required inputs left empty are refused as Slack's
        client does."""
        view = self.fill(who, values or {})
        for block in view.spec.get("blocks", []):
            if block.get("type") == "input" and not block.get("optional", False):
                element = block["element"]
                entry = view.state_values.get(block["block_id"], {}).get(element["action_id"])
                if not _has_value(entry):
                    label = block.get("label", {}).get("text", block["block_id"])
                    raise ValueError(f"'{label}' is required")
        person = self.person(who)
        return await interactivity_of(self.ws).view_submission(
            person, self.state.apps[view.app_id], view
        )

    async def close_modal(self, who: Who) -> Delivery | None:
        view = self.open_view(who)
        app = self.state.apps[view.app_id]
        return await interactivity_of(self.ws).view_closed(self.person(who), app, view)

    async def slash_command(self, who: Who, channel: str, command: str, text: str = "") -> Delivery:
        for app in self.state.apps.values():
            if command in app.commands:
                person = self.person(who)
                return await interactivity_of(self.ws).slash_command(
                    person, app, self._channel_id(channel), command, text
                )
        raise LookupError(f"no app provides {command}")

    def open_app_home(self, who: Who, app: InstalledApp, tab: str = "home") -> None:
        self.ws.events.app_home_opened(app, self.person(who).id, tab)

    # ----- reading -------------------------------------------------------------------------

    def thread(self, channel: str, ts: str) -> list[Message]:
        return self.state.thread(self._channel_id(channel), ts)

    def ephemerals(self, who: Who) -> list[Ephemeral]:
        person = self.person(who)
        return [e for e in self.state.ephemerals if e.user == person.id]

    def home(self, who: Who, app: InstalledApp) -> View | None:
        view_id = self.state.home_views.get((self.person(who).id, app.app_id))
        return self.state.views[view_id] if view_id else None

    def transcript(self, channel: str, ts: str, *, viewer: Who | None = None) -> str:
        """The thread as text; with `viewer`, including what only that person sees."""
        seen_by = self.person(viewer).id if viewer is not None else None
        return render_thread(self.state, self._channel_id(channel), ts, viewer=seen_by)

    # ----- waiting -------------------------------------------------------------------------

    async def wait_for(
        self, predicate: Callable[[], Any], timeout: float | None = None, *, what: str = ""
    ) -> None:
        """Return once `predicate()` is truthy; fail with `what` after `timeout` seconds."""
        try:
            await self.state.wait_for(lambda: bool(predicate()), timeout or self.default_timeout)
        except TimeoutError:
            raise AssertionError(f"timed out waiting for {what or 'condition'}") from None

    async def thread_has_message(
        self,
        channel: str,
        ts: str,
        *,
        from_: str | None = None,
        containing: str | None = None,
        timeout: float | None = None,
    ) -> Message:
        """Await a reply in the thread (from @from_, containing a text); answer it."""
        found: list[Message] = []
        channel_id = self._channel_id(channel)

        def check() -> bool:
            for m in self.state.thread(channel_id, ts)[1:]:
                if from_ is not None and from_.lstrip("@") not in self._author_names(m):
                    continue
                if containing is not None and containing not in m.text + str(m.blocks or ""):
                    continue
                found.append(m)
                return True
            return False

        try:
            await self.state.wait_for(check, timeout or self.default_timeout)
        except TimeoutError:
            wanted = f"from @{from_} " if from_ else ""
            wanted += f"containing {containing!r}" if containing else ""
            transcript = render_thread(self.state, channel_id, ts)
            raise AssertionError(
                f"no reply {wanted}in the thread within the timeout:\n{transcript}"
            ) from None
        return found[0]

    def _author_names(self, msg: Message) -> set[str]:
        """Names a message can be awaited by: persona username, user name, app name."""
        names = {msg.username or "", self.state.user_name(msg.user) if msg.user else ""}
        app = self.state.apps.get(msg.app_id or "")
        if app is not None and not msg.username:
            names |= {app.name, self.state.user_name(app.bot_user_id)}
        return names - {""}

    async def deliveries_settled(self, timeout: float | None = None) -> None:
        """Await every event delivery having at least one attempt recorded."""
        await self.wait_for(
            lambda: all(d.attempts for d in self.ws.events.deliveries),
            timeout,
            what="event deliveries",
        )

    async def deliveries_finished(self, timeout: float | None = None) -> None:
        """Await every event delivery having its last attempt: acked, or out of retries
        (a delivery whose first attempt timed out has a retry still to come)."""
        attempts = len(self.ws.events.retry_delays) + 1
        await self.wait_for(
            lambda: all(d.acked or len(d.attempts) >= attempts for d in self.ws.events.deliveries),
            timeout,
            what="event deliveries acked or out of retries",
        )


def _find_element(blocks: list[Json], action_id: str) -> tuple[Json, str]:
    for block in blocks:
        with_elements = block.get("type") in ("actions", "context_actions")
        candidates = list(block.get("elements", [])) if with_elements else []
        if "accessory" in block:
            candidates.append(block["accessory"])
        if block.get("type") == "input":
            candidates.append(block["element"])
        for el in candidates:
            if isinstance(el, dict) and el.get("action_id") == action_id:
                return el, block["block_id"]
    raise LookupError(f"no element with action_id {action_id!r}")


def block_action(element: Json, block_id: str, value: Any, action_ts: str) -> Json:
    """The `actions[]` entry Slack sends when a person uses `element` (picking `value`)."""
    action: Json = {"action_id": element["action_id"], "block_id": block_id}
    kind = element["type"]
    action["type"] = kind
    if kind in ("button", "icon_button"):
        action["text"] = element["text"]
        if "value" in element:
            action["value"] = element["value"]
        if "style" in element:
            action["style"] = element["style"]
    elif kind == "feedback_buttons":  # `value`: "positive" or "negative" (the button clicked)
        button = element["negative_button" if value == "negative" else "positive_button"]
        action["text"], action["value"] = button["text"], button["value"]
    else:
        action.update({k: v for k, v in input_value(element, value).items() if k != "type"})
    action["action_ts"] = action_ts
    return action


def _option(element: Json, value: Any) -> Json:
    for opt in element.get("options", []) + [
        o for g in element.get("option_groups", []) for o in g.get("options", [])
    ]:
        if value in (opt.get("value"), opt.get("text", {}).get("text")):
            return {"text": opt["text"], "value": opt.get("value")}
    raise ValueError(f"no option {value!r}")


_SELECTED = {
    "users_select": "selected_user",
    "conversations_select": "selected_conversation",
    "channels_select": "selected_channel",
    "datepicker": "selected_date",
    "timepicker": "selected_time",
    "multi_users_select": "selected_users",
    "multi_conversations_select": "selected_conversations",
    "multi_channels_select": "selected_channels",
}


def input_value(element: Json, value: Any) -> Json:
    """The `state.values` entry Slack records for an element holding `value`."""
    kind = element["type"]
    if kind in ("static_select", "radio_buttons", "external_select", "overflow"):
        return {"type": kind, "selected_option": _option(element, value) if value else None}
    if kind in ("multi_static_select", "checkboxes", "multi_external_select"):
        return {"type": kind, "selected_options": [_option(element, v) for v in value or []]}
    if kind in _SELECTED:
        return {"type": kind, _SELECTED[kind]: value}
    if kind == "file_input":
        return {"type": kind, "files": list(value or [])}
    return {"type": kind, "value": None if value is None else str(value)}


def _has_value(entry: Json | None) -> bool:
    if not entry:
        return False
    return any(v not in (None, "", []) for k, v in entry.items() if k != "type")
