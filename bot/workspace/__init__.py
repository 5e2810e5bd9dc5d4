"""The local Slack-compatible workspace: Web API, Events API, interactivity and slash commands
on loopback, faithful enough that the real Bolt app runs against it unchanged."""

from bot.workspace.driver import Driver
from bot.workspace.state import InstalledApp, Message, Person, View
from bot.workspace.workspace import LocalWorkspace

__all__ = ["Driver", "InstalledApp", "LocalWorkspace", "Message", "Person", "View"]
