"""Model and provider selection: one model string picks a pydantic-ai `Model`.

Model strings (the workspace default, overridable per agent):

- `offline` – the deterministic offline model (`agents/running/offline.py`): no network, no key.
- `openai:<model>` – OpenAI's Responses API (`POST /v1/responses`).
- `openai-chat:<model>` – OpenAI Chat Completions (`POST /v1/chat/completions`).
- `anthropic:<model>` – Anthropic's Messages API.
- `<model>@<base_url>` after `openai-chat:` – any OpenAI-compatible endpoint by base URL
  (Ollama, vLLM, LM Studio, OpenRouter, llama.cpp), e.g.
  `openai-chat:llama3.1@http://127.0.0.1:11434/v1`. These servers speak Chat Completions,
  so a base URL is only accepted on `openai-chat:` (or `openai:`, which is then treated as
  `openai-chat:` too).
- any other prefix pydantic-ai knows (`ollama:`, `openrouter:`, `groq:` …) is passed to it.

Keys are passed explicitly (`ProviderKeys`, filled from the settings in `bot/`, which read
the environment and `.env`), never logged. A key left out falls back to what the provider
SDK reads from the environment. A base-URL endpoint uses the OpenAI key when there is one,
and no key otherwise (local servers). Other prefixes (`openrouter:` …) read their own
environment variables, as pydantic-ai does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from pydantic_ai.models import Model, infer_model

OFFLINE = "offline"


class ModelSpecError(ValueError):
    """A model string Flotilla cannot use; `str()` says what a valid one looks like."""


@dataclass(frozen=True, slots=True)
class ProviderKeys:
    """API keys and the OpenAI base URL, handed to the providers explicitly (never printed)."""

    openai_api_key: str | None = field(default=None, repr=False)
    openai_base_url: str | None = None
    anthropic_api_key: str | None = field(default=None, repr=False)

    def openai_key(self) -> str | None:
        """The OpenAI key to use: the given one, else the environment's (the SDK's default)."""
        return self.openai_api_key or os.environ.get("OPENAI_API_KEY")

    def anthropic_key(self) -> str | None:
        """The Anthropic key to use: the given one, else the environment's."""
        return self.anthropic_api_key or os.environ.get("ANTHROPIC_API_KEY")


NO_KEYS = ProviderKeys()


def choose_model(agent_model: str | None, workspace_default: str | None, fallback: str) -> str:
    """The model string for a run: the agent's override, else the workspace's, else `fallback`."""
    for candidate in (agent_model, workspace_default, fallback):
        if candidate and candidate.strip():
            return candidate.strip()
    return OFFLINE


def split_base_url(spec: str) -> tuple[str, str | None]:
    """`"openai-chat:m@http://h/v1"` -> `("openai-chat:m", "http://h/v1")`; no `@http` -> None."""
    name, sep, url = spec.rpartition("@")
    if sep and url.startswith(("http://", "https://")):
        return name, url
    return spec, None


def resolve_model(spec: str, keys: ProviderKeys = NO_KEYS) -> Model:
    """Build the pydantic-ai `Model` for a model string (see the module docstring).

    Raises `ModelSpecError` (a sentence naming the setting to fix) for an invalid string or
    a provider whose key is missing.
    """
    spec = spec.strip()
    if spec == OFFLINE:
        from flotilla.agents.running.offline import offline_model

        return offline_model()
    prefix, sep, rest = spec.partition(":")
    if not sep or not rest:
        raise ModelSpecError(
            f"model {spec!r} is not valid: {_did_you_mean(spec)}use 'offline', "
            "'openai:<model>', 'openai-chat:<model>[@<base_url>]' or 'anthropic:<model>'"
        )
    name, base_url = split_base_url(rest)
    if base_url is not None and prefix not in ("openai", "openai-chat"):
        raise ModelSpecError(
            f"model {spec!r}: a base URL works with OpenAI-compatible endpoints only; "
            f"write 'openai-chat:{name}@{base_url}'"
        )
    if prefix in ("openai", "openai-chat"):
        return _openai_model(spec, prefix, name, base_url, keys)
    if prefix == "anthropic":
        return _anthropic_model(spec, name, keys)
    try:
        return infer_model(spec)
    except Exception as exc:  # unknown provider, missing SDK or key: one clear sentence
        # provider errors here say what is missing (a package, a key name), never a key value
        raise ModelSpecError(f"model {spec!r} cannot be used: {exc}") from exc


def _did_you_mean(spec: str) -> str:
    """`gpt-4o` -> "did you mean 'openai:gpt-4o'? ": a model name without its provider."""
    name = spec.lower()
    if name.startswith(("gpt-", "o1", "o3", "o4", "chatgpt-")):
        return f"did you mean 'openai:{spec}'? "
    if name.startswith("claude"):
        return f"did you mean 'anthropic:{spec}'? "
    return ""


def _openai_model(
    spec: str, prefix: str, name: str, base_url: str | None, keys: ProviderKeys
) -> Model:
    from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
    from pydantic_ai.providers.openai import OpenAIProvider

    key = keys.openai_key()
    if base_url is not None:  # a local or compatible server: a key only when there is one
        provider = OpenAIProvider(base_url=base_url, api_key=key or "not-needed")
        return OpenAIChatModel(name, provider=provider)
    url = keys.openai_base_url or os.environ.get("OPENAI_BASE_URL")
    if key is None and url is None:
        raise ModelSpecError(
            f"model {spec!r} needs an API key: set OPENAI_API_KEY (in the environment or .env)"
        )
    provider = OpenAIProvider(base_url=url, api_key=key or "not-needed")
    if prefix == "openai-chat":
        return OpenAIChatModel(name, provider=provider)
    return OpenAIResponsesModel(name, provider=provider)


def _anthropic_model(spec: str, name: str, keys: ProviderKeys) -> Model:
    key = keys.anthropic_key()
    if key is None:
        raise ModelSpecError(
            f"model {spec!r} needs an API key: set ANTHROPIC_API_KEY (in the environment or .env)"
        )
    try:
        from pydantic_ai.models.anthropic import AnthropicModel
        from pydantic_ai.providers.anthropic import AnthropicProvider
    except ImportError as exc:  # the anthropic extra is not installed
        raise ModelSpecError(f"model {spec!r} cannot be used: {exc}") from exc
    return AnthropicModel(name, provider=AnthropicProvider(api_key=key))


def model_label(model: Model | str) -> str:
    """A stable, secret-free name for usage records and logs."""
    if isinstance(model, str):
        return model
    return f"{model.system}:{model.model_name}"
