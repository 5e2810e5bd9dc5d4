"""Block Kit validation to Slack's published limits (Slack's `limits.json`; a copy the tests read is
in `tests/specs/`).

Each check answers a list of messages in Slack's own format,
`"<problem> [json-pointer:/blocks/0/text/text]"`; an empty list means valid.
"""

from __future__ import annotations

from typing import Any

MESSAGE_BLOCKS_MAX = 50
VIEW_BLOCKS_MAX = 100
SECTION_TEXT_MAX = 3000
SECTION_FIELDS_MAX = 10
SECTION_FIELD_TEXT_MAX = 2000
HEADER_TEXT_MAX = 150
ACTIONS_ELEMENTS_MAX = 25
CONTEXT_ELEMENTS_MAX = 10
INPUT_LABEL_MAX = 2000
INPUT_HINT_MAX = 2000
IMAGE_ALT_MAX = 2000
IMAGE_URL_MAX = 3000
MARKDOWN_BLOCK_MAX = 12000
BLOCK_ID_MAX = 255
ACTION_ID_MAX = 255
BUTTON_TEXT_MAX = 75
BUTTON_VALUE_MAX = 2000
URL_MAX = 3000
PLACEHOLDER_MAX = 150
OPTIONS_MAX = 100
OPTION_TEXT_MAX = 75
OPTION_VALUE_MAX = 150
MODAL_TITLE_MAX = 24
MODAL_BUTTON_MAX = 24
PRIVATE_METADATA_MAX = 3000
CALLBACK_ID_MAX = 255

KNOWN_BLOCKS = {
    "section",
    "header",
    "divider",
    "context",
    "actions",
    "image",
    "input",
    "rich_text",
    "markdown",
    "video",
    "file",
    "context_actions",
    "table",
}
INPUT_ONLY_ELEMENTS = {
    "plain_text_input",
    "number_input",
    "email_text_input",
    "url_text_input",
    "rich_text_input",
    "file_input",
}
INTERACTIVE_ELEMENTS = {
    "button",
    "static_select",
    "multi_static_select",
    "users_select",
    "multi_users_select",
    "conversations_select",
    "multi_conversations_select",
    "channels_select",
    "multi_channels_select",
    "external_select",
    "multi_external_select",
    "overflow",
    "datepicker",
    "timepicker",
    "datetimepicker",
    "checkboxes",
    "radio_buttons",
    *INPUT_ONLY_ELEMENTS,
}

Errors = list[str]
Json = dict[str, Any]


def _err(problem: str, pointer: str) -> str:
    return f"{problem} [json-pointer:{pointer}]"


def _text(obj: Any, ptr: str, max_len: int, *, plain_only: bool = False) -> Errors:
    if not isinstance(obj, dict):
        return [_err("must provide an object", ptr)]
    kinds = ("plain_text",) if plain_only else ("plain_text", "mrkdwn")
    if obj.get("type") not in kinds:
        return [_err(f"must be one of {' or '.join(kinds)}", ptr + "/type")]
    text = obj.get("text")
    if not isinstance(text, str) or not text:
        return [_err("must be more than 0 characters", ptr + "/text")]
    if len(text) > max_len:
        return [_err(f"must be less than {max_len + 1} characters", ptr + "/text")]
    return []


def _max_len(obj: Json, key: str, ptr: str, max_len: int) -> Errors:
    value = obj.get(key)
    if value is not None and (not isinstance(value, str) or len(value) > max_len):
        return [_err(f"must be less than {max_len + 1} characters", f"{ptr}/{key}")]
    return []


def _options(options: Any, ptr: str) -> Errors:
    if not isinstance(options, list) or not options or len(options) > OPTIONS_MAX:
        return [_err(f"must provide between 1 and {OPTIONS_MAX} items", ptr)]
    errors: Errors = []
    for i, opt in enumerate(options):
        if not isinstance(opt, dict):
            errors.append(_err("must provide an object", f"{ptr}/{i}"))
            continue
        errors += _text(opt.get("text"), f"{ptr}/{i}/text", OPTION_TEXT_MAX)
        errors += _max_len(opt, "value", f"{ptr}/{i}", OPTION_VALUE_MAX)
    return errors


def _button(el: Json, ptr: str) -> Errors:
    errors = _text(el.get("text"), ptr + "/text", BUTTON_TEXT_MAX, plain_only=True)
    errors += _max_len(el, "value", ptr, BUTTON_VALUE_MAX)
    errors += _max_len(el, "url", ptr, URL_MAX)
    if el.get("style") not in (None, "primary", "danger"):
        errors.append(_err("must be one of primary or danger", ptr + "/style"))
    return errors


