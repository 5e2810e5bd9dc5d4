"""Model and provider selection: one model string picks a pydantic-ai `Model`.

Model strings (the workspace default, overridable per agent):

- `offline` – the deterministic offline model (`agents/offline.py`): no network, no key.
- `openai:<model>` – OpenAI's Responses API (`POST /v1/responses`).
- `openai-chat:<model>` – OpenAI Chat Completions (`POST /v1/chat/completions`).
- `anthropic:<model>` – Anthropic's Messages API.
- `<model>@<base_url>` after `openai-chat:` – any OpenAI-compatible endpoint by base URL
  (Ollama, vLLM, LM Studio, OpenRouter, llama.cpp), e.g.
  `openai-chat:llama3.1@http://127.0.0.1:11434/v1`. These servers speak Chat Completions,
  so a base URL is only accepted on `openai-chat:` (or `openai:`, which is then treated as
  `openai-chat:` too).
- any other prefix pydantic-ai knows (`ollama:`, `openrouter:`, `groq:` …) is passed to it.

Keys are never taken as parameters or logged: the provider SDKs read them from the
environment (`OPENAI_API_KEY`, `OPENAI_BASE_URL`, `ANTHROPIC_API_KEY`, `OPENROUTER_API_KEY` …).
A base-URL endpoint uses `OPENAI_API_KEY` when it is set, and no key otherwise (local servers).
"""

from __future__ import annotations

from pydantic_ai.models import Model, infer_model

OFFLINE = "offline"


class ModelSpecError(ValueError):
    """A model string Flotilla cannot use; `str()` says what a valid one looks like."""


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


def resolve_model(spec: str) -> Model:
    """Build the pydantic-ai `Model` for a model string (see the module docstring)."""
    spec = spec.strip()
    if spec == OFFLINE:
        from agents.offline import offline_model

        return offline_model()
    prefix, sep, rest = spec.partition(":")
    if not sep or not rest:
        raise ModelSpecError(
            f"model {spec!r} is not valid: use 'offline', 'openai:<model>', "
            "'openai-chat:<model>[@<base_url>]' or 'anthropic:<model>'"
        )
    name, base_url = split_base_url(rest)
    if base_url is not None:
        if prefix not in ("openai", "openai-chat"):
            raise ModelSpecError(
                f"model {spec!r}: a base URL works with OpenAI-compatible endpoints only; "
                f"write 'openai-chat:{name}@{base_url}'"
            )
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider

        return OpenAIChatModel(name, provider=OpenAIProvider(base_url=base_url))
    try:
        return infer_model(spec)
    except Exception as exc:  # unknown provider, missing SDK or key: one clear sentence
        # provider errors here say what is missing (a package, a key name), never a key value
        raise ModelSpecError(f"model {spec!r} cannot be used: {exc}") from exc


def model_label(model: Model | str) -> str:
    """A stable, secret-free name for usage records and logs."""
    if isinstance(model, str):
        return model
    return f"{model.system}:{model.model_name}"
