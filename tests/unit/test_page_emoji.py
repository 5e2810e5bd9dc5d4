"""Every emoji Flotilla puts in a message has a picture in the browser page's own emoji set
(`local_slack/static/emoji-pictures.js`), so the page never shows it as an empty box on a
machine without an emoji font; and the page knows the shortcodes of the built-in agents' icons."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import flotilla.agents
import flotilla.bot
from flotilla.agents.tools.registry import DEFAULT_AGENTS
from flotilla.bot.views.feedback import feedback_block
from flotilla.bot.views.plan_card import STATUS_ICON
from flotilla.local_slack.web_page import STATIC

# emoji blocks of Unicode (pictographs, dingbats, technical symbols such as ⏳, arrows ⬆)
EMOJI = re.compile("[\U0001f000-\U0001faff\u2600-\u27bf\u2300-\u23ff\u2b00-\u2bff]")
VS16 = "\ufe0f"


def pictures() -> set[str]:
    """The characters the page draws itself (the keys of PICTURES)."""
    source = (STATIC / "emoji-pictures.js").read_text(encoding="utf-8")
    return set(re.findall(r'^\s*"([^"]+)":', source, flags=re.MULTILINE))


def shortcodes() -> dict[str, str]:
    """The page's shortcode table: name -> emoji character (without U+FE0F)."""
    source = (STATIC / "emoji.js").read_text(encoding="utf-8")
    table = source[source.index("export const EMOJI = {") : source.index("};")]
    pairs = re.findall(r'(?:"([^"]+)"|([a-z0-9_]+)): "([^"]+)"', table)
    return {quoted or bare: char.replace(VS16, "") for quoted, bare, char in pairs}


def strings_in_messages(folder: Path) -> str:
    """Every string literal of the package's modules but docstrings and bare strings."""
    found: list[str] = []
    for path in sorted(folder.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        bare = {
            id(node.value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if id(node) not in bare:
                    found.append(node.value)
    return "\n".join(found)


def test_every_emoji_flotilla_writes_is_drawn_by_the_page() -> None:
    drawn = pictures()
    used = set()
    for package in (flotilla.bot, flotilla.agents):
        text = strings_in_messages(Path(str(package.__file__)).parent)
        used |= {char for char in EMOJI.findall(text) if char != VS16}
    assert set(STATUS_ICON.values()) <= used  # the scan sees what the plan card writes
    assert {"👍", "👎", "✅", "⚠"} <= used
    missing = sorted(used - drawn)
    assert not missing, f"add pictures for {missing} to local_slack/static/emoji-pictures.js"


def test_the_feedback_buttons_and_the_agents_icons_are_drawn() -> None:
    drawn, names = pictures(), shortcodes()
    block = feedback_block(1, 2, "researcher")
    (element,) = block["elements"]
    for side in ("positive_button", "negative_button"):
        assert element[side]["text"]["text"] in drawn
    for agent in DEFAULT_AGENTS:
        icon = str(agent["icon"]).strip(":")
        assert icon in names, f"the page does not know :{icon}:"
        assert names[icon] in drawn, f":{icon}: has no picture"
    assert names["thumbsup"] == "👍" and names["white_check_mark"] == "✅"
    assert names["hourglass_flowing_sand"] == "⏳" and names["wastebasket"] in drawn


def test_every_picture_is_an_emoji_the_page_can_name() -> None:
    named = set(shortcodes().values())
    unnamed = sorted(char for char in pictures() if char not in named)
    assert not unnamed, f"give {unnamed} a shortcode in local_slack/static/emoji.js"