def check_element(el: Any, ptr: str, *, in_input: bool = False) -> Errors:
    """Errors of one block element (button, select, input, image, text object…)."""
    if not isinstance(el, dict) or not isinstance(el.get("type"), str):
        return [_err("must provide an object with a type", ptr)]
    kind = el["type"]
    errors = _max_len(el, "action_id", ptr, ACTION_ID_MAX)
    if kind in INPUT_ONLY_ELEMENTS and not in_input:
        return [_err(f"{kind} is only allowed in input blocks", ptr + "/type")]
    if kind == "button":
        errors += _button(el, ptr)
    elif kind in ("static_select", "multi_static_select", "checkboxes", "radio_buttons"):
        if "option_groups" not in el:
            errors += _options(el.get("options"), ptr + "/options")
    elif kind == "overflow":
        opts = el.get("options")
        if not isinstance(opts, list) or not 1 <= len(opts) <= 5:
            errors.append(_err("must provide between 1 and 5 items", ptr + "/options"))
    elif kind == "image":
        errors += _max_len(el, "image_url", ptr, IMAGE_URL_MAX)
        errors += _max_len(el, "alt_text", ptr, IMAGE_ALT_MAX)
    elif kind in ("plain_text", "mrkdwn"):
        errors += _text(el, ptr, SECTION_TEXT_MAX)
    elif kind not in INTERACTIVE_ELEMENTS:
        errors.append(_err(f"unsupported type: {kind}", ptr + "/type"))
    if "placeholder" in el:
        errors += _text(el["placeholder"], ptr + "/placeholder", PLACEHOLDER_MAX, plain_only=True)
    return errors


def _elements(block: Json, ptr: str, max_items: int) -> Errors:
    elements = block.get("elements")
    if not isinstance(elements, list) or not elements:
        return [_err("must provide at least 1 item", ptr + "/elements")]
    if len(elements) > max_items:
        return [_err(f"must be less than {max_items + 1} items", ptr + "/elements")]
    errors: Errors = []
    action_ids: set[str] = set()
    for i, el in enumerate(elements):
        errors += check_element(el, f"{ptr}/elements/{i}")
        aid = el.get("action_id") if isinstance(el, dict) else None
        if aid is not None and aid in action_ids:
            errors.append(_err("action_id must be unique in a block", f"{ptr}/elements/{i}"))
        action_ids.add(aid) if aid else None
    return errors


def _section(block: Json, ptr: str) -> Errors:
    errors: Errors = []
    if "text" not in block and "fields" not in block:
        return [_err("must provide either text or fields", ptr)]
    if "text" in block:
        errors += _text(block["text"], ptr + "/text", SECTION_TEXT_MAX)
    fields = block.get("fields")
    if fields is not None:
        if not isinstance(fields, list) or len(fields) > SECTION_FIELDS_MAX:
            errors.append(
                _err(f"must be less than {SECTION_FIELDS_MAX + 1} items", ptr + "/fields")
            )
        else:
            for i, f in enumerate(fields):
                errors += _text(f, f"{ptr}/fields/{i}", SECTION_FIELD_TEXT_MAX)
    if "accessory" in block:
        errors += check_element(block["accessory"], ptr + "/accessory")
    return errors


def _input(block: Json, ptr: str) -> Errors:
    errors = _text(block.get("label"), ptr + "/label", INPUT_LABEL_MAX, plain_only=True)
    if "hint" in block:
        errors += _text(block["hint"], ptr + "/hint", INPUT_HINT_MAX, plain_only=True)
    if "element" not in block:
        return errors + [_err("missing required field: element", ptr)]
    return errors + check_element(block["element"], ptr + "/element", in_input=True)


CONTEXT_ACTIONS_MAX = 5
FEEDBACK_LABEL_MAX = 75


