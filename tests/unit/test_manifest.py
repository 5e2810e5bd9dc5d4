"""manifest.yml and the agent manifests validate against Slack's published schema."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from flotilla.bot.cli import main
from flotilla.bot.manifest import agent_manifest, commander_manifest, http_manifest

SPECS = Path(__file__).resolve().parents[1] / "specs"  # vendored: see tests/specs/README.md
SCHEMA = SPECS / "manifest-schema/schemas/manifest.schema.1.0.0.json"


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft7Validator:
    schema = json.loads(SCHEMA.read_text())
    return jsonschema.Draft7Validator(schema)


def errors(validator: jsonschema.Draft7Validator, manifest: dict[str, Any]) -> list[str]:
    return [f"{list(e.path)}: {e.message}" for e in validator.iter_errors(manifest)]


def test_commander_manifest_is_valid(validator: jsonschema.Draft7Validator) -> None:
    manifest = commander_manifest()
    assert errors(validator, manifest) == []
    settings = manifest["settings"]
    assert settings["socket_mode_enabled"] is True
    assert settings["interactivity"]["is_enabled"] is True
    # Flotilla handles exactly these events: Bolt answers 404 to others and Slack retries.
    assert set(settings["event_subscriptions"]["bot_events"]) == {
        "app_mention",
        "message.channels",
        "message.groups",
        "app_home_opened",
    }
    scopes = set(manifest["oauth_config"]["scopes"]["bot"])
    assert {"chat:write", "chat:write.customize", "metadata.message:read", "commands"} <= scopes
    assert [c["command"] for c in manifest["features"]["slash_commands"]] == ["/flotilla"]


def test_schema_catches_a_broken_manifest(validator: jsonschema.Draft7Validator) -> None:
    """The validation can fail: a wrong type and an unknown key are reported."""
    manifest = commander_manifest()
    manifest["settings"]["socket_mode_enabled"] = "yes"
    manifest["display_information"]["colour"] = "red"
    assert len(errors(validator, manifest)) == 2


def test_agent_manifest_is_valid(validator: jsonschema.Draft7Validator) -> None:
    manifest = agent_manifest("researcher", "Researcher", "Finds facts with sources.")
    assert errors(validator, manifest) == []
    assert manifest["oauth_config"]["scopes"]["bot"] == ["chat:write", "files:write", "files:read"]
    assert "event_subscriptions" not in manifest["settings"]


def test_manifest_command_prints_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["manifest", "--agent", "writer", "--description", "Writes drafts."]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["display_information"]["name"] == "writer"
    assert printed["display_information"]["description"] == "Writes drafts."

    assert main(["manifest"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == commander_manifest()


def test_http_manifest_is_valid(validator: jsonschema.Draft7Validator) -> None:
    url = "https://flotilla.example.com/slack/events"
    manifest = http_manifest(url)
    assert errors(validator, manifest) == []
    settings = manifest["settings"]
    assert settings["socket_mode_enabled"] is False
    assert settings["event_subscriptions"]["request_url"] == url
    assert settings["interactivity"]["request_url"] == url
    assert manifest["features"]["slash_commands"][0]["url"] == url
    assert commander_manifest()["settings"]["socket_mode_enabled"] is True  # a copy was changed


def test_the_manifest_ships_inside_the_package() -> None:
    from importlib.resources import files

    assert files("bot").joinpath("manifest.yml").is_file()
