"""App manifests: the commander's (manifest.yml) and one per agent with its own Slack app."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

MANIFEST_PATH = Path(__file__).resolve().parent.parent / "manifest.yml"


def commander_manifest(path: Path = MANIFEST_PATH) -> dict[str, Any]:
    """The commander's manifest as data."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path} is not a YAML mapping")
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
        "oauth_config": {"scopes": {"bot": ["chat:write"]}},
        "settings": {
            "org_deploy_enabled": False,
            "socket_mode_enabled": False,
            "token_rotation_enabled": False,
        },
    }


def to_yaml(manifest: dict[str, Any]) -> str:
    return yaml.safe_dump(manifest, sort_keys=False, allow_unicode=True, width=100)
