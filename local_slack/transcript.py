"""Render a thread (or a view) as a person sees it: names, times, mentions as @names and
#channels, mrkdwn as the words Slack shows (no `*bold*` markers, no `&lt;` escapes), Block Kit
as readable text, "(edited)" marks. For test failure messages and the terminal trial."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from flotilla.local_slack.records import Json, Message, View
from flotilla.local_slack.state import WorkspaceState

_USER_MENTION = re.compile(r"<@([UWB][A-Z0-9]+)(?:\|([^>]*))?>")
_CHANNEL_MENTION = re.compile(r"<#([CG][A-Z0-9]+)(?:\|([^>]*))?>")
_LINK = re.compile(r"<(https?://[^|>]+)(?:\|([^>]*))?>")
_SPECIAL = re.compile(r"<!(here|channel|everyone)>")
_CODE = re.compile(r"(```.*?```|`[^`\n]+`)", re.S)
# emphasis as Slack reads it: a marker opens before a non-space, closes after one, and
# touches no letter or digit outside (snake_case, 2*3*4 and "* item" stay as they are)
_EMPHASIS = [
    re.compile(r"(?<![\w*])\*\*(?=\S)([^*\n]+?)(?<=\S)\*\*(?![\w*])"),  # markdown bold
    re.compile(r"(?<![\w*])\*(?=\S)([^*\n]+?)(?<=\S)\*(?![\w*])"),  # mrkdwn bold
    re.compile(r"(?<![\w_])_(?=\S)([^_\n]+?)(?<=\S)_(?![\w_])"),  # italics
]
_ESCAPES = (("&lt;", "<"), ("&gt;", ">"), ("&amp;", "&"))


def resolve_mentions(state: WorkspaceState, text: str) -> str:
    """`<@U123>` -> `@alice`, `<#C1>` -> `#general`, `<url|label>` -> `label (url)`."""
    text = _USER_MENTION.sub(lambda m: "@" + (m.group(2) or state.user_name(m.group(1))), text)

    def channel(m: re.Match[str]) -> str:
        found = state.channels.get(m.group(1))
        return "#" + (m.group(2) or (found.name if found else m.group(1)))

    text = _CHANNEL_MENTION.sub(channel, text)
    text = _LINK.sub(lambda m: f"{m.group(2)} ({m.group(1)})" if m.group(2) else m.group(1), text)
    return _SPECIAL.sub(lambda m: "@" + m.group(1), text)


def plain_mrkdwn(text: str) -> str:
    """Slack's formatting as a terminal shows it: `*bold*`, `**bold**` and `_italics_` without
    their markers, `&lt;` `&gt;` `&amp;` as the characters; code spans kept as typed."""
    parts = _CODE.split(text)
    for i in range(0, len(parts), 2):  # the parts between code spans
        for pattern in _EMPHASIS:
            parts[i] = pattern.sub(r"\1", parts[i])
    out = "".join(parts)
    for escaped, char in _ESCAPES:
        out = out.replace(escaped, char)
    return out


def render_text(state: WorkspaceState, text: str) -> str:
    """A message's (or mrkdwn object's) text as a person reads it: mentions, links and
    channels resolved, formatting markers and escapes gone."""
    return plain_mrkdwn(resolve_mentions(state, text))


def _text(state: WorkspaceState, obj: Any) -> str:
    if not isinstance(obj, dict):
        return ""
    text = str(obj.get("text", ""))
    if obj.get("type") == "mrkdwn":
        return render_text(state, text)
    return resolve_mentions(state, text)


def _element(state: WorkspaceState, el: Json) -> str:
    kind = el.get("type")
    if kind == "button":
        style = f" ({el['style']})" if el.get("style") else ""
        return f"[{_text(state, el.get('text'))}]{style}"
    if kind in ("plain_text", "mrkdwn"):
        return _text(state, el)
    if kind == "image":
        return f"<image: {el.get('alt_text', '')}>"
    if kind in ("static_select", "multi_static_select", "radio_buttons", "checkboxes", "overflow"):
        options = ", ".join(_text(state, o.get("text")) for o in el.get("options", []))
        return f"[{_text(state, el.get('placeholder')) or 'choose'} ▾: {options}]"
    return f"[{kind}]"


def _rich_text(state: WorkspaceState, block: Json) -> str:
    parts: list[str] = []

    def walk(node: Any) -> None:
        if not isinstance(node, dict):
            return
        kind = node.get("type")
        if kind == "text":  # a typed "*bold*" stays in the text here; Slack styles it
            parts.append(plain_mrkdwn(str(node.get("text", ""))))
        elif kind == "user":
            parts.append("@" + state.user_name(str(node.get("user_id"))))
        elif kind == "channel":
            found = state.channels.get(str(node.get("channel_id")))
            parts.append("#" + (found.name if found else str(node.get("channel_id"))))
        elif kind == "link":
            url = str(node.get("url", ""))
            parts.append(f"{node['text']} ({url})" if node.get("text") else url)
        elif kind == "emoji":
            parts.append(f":{node.get('name', '')}:")
        elif kind == "broadcast":
            parts.append(f"@{node.get('range', 'here')}")
        for child in node.get("elements", []):
            walk(child)

    walk(block)
    return "".join(parts)


def _input_value(entry: Json | None) -> str:
    if not entry:
        return ""
    for key, value in entry.items():
        if key == "type" or value in (None, ""):
            continue
        if isinstance(value, dict):
            return str(value.get("text", {}).get("text", value.get("value", "")))
        if isinstance(value, list):
            return ", ".join(
                str(v.get("text", {}).get("text")) if isinstance(v, dict) else str(v) for v in value
            )
        return str(value)
    return ""


def _context_action(state: WorkspaceState, element: Json) -> str:
    if element.get("type") == "feedback_buttons":
        sides = (element.get("positive_button", {}), element.get("negative_button", {}))
        return " ".join(f"[{_text(state, side.get('text'))}]" for side in sides)
    return f"[{_text(state, element.get('text')) or element.get('type')}]"


def render_block(state: WorkspaceState, block: Json, values: Json | None = None) -> list[str]:
    """One block as lines of text; `values` are a view's state values for inputs."""
    kind = block.get("type")
    if kind == "header":
        return [f"== {_text(state, block.get('text'))} =="]
    if kind == "divider":
        return ["----"]
    if kind == "section":
        lines = [_text(state, block.get("text"))] if block.get("text") else []
        lines += ["  " + _text(state, f) for f in block.get("fields", [])]
        if "accessory" in block:
            lines.append("  " + _element(state, block["accessory"]))
        return lines
    if kind == "context":
        return ["  " + " · ".join(_element(state, e) for e in block.get("elements", []))]
    if kind == "actions":
        return ["  " + " ".join(_element(state, e) for e in block.get("elements", []))]
    if kind == "context_actions":
        return ["  " + " ".join(_context_action(state, e) for e in block.get("elements", []))]
    if kind == "input":
        label = _text(state, block.get("label"))
        element = block.get("element", {})
        entry = (values or {}).get(block.get("block_id", ""), {}).get(element.get("action_id"))
        optional = " (optional)" if block.get("optional") else ""
        return [f"{label}{optional}: [{_input_value(entry) or '_' * 10}]"]
    if kind == "rich_text":
        return [_rich_text(state, block)]
    if kind == "markdown":
        return [render_text(state, str(block.get("text", "")))]
    if kind == "image":
        return [f"<image: {block.get('alt_text', '')}>"]
    return [f"[{kind} block]"]


