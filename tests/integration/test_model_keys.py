"""Provider keys from `.env` reach the provider; `flotilla check` tells a wrong key, a
wrong model name and an unreachable base URL apart (against the fake OpenAI server)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from pydantic_ai import models as pydantic_ai_models
from pydantic_ai.models.anthropic import AnthropicModel

from flotilla.agents.running.models import resolve_model
from flotilla.bot.check import check_model
from flotilla.bot.serve import options_from
from flotilla.bot.settings import load_settings
from tests.fakes.openai_server import FakeOpenAI

KEY = "sk-from-dotenv-0123456789"


@pytest.fixture
async def server(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> AsyncIterator[FakeOpenAI]:
    monkeypatch.chdir(tmp_path)  # the .env of each test is the only one around
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "FLOTILLA_MODEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(pydantic_ai_models, "ALLOW_MODEL_REQUESTS", True)
    fake = FakeOpenAI(api_keys={KEY}, models={"gpt-test"})
    await fake.start()
    yield fake
    await fake.close()


def dotenv(folder: Path, **values: str) -> None:
    (folder / ".env").write_text("".join(f"{k}={v}\n" for k, v in values.items()))


@pytest.mark.parametrize(
    ("model", "path"), [("openai-chat", "/v1/chat/completions"), ("openai", "/v1/responses")]
)
async def test_keys_in_dotenv_are_passed_to_the_provider(
    server: FakeOpenAI, tmp_path: Path, model: str, path: str
) -> None:
    dotenv(
        tmp_path,
        OPENAI_API_KEY=KEY,
        OPENAI_BASE_URL=server.base_url,
        FLOTILLA_MODEL=f"{model}:gpt-test",
    )
    settings = load_settings()
    [finding] = await check_model(settings)
    assert finding.level == "ok", finding.sentence
    assert server.requests[-1].path == path
    assert server.requests[-1].headers["Authorization"] == f"Bearer {KEY}"
    # the service gets the same keys through its options
    assert options_from(settings).provider_keys == settings.provider_keys()


async def test_an_anthropic_key_in_dotenv_reaches_its_client(
    server: FakeOpenAI, tmp_path: Path
) -> None:
    dotenv(tmp_path, ANTHROPIC_API_KEY="sk-ant-from-dotenv")
    model = resolve_model("anthropic:claude-test", load_settings().provider_keys())
    assert isinstance(model, AnthropicModel)
    assert getattr(model.client, "api_key", None) == "sk-ant-from-dotenv"


@pytest.mark.parametrize(
    ("key", "model", "expected", "fix"),
    [
        ("sk-wrong", "gpt-test", "HTTP 401", "check OPENAI_API_KEY"),
        (KEY, "gpt-typo", "HTTP 404", "check FLOTILLA_MODEL"),
    ],
)
async def test_check_tells_a_wrong_key_from_a_wrong_model(
    server: FakeOpenAI, tmp_path: Path, key: str, model: str, expected: str, fix: str
) -> None:
    dotenv(
        tmp_path,
        OPENAI_API_KEY=key,
        OPENAI_BASE_URL=server.base_url,
        FLOTILLA_MODEL=f"openai-chat:{model}",
    )
    [finding] = await check_model(load_settings())
    assert finding.level == "error"
    assert expected in finding.sentence and fix in finding.sentence
    assert model in finding.sentence and key not in finding.sentence
