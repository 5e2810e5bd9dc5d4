"""Forms: a user step, or a question a blocked agent asked, as Block Kit.

One field is answered inline in the thread (a text box or a menu in the message itself); a
small form of several fields (up to `MAX_INLINE_FIELDS`, none a file) is answered in the
message too: its input blocks and a [Submit] button, whose click carries every input's value
in `state.values`. Larger forms, and forms with a file field, open a modal from an [Answer]
button. Every element carries the form's key (plan, step, attempt, round) so a stale or
repeated submission can be told apart.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ContextBlock,
    InputBlock,
    InputInteractiveElement,
    MarkdownTextObject,
    Option,
    PlainTextInputElement,
    PlainTextObject,
    SectionBlock,
    StaticSelectElement,
)
from slack_sdk.models.views import View

from flotilla.agents.planning.plan import USER, FormField, FormSpec, Step

INLINE_ACTION = "flotilla_form_inline"
SUBMIT_ACTION = "flotilla_form_submit_inline"  # the [Submit] of a form answered in its message
OPEN_ACTION = "flotilla_form_open"
MODAL_CALLBACK = "flotilla_form_submit"
MAX_INLINE_FIELDS = 5  # more fields than this open a modal
FIELD_ACTION = "value"  # every field's element, in a modal or a message
DEFAULT_FIELD = FormField(name="answer", label="Your answer", kind="long_text")


@dataclass(frozen=True, slots=True)
class FormKey:
    """Which question a form answers: a step's attempt, and the n-th question of that attempt."""

    plan_id: int
    step_index: int
    attempt: int
    round: int = 1

    def encode(self) -> str:
        return f"form:{self.plan_id}:{self.step_index}:{self.attempt}:{self.round}"

    @classmethod
    def decode(cls, value: str) -> FormKey:
        """Parse an encoded key; ValueError for anything that is not one."""
        parts = value.split(":")
        if len(parts) != 5 or parts[0] != "form":
            raise ValueError(f"not a form key: {value!r}")
        plan_id, step, attempt, round_ = (int(p) for p in parts[1:])
        return cls(plan_id, step, attempt, round_)


def fields_of(form: FormSpec | None) -> list[FormField]:
    return list(form.fields) if form and form.fields else [DEFAULT_FIELD]


def answered_in_message(form: FormSpec | None) -> bool:
    """Whether a form is answered in its message (no modal): up to `MAX_INLINE_FIELDS`
    fields, none a file (file inputs live in modals only)."""
    fields = fields_of(form)
    return len(fields) <= MAX_INLINE_FIELDS and all(f.kind != "file" for f in fields)


def _field_input(field: FormField) -> InputBlock:
    """A field as an input block (in a modal, or in a form answered in its message)."""
    return InputBlock(
        block_id=f"field:{field.name}",
        label=PlainTextObject(text=field.label[:2000]),
        element=_element(field, FIELD_ACTION),
        optional=not field.required,
    )


class FileInputElement(InputInteractiveElement):
    """Block Kit's `file_input` (modals only; slack_sdk has no class for it)."""

    type = "file_input"
    MAX_FILES = 10  # Slack's limit

    @property
    def attributes(self) -> set[str]:  # type: ignore[override]
        return super().attributes.union({"max_files", "filetypes"})

    def __init__(self, *, action_id: str, max_files: int = MAX_FILES, **others: Any) -> None:
        super().__init__(action_id=action_id, type=self.type)
        self.max_files = max_files
        self.filetypes = others.get("filetypes")


def _element(field: FormField, action_id: str, *, dispatch: bool = False) -> Any:
    if field.kind == "file":
        return FileInputElement(action_id=action_id)
    if field.kind == "select":
        return StaticSelectElement(
            action_id=action_id,
            placeholder=PlainTextObject(text="Choose…"),
            options=[Option(text=o[:75], value=o[:150]) for o in field.options],
        )
    return PlainTextInputElement(
        action_id=action_id,
        multiline=field.kind == "long_text",
        dispatch_action_config=({"trigger_actions_on": ["on_enter_pressed"]} if dispatch else None),
    )


def form_message(
    key: FormKey, *, title: str, question: str, form: FormSpec | None, ask: str | None
) -> tuple[str, list[Block]]:
    """The message that asks for input in the thread. `ask` is the user id asked, if any."""
    who = f"<@{ask}>" if ask else "a person"
    text = f"Step {key.step_index} needs your input, {who}: {title}"
    blocks: list[Block] = [
        SectionBlock(text=MarkdownTextObject(text=f"*{text}*\n{question}"[:3000]))
    ]
    fields = fields_of(form)
    if len(fields) == 1 and fields[0].kind == "select":
        blocks.append(
            ActionsBlock(block_id=key.encode(), elements=[_element(fields[0], INLINE_ACTION)])
        )
    elif len(fields) == 1 and fields[0].kind != "file":  # file inputs live in modals only
        blocks.append(
            InputBlock(
                block_id=key.encode(),
                label=PlainTextObject(text=fields[0].label[:2000]),
                element=_element(fields[0], INLINE_ACTION, dispatch=True),
                dispatch_action=True,
            )
        )
    elif answered_in_message(form):  # several fields: inputs, and a [Submit] that reads them
        if question.strip() in {f.label.strip() for f in fields}:  # never ask the same twice
            blocks[0] = SectionBlock(text=MarkdownTextObject(text=f"*{text}*"[:3000]))
        blocks += [_field_input(field) for field in fields]
        blocks.append(_button_row(key, "Submit", SUBMIT_ACTION))
    else:
        blocks.append(_button_row(key, "Answer", OPEN_ACTION))
    return text, blocks


