"""App manifests: the commander's (`bot/manifest.yml`, shipped inside the package) and one
per agent with its own Slack app."""

from __future__ import annotations

import copy
from importlib.resources import files
from pathlib import Path
from typing import Any

import yaml

# inside the package, so that an installed wheel has it; the repository's top-level
# manifest.yml is a link to this file
MANIFEST_PATH = Path(str(files("flotilla.bot").joinpath("manifest.yml")))


def commander_manifest(path: Path = MANIFEST_PATH) -> dict[str, Any]:
    """The commander's manifest as data (Socket Mode)."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a YAML mapping")
    return data


def http_manifest(request_url: str, manifest: dict[str, Any] | None = None) -> dict[str, Any]:
    """The commander's manifest for HTTP mode: Socket Mode off, and `request_url` (e.g.
    `https://host/slack/events`) for events, interactivity and the slash command."""
    if not request_url.startswith("https://"):
        raise ValueError(
            f"--request-url {request_url!r}: Slack sends requests to https:// URLs only "
            "(e.g. https://flotilla.example.com/slack/events)"
        )
    data = copy.deepcopy(manifest if manifest is not None else commander_manifest())
    settings = data["settings"]
    settings["socket_mode_enabled"] = False
    settings["event_subscriptions"]["request_url"] = request_url
    settings["interactivity"]["request_url"] = request_url
    for command in data["features"].get("slash_commands", []):
        command["url"] = request_url
    return data


def agent_manifest(name: str, display_name: str, description: str = "") -> dict[str, Any]:
    """A manifest for a sub-agent's own Slack app.

    The agent's app only posts: the commander's app receives the thread's events and
    routes them, so the agent app subscribes to nothing and needs no Socket Mode.
    """
    about = description or f"Flotilla's {name} agent."
    return {
        "_metadata": {"major_version": 1, "minor_version": 1},
        "display_information": {
            "name": display_name[:35],
            "description": about[:140],
            "background_color": "#457b9d",
        },
        "features": {"bot_user": {"display_name": name[:80], "always_online": True}},
        "oauth_config": {"scopes": {"bot": ["chat:write", "files:write", "files:read"]}},
        "settings": {
            "org_deploy_enabled": False,
            "socket_mode_enabled": False,
            "token_rotation_enabled": False,
        },
    }


def to_yaml(manifest: dict[str, Any]) -> str:
    return yaml.safe_dump(manifest, sort_keys=False, allow_unicode=True, width=100)