def _context_actions(block: Json, ptr: str) -> Errors:
    """Up to 5 feedback buttons or icon buttons; each feedback button with text and value."""
    elements = block.get("elements")
    if not isinstance(elements, list) or not elements:
        return [_err("missing required field: elements", ptr)]
    if len(elements) > CONTEXT_ACTIONS_MAX:
        return [_err(f"must be less than {CONTEXT_ACTIONS_MAX + 1} items", ptr + "/elements")]
    errors: Errors = []
    for i, element in enumerate(elements):
        where = f"{ptr}/elements/{i}"
        kind = element.get("type") if isinstance(element, dict) else None
        if kind not in ("feedback_buttons", "icon_button"):
            errors.append(_err(f"unsupported type: {kind}", where + "/type"))
            continue
        errors += _max_len(element, "action_id", where, ACTION_ID_MAX)
        if kind != "feedback_buttons":
            continue
        for side in ("positive_button", "negative_button"):
            button = element.get(side)
            if not isinstance(button, dict) or "value" not in button:
                errors.append(_err(f"missing required field: {side}", where))
                continue
            errors += _text(
                button.get("text"), f"{where}/{side}/text", BUTTON_TEXT_MAX, plain_only=True
            )
            errors += _max_len(button, "value", f"{where}/{side}", BUTTON_VALUE_MAX)
            errors += _max_len(button, "accessibility_label", f"{where}/{side}", FEEDBACK_LABEL_MAX)
    return errors


def check_block(block: Any, ptr: str, *, surface: str) -> Errors:
    """Errors of one layout block on a `message`, `modal` or `home` surface."""
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        return [_err("must provide an object with a type", ptr)]
    kind = block["type"]
    if kind not in KNOWN_BLOCKS:
        return [_err(f"unsupported type: {kind}", ptr + "/type")]
    errors = _max_len(block, "block_id", ptr, BLOCK_ID_MAX)
    if kind == "section":
        errors += _section(block, ptr)
    elif kind == "header":
        errors += _text(block.get("text"), ptr + "/text", HEADER_TEXT_MAX, plain_only=True)
    elif kind == "actions":
        errors += _elements(block, ptr, ACTIONS_ELEMENTS_MAX)
    elif kind == "context":
        errors += _elements(block, ptr, CONTEXT_ELEMENTS_MAX)
    elif kind == "image":
        if not block.get("alt_text"):
            errors.append(_err("missing required field: alt_text", ptr))
        errors += _max_len(block, "image_url", ptr, IMAGE_URL_MAX)
        errors += _max_len(block, "alt_text", ptr, IMAGE_ALT_MAX)
    elif kind == "markdown":
        errors += _max_len(block, "text", ptr, MARKDOWN_BLOCK_MAX)
    elif kind == "context_actions":
        errors += _context_actions(block, ptr)
    elif kind == "input":
        errors += _input(block, ptr)
    return errors


def check_blocks(blocks: Any, *, surface: str = "message", ptr: str = "/blocks") -> Errors:
    """Errors of a whole `blocks` array on a surface (message: 50 blocks, views: 100)."""
    if not isinstance(blocks, list):
        return [_err("must provide an array", ptr)]
    limit = MESSAGE_BLOCKS_MAX if surface == "message" else VIEW_BLOCKS_MAX
    if len(blocks) > limit:
        return [_err(f"must be less than {limit + 1} items", ptr)]
    errors: Errors = []
    seen: set[str] = set()
    for i, block in enumerate(blocks):
        errors += check_block(block, f"{ptr}/{i}", surface=surface)
        bid = block.get("block_id") if isinstance(block, dict) else None
        if isinstance(bid, str):
            if bid in seen:
                errors.append(_err(f"duplicate block_id: {bid}", f"{ptr}/{i}/block_id"))
            seen.add(bid)
    return errors


def check_view(view: Any) -> Errors:
    """Errors of a modal or home view object, pointers rooted at `/view`."""
    if not isinstance(view, dict):
        return [_err("must provide an object", "/view")]
    kind = view.get("type")
    if kind not in ("modal", "home"):
        return [_err("must be one of modal or home", "/view/type")]
    errors: Errors = []
    if kind == "modal":
        errors += _text(view.get("title"), "/view/title", MODAL_TITLE_MAX, plain_only=True)
        for key in ("submit", "close"):
            if key in view:
                errors += _text(view[key], f"/view/{key}", MODAL_BUTTON_MAX, plain_only=True)
        blocks = view.get("blocks", [])
        has_input = isinstance(blocks, list) and any(
            isinstance(b, dict) and b.get("type") == "input" for b in blocks
        )
        if has_input and "submit" not in view:
            errors.append(_err("submit is required when an input block is present", "/view"))
    errors += _max_len(view, "private_metadata", "/view", PRIVATE_METADATA_MAX)
    errors += _max_len(view, "callback_id", "/view", CALLBACK_ID_MAX)
    return errors + check_blocks(view.get("blocks", []), surface=str(kind), ptr="/view/blocks")