def _button_row(key: FormKey, text: str, action_id: str) -> ActionsBlock:
    """The form's one button ([Submit] in the message, [Answer] opening the modal)."""
    button = ButtonElement(text=text, action_id=action_id, value=key.encode(), style="primary")
    return ActionsBlock(block_id=key.encode(), elements=[button])


def form_modal(
    key: FormKey, *, title: str, question: str, form: FormSpec | None, metadata: Mapping[str, Any]
) -> View:
    """The modal for a form with several fields (opened from the [Answer] button)."""
    fields = fields_of(form)
    blocks: list[Block] = []
    if question.strip() not in {f.label.strip() for f in fields}:  # never ask the same twice
        blocks.append(SectionBlock(text=MarkdownTextObject(text=question[:3000])))
    blocks += [_field_input(field) for field in fields]
    return View(
        type="modal",
        callback_id=MODAL_CALLBACK,
        title=PlainTextObject(text=f"Step {key.step_index}"[:24]),
        submit=PlainTextObject(text="Submit"),
        close=PlainTextObject(text="Cancel"),
        private_metadata=json.dumps({"key": key.encode(), **metadata})[:3000],
        blocks=blocks,
    )


def modal_values(
    state: Mapping[str, Any], form: FormSpec | None
) -> tuple[dict[str, str], dict[str, str]]:
    """The submitted values and, per block, the errors to show (required fields left empty).
    `state` is a modal's submitted state, or a message's (a [Submit] click's `state`): both
    are Slack's `{"values": {block_id: {action_id: entry}}}`."""
    values: dict[str, str] = {}
    errors: dict[str, str] = {}
    blocks = state.get("values") or {}
    for field in fields_of(form):
        block_id = f"field:{field.name}"
        raw = (blocks.get(block_id) or {}).get(FIELD_ACTION) or {}
        value = _value_of(raw)
        if value:
            values[field.name] = value
        elif field.required:
            errors[block_id] = f"{field.label[:100]} is required."
    return values, errors


def missing_sentence(errors: Mapping[str, str]) -> str:
    """What a person reads when a form submitted in its message lacks a required answer."""
    return (
        f"Nothing was recorded yet: {' '.join(errors.values())} "
        "Fill it in and press Submit again; what you typed is still in the form."
    )


def modal_files(state: Mapping[str, Any], form: FormSpec | None) -> list[dict[str, Any]]:
    """The files attached in a modal's file fields (Slack's file objects, as submitted)."""
    blocks = state.get("values", {})
    found: list[dict[str, Any]] = []
    for field in fields_of(form):
        if field.kind == "file":
            raw = blocks.get(f"field:{field.name}", {}).get(FIELD_ACTION, {})
            found += [f for f in raw.get("files") or [] if isinstance(f, dict)]
    return found


def _value_of(raw: Mapping[str, Any]) -> str:
    if raw.get("type") == "file_input":  # the answer names the files; they are kept apart
        names = [str(f.get("name") or f.get("id") or "") for f in raw.get("files") or []]
        return ", ".join(n for n in names if n)
    if raw.get("type") == "static_select":
        selected = raw.get("selected_option") or {}
        return str(selected.get("value", "")).strip()
    return str(raw.get("value") or "").strip()


def inline_value(action: Mapping[str, Any]) -> str:
    """The value of an inline answer (a text box's Enter, or a menu choice)."""
    return _value_of(action)


def answered_message(
    *, step_index: int, title: str, values: Mapping[str, str], form: FormSpec | None, user: str
) -> tuple[str, list[Block]]:
    """What the form message becomes once answered: who answered, and what."""
    labels = {f.name: f.label for f in fields_of(form)}
    shown = "; ".join(
        f"{labels.get(k, k)}: {v}" if len(values) > 1 else v for k, v in values.items()
    )
    text = f"✅ Answered by <@{user}>: {shown}"
    return text, [
        SectionBlock(text=MarkdownTextObject(text=text[:3000])),
        ContextBlock(elements=[MarkdownTextObject(text=f"Step {step_index}: {title}"[:3000])]),
    ]


def answered_form(step: Step, values: Mapping[str, str], user: str) -> tuple[str, list[Block]]:
    """`answered_message` for a step's form: a blocked step's question, or a user step's own."""
    asked = step.question if step.assignee != USER else None
    return answered_message(
        step_index=step.index,
        title=step.title,
        values=values,
        form=asked.form if asked is not None else step.form,
        user=user,
    )


def closed_form_message(*, step_index: int, title: str, note: str) -> tuple[str, list[Block]]:
    """What an unanswered form becomes when its plan stopped: struck through, and why."""
    text = f"Step {step_index}: {title} – {note} This form is closed."
    escaped = title.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return text, [
        SectionBlock(text=MarkdownTextObject(text=f"~{escaped}~"[:3000])),
        ContextBlock(elements=[MarkdownTextObject(text=text[:3000])]),
    ]
