"""Shape checks against the vendored Slack specs (tests/specs): samples, documented errors."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

SPECS = Path(__file__).resolve().parents[1] / "specs"  # see tests/specs/README.md
RECORDED = SPECS / "java-slack-sdk-json-logs"
METHOD_DOCS = SPECS / "slack-api-ref" / "docs.slack.dev" / "methods"
# Errors any method can answer (docs.slack.dev "common errors"), plus ratelimited.
COMMON_ERRORS = {
    "not_authed",
    "invalid_auth",
    "missing_scope",
    "invalid_arguments",
    "ratelimited",
    "invalid_json",
    "account_inactive",
}


@cache
def recorded(relative: str) -> Any:
    return json.loads((RECORDED / relative).read_text())


@cache
def documented_errors(method: str) -> set[str]:
    doc = json.loads((METHOD_DOCS / f"{method}.json").read_text())
    return set(doc.get("errors", {})) | COMMON_ERRORS


def unknown_keys(ours: Any, sample: Any, path: str = "") -> list[str]:
    """Keys in `ours` that Slack's recorded union-of-all-fields sample does not have."""
    if isinstance(ours, dict) and isinstance(sample, dict):
        out = []
        for key, value in ours.items():
            if key not in sample:
                out.append(f"{path}/{key}")
            elif key not in ("blocks", "event_payload", "state", "attachments"):
                out += unknown_keys(value, sample[key], f"{path}/{key}")
        return out
    if isinstance(ours, list) and isinstance(sample, list) and sample and ours:
        return unknown_keys(ours[0], sample[0], path + "/0")
    return []


def merged(*samples: Any) -> Any:
    """The union of several recorded samples (e.g. message objects from different methods)."""
    out: dict[str, Any] = {}
    for sample in samples:
        for key, value in sample.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = merged(out[key], value)
            else:
                out.setdefault(key, value)
    return out
