"""Which agent a person's message in a plan's thread is addressed to, if any (pure).

A person addresses an agent by mentioning its own Slack app (`<@U…>`), or – for an agent
posting as a persona, which has no user to mention – by starting with its name or display
name (`@writer …`, `writer: …`, `Writer, …`). Being addressed and being dispatched are the
same thing: the commander adds the request as a step for that agent.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

_MENTION = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^>]*)?>")


@dataclass(frozen=True, slots=True)
class Addressee:
    """An agent people can address: its name, display name and own app's user, if any."""

    name: str
    display_name: str
    bot_user_id: str | None = None


def addressed_agent(text: str, agents: Sequence[Addressee]) -> str | None:
    """The name of the agent `text` is addressed to, or None."""
    by_user = {a.bot_user_id: a.name for a in agents if a.bot_user_id}
    for user in _MENTION.findall(text):
        if user in by_user:
            return by_user[user]
    start = text.lstrip().lower()
    for agent in agents:
        for name in {agent.name.lower(), agent.display_name.lower()} - {""}:
            if re.match(rf"@?{re.escape(name)}(?:[\s,:!]|$)", start) and (
                start.startswith("@") or re.match(rf"{re.escape(name)}\s*[,:]", start)
            ):
                return agent.name
    return None


def without_address(text: str) -> str:
    """The request itself: the message without its leading mention or name."""
    text = _MENTION.sub("", text, count=1).strip()
    return re.sub(r"^@?[\w -]{1,40}?[,:]\s+", "", text, count=1) if ":" in text[:42] else text
