"""Model strings: provider selection, base URLs, precedence, and no secrets in errors."""

from __future__ import annotations

import pytest
from pydantic_ai.models.anthropic import AnthropicModel
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel

from flotilla.agents.running.models import (
    ModelSpecError,
    choose_model,
    model_label,
    resolve_model,
    split_base_url,
)


@pytest.fixture(autouse=True)
def keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret-value")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def test_providers_by_prefix() -> None:
    assert isinstance(resolve_model("openai:gpt-4.1"), OpenAIResponsesModel)
    assert isinstance(resolve_model("openai-chat:gpt-4.1"), OpenAIChatModel)
    assert isinstance(resolve_model("anthropic:claude-sonnet-4-5"), AnthropicModel)
    offline = resolve_model("offline")
    assert isinstance(offline, FunctionModel) and model_label(offline) == "function:offline"


def test_an_openai_compatible_endpoint_by_base_url() -> None:
    model = resolve_model("openai-chat:llama3.1@http://127.0.0.1:11434/v1")
    assert isinstance(model, OpenAIChatModel) and model.model_name == "llama3.1"
    assert str(model.client.base_url).startswith("http://127.0.0.1:11434/v1")
    assert split_base_url("gpt@x") == ("gpt@x", None)  # an @ that is not a URL stays in the name


def test_invalid_strings_are_clear_sentences_without_keys() -> None:
    for bad in ("gpt-4", "anthropic:claude@http://127.0.0.1:1/v1", "nosuchprovider:model"):
        with pytest.raises(ModelSpecError) as raised:
            resolve_model(bad)
        assert "secret" not in str(raised.value)


def test_agent_override_then_workspace_default_then_fallback() -> None:
    assert choose_model("anthropic:c", "openai:g", "offline") == "anthropic:c"
    assert choose_model(None, "openai:g", "offline") == "openai:g"
    assert choose_model(" ", None, "offline") == "offline"
    assert choose_model(None, None, "") == "offline"
