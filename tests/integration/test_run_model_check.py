"""`flotilla run` checks the model before it serves: a model that cannot work (a bare model
name, an unknown provider, no key, a wrong key, an unreachable endpoint) stops the start with
one sentence and its own exit code, unless errors are allowed. The advice fits the provider.
Nothing leaves loopback: a fake OpenAI server and closed loopback ports."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from pydantic_ai import models as pydantic_ai_models

from flotilla.bot.check import check_model
from flotilla.bot.manifest import commander_manifest
from flotilla.bot.serve import run
from flotilla.bot.settings import ModelUnavailable, Settings
from flotilla.local_slack import LocalWorkspace
from tests.fakes.openai_server import FakeOpenAI

PROVIDER_ENV = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")


def closed_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(autouse=True)
def no_provider_settings(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in PROVIDER_ENV:  # the SDKs read these themselves
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(pydantic_ai_models, "ALLOW_MODEL_REQUESTS", True)  # loopback only
    yield


@pytest.fixture
async def workspace() -> AsyncIterator[LocalWorkspace]:
    ws = LocalWorkspace()
    await ws.start("127.0.0.1", 0)
    yield ws
    await ws.stop()


def settings_for(ws: LocalWorkspace, folder: Path, **values: object) -> Settings:
    """Slack and the database are fine; only the model is in question."""
    app = ws.install_manifest(commander_manifest(), socket_mode=False)
    return Settings.model_validate(
        {
            "SLACK_API_URL": ws.api_url,
            "SLACK_BOT_TOKEN": app.bot_token,
            "SLACK_SIGNING_SECRET": app.signing_secret,
            "FLOTILLA_DATABASE_URL": f"sqlite+aiosqlite:///{folder / 'flotilla.db'}",
            "FLOTILLA_HTTP_HOST": "127.0.0.1",
            "FLOTILLA_HTTP_PORT": closed_port(),
            **values,
        }
    )


@pytest.mark.parametrize(
    ("model", "says"),
    [
        ("gpt-4o", "did you mean 'openai:gpt-4o'?"),
        ("foo:bar", "model 'foo:bar' cannot be used"),
        ("openai:gpt-4o", "needs an API key: set OPENAI_API_KEY"),
    ],
)
async def test_a_model_that_cannot_work_stops_the_start(
    workspace: LocalWorkspace, tmp_path: Path, model: str, says: str
) -> None:
    settings = settings_for(workspace, tmp_path, FLOTILLA_MODEL=model)
    with pytest.raises(ModelUnavailable) as refused:
        await run(settings)
    sentence = str(refused.value)
    assert sentence.startswith("cannot start: the model does not work: ") and says in sentence
    assert "--allow-model-errors" in sentence and "FLOTILLA_ALLOW_MODEL_ERRORS" in sentence
    assert refused.value.exit_code == 6


async def test_a_wrong_key_stops_the_start_and_allowed_errors_serve_anyway(
    workspace: LocalWorkspace, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeOpenAI(api_keys={"sk-the-right-one"})
    await fake.start()
    try:
        values = {
            "FLOTILLA_MODEL": "openai-chat:gpt-test",
            "OPENAI_BASE_URL": fake.base_url,
            "OPENAI_API_KEY": "sk-a-wrong-one",
        }
        with pytest.raises(ModelUnavailable) as refused:
            await run(settings_for(workspace, tmp_path, **values))
        assert "HTTP 401" in str(refused.value) and "check OPENAI_API_KEY" in str(refused.value)
        assert "sk-a-wrong-one" not in str(refused.value)

        allowed = settings_for(workspace, tmp_path, FLOTILLA_ALLOW_MODEL_ERRORS="true", **values)
        ready, stop = asyncio.Event(), asyncio.Event()
        serving = asyncio.create_task(run(allowed, ready=ready, stop=stop))
        await asyncio.wait_for(ready.wait(), 60)  # it serves, with a loud ERROR line
        stop.set()
        await asyncio.wait_for(serving, 60)
        [error] = [r for r in caplog.records if r.levelname == "ERROR"]
        assert "the model does not work" in error.getMessage()
        assert "HTTP 401" in error.getMessage() and "Serving anyway" in error.getMessage()
    finally:
        await fake.close()


@pytest.mark.parametrize(
    ("model", "values", "advice"),
    [
        (
            "anthropic:claude-test",
            {"ANTHROPIC_API_KEY": "sk-ant-test"},
            "that Anthropic's API is reachable",
        ),
        ("openai:gpt-test", {"OPENAI_API_KEY": "sk-test"}, "OPENAI_BASE_URL"),
    ],
)
async def test_an_unreachable_model_gets_the_advice_of_its_provider(
    monkeypatch: pytest.MonkeyPatch, model: str, values: dict[str, str], advice: str
) -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    if model.startswith("anthropic:"):
        monkeypatch.setenv("ANTHROPIC_BASE_URL", url)  # read by Anthropic's own SDK
    else:
        values = {**values, "OPENAI_BASE_URL": f"{url}/v1"}
    [finding] = await check_model(Settings.model_validate({"FLOTILLA_MODEL": model, **values}))
    assert finding.level == "error" and "could not connect" in finding.sentence
    assert advice in finding.sentence
    if model.startswith("anthropic:"):
        assert "OPENAI" not in finding.sentence


async def test_an_unreachable_model_is_an_outage_and_the_start_goes_on(
    workspace: LocalWorkspace, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # a restart during a model outage must not take the app down: runs retry until it answers
    values = {
        "FLOTILLA_MODEL": "openai-chat:gpt-test",
        "OPENAI_API_KEY": "sk-test",
        "OPENAI_BASE_URL": f"http://127.0.0.1:{closed_port()}/v1",
    }
    ready, stop = asyncio.Event(), asyncio.Event()
    serving = asyncio.create_task(
        run(settings_for(workspace, tmp_path, **values), ready=ready, stop=stop)
    )
    await asyncio.wait_for(ready.wait(), 60)
    stop.set()
    await asyncio.wait_for(serving, 60)
    [error] = [r for r in caplog.records if r.levelname == "ERROR"]
    assert "the model does not answer" in error.getMessage()
    assert "could not connect" in error.getMessage()
