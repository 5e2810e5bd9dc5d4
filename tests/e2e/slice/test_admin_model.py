"""`/flotilla model`: anyone sees the workspace's model, admins choose it (checked, audited),
and the next run uses it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pydantic_ai.models.openai import OpenAIChatModel

from tests.e2e.slice.test_admin_command import command

LOCAL_MODEL = "openai-chat:llama3.1@http://127.0.0.1:11434/v1"


async def test_admins_choose_the_workspace_model(
    start: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    async with start() as run:
        shown = await command(run, "maya", "model")
        assert "the server's default model, `offline`" in shown

        refused = await command(run, "maya", f"model {LOCAL_MODEL}")
        assert "only workspace admins" in refused

        unusable = await command(run, "alex", "model openai:gpt-4.1")
        assert "cannot be used" in unusable and "OPENAI_API_KEY" in unusable
        assert "Nothing was changed" in unusable

        chosen = await command(run, "alex", f"model {LOCAL_MODEL}")
        assert f"default model is `{LOCAL_MODEL}`" in chosen
        model = await run.service.model_for(None)  # what the next run without its own uses
        assert isinstance(model, OpenAIChatModel) and model.model_name == "llama3.1"
        assert "workspace.model" in await command(run, "alex", "audit")

        back = await command(run, "alex", "model default")
        assert "the server's default model, `offline`" in back
        assert not isinstance(await run.service.model_for(None), OpenAIChatModel)
