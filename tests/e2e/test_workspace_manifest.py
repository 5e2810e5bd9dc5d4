"""Installing apps from manifests: Slack's published example and Flotilla's own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from flotilla.local_slack import LocalWorkspace
from tests.e2e.conftest import client_for
from tests.e2e.spec_shapes import SPECS

EXAMPLE = SPECS / "manifest-schema" / "tests" / "manifests" / "v1" / "manifest.valid.json"
FLOTILLA_MANIFEST = Path(__file__).resolve().parents[2] / "manifest.yml"


async def test_install_from_slacks_example_manifest(workspace: LocalWorkspace) -> None:
    app = workspace.install_manifest(json.loads(EXAMPLE.read_text()))
    assert app.name == "Bolt Template App" and app.socket_mode and app.app_token
    assert app.scopes == {"channels:history", "chat:write", "commands"}
    assert app.bot_events == {"app_home_opened", "message.channels"}
    assert set(app.commands) == {"/sample-command"}
    assert (await client_for(workspace, app.bot_token).auth_test())["app_name"] == app.name


async def test_install_flotillas_manifest_in_http_mode(workspace: LocalWorkspace) -> None:
    manifest = yaml.safe_load(FLOTILLA_MANIFEST.read_text())
    url = "http://127.0.0.1:9/slack/events"
    app = workspace.install_manifest(manifest, request_url=url, socket_mode=False)
    assert not app.socket_mode and app.request_url == url
    assert "chat:write.customize" in app.scopes and "app_mention" in app.bot_events
    assert all(target == url for target in app.commands.values()) and app.commands


async def test_an_event_subscription_needs_its_scope(workspace: LocalWorkspace) -> None:
    with pytest.raises(ValueError, match="message.channels event needs the channels:history"):
        workspace.install_app("Deaf", scopes=["chat:write"], bot_events=["message.channels"])
    quiet = workspace.install_app("Quiet", scopes=["chat:write"])  # defaults follow the scopes
    assert quiet.bot_events == {"app_home_opened"}