def author(state: WorkspaceState, msg: Message) -> str:
    if msg.username:
        return msg.username
    app = state.apps.get(msg.app_id or "")
    if app is not None:  # Slack shows an app's messages under the app's name
        return app.name
    return state.user_name(msg.user) if msg.user else "unknown"


TASK_MARKS = {"pending": "○", "in_progress": "◐", "complete": "●", "error": "✕"}


def render_message(
    state: WorkspaceState, msg: Message, *, indent: str = "", body: bool = True
) -> str:
    """The message under its author's name and time; `body=False`: the head and its task list
    only (a message still streaming, whose text is not all there yet)."""
    when = datetime.fromtimestamp(float(msg.ts), UTC).strftime("%H:%M:%S")
    app_tag = " APP" if msg.bot_id else ""
    head = f"{indent}{author(state, msg)}{app_tag}  {when}"
    if msg.edited:
        head += "  (edited)"
    if msg.streaming:
        head += "  (typing…)"
    lines = [head]
    if msg.plan_title:
        lines.append(f"{indent}  [plan] {msg.plan_title}")
    for task in msg.tasks.values():
        mark = TASK_MARKS.get(str(task.get("status")), "?")
        details = f" – {task['details']}" if task.get("details") else ""
        lines.append(f"{indent}  {mark} {task.get('title', '')}{details}")
    if not body:
        return "\n".join(lines)
    if msg.blocks:
        for block in msg.blocks:
            for rendered in render_block(state, block):
                # a block's text may span lines: keep every line under its message
                lines += [indent + "  " + line for line in rendered.splitlines() or [""]]
    elif msg.text:
        lines += [indent + "  " + line for line in render_text(state, msg.text).splitlines()]
    for file_id in msg.files:
        file = state.files.files.get(file_id)
        if file is not None:
            lines.append(f"{indent}  📎 {file.name} ({file.mimetype}, {file.size:,} bytes)")
    return "\n".join(lines)


def render_thread(
    state: WorkspaceState, channel_id: str, thread_ts: str, *, viewer: str | None = None
) -> str:
    """The thread: parent, then indented replies; with `viewer` (a user id) also the ephemeral
    messages only that person sees. "(no such thread)" when it is missing."""
    thread = state.thread(channel_id, thread_ts)
    if not thread:
        return "(no such thread)"
    channel = state.channels[channel_id]
    entries = [(float(m.ts), render_message(state, m, indent="    ")) for m in thread[1:]]
    for eph in state.ephemerals:
        if viewer == eph.user and eph.channel == channel_id and eph.thread_ts == thread_ts:
            as_message = Message(
                channel_id, eph.ts, eph.text, None, eph.blocks, bot_id=eph.bot_id, app_id=eph.app_id
            )
            text = render_message(state, as_message, indent="    ")
            entries.append((float(eph.ts), text + "\n      (only visible to you)"))
    out = [f"#{channel.name} thread {thread_ts}", render_message(state, thread[0])]
    return "\n".join(out + [text for _, text in sorted(entries, key=lambda e: e[0])])


def render_view(state: WorkspaceState, view: View) -> str:
    """A modal or App Home: title, blocks with filled values, errors and its buttons."""
    title = _text(state, view.spec.get("title")) or "Home"
    lines = [f"┌ {title} ┐"]
    for block in view.spec.get("blocks", []):
        for rendered in render_block(state, block, view.state_values):
            lines += ["│ " + line for line in rendered.splitlines() or [""]]
        error = view.errors.get(block.get("block_id", ""))
        if error:
            lines.append(f"│   ⚠ {error}")
    buttons = [_text(state, view.spec.get(k)) for k in ("close", "submit") if view.spec.get(k)]
    if buttons:
        lines.append("└ " + " ".join(f"[{b}]" for b in buttons))
    return "\n".join(lines)
