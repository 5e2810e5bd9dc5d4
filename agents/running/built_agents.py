"""Built pydantic-ai agents, kept per agent configuration instead of built for every run.

Building an agent (its tools' schemas, its instructions, its toolsets) costs more than a
zero-latency run's own bookkeeping, and the same configuration is run over and over: every
step of an agent, every commander turn. A built agent holds no per-run state (the run's
deps, history and model are given to each run), so one is shared by every run of its
configuration.

The key is the whole configuration an agent is built from – for a sub-agent its
`AgentSpec` (name, prompt, tools, MCP servers, …), for the commander the roster it plans
with – so an admin's edit makes a new key, and the next run builds the edited agent; the
old one is forgotten as the least recently used. The cache is bounded (`LRUCache`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from flotilla.agents.core.lru import LRUCache

A = TypeVar("A")
MAX_BUILT_AGENTS = 256


class BuiltAgents:
    """Agents by configuration key; `builds` counts builds by agent name (for tests)."""

    def __init__(self, max_size: int = MAX_BUILT_AGENTS) -> None:
        self._agents: LRUCache[Hashable, Any] = LRUCache(max_size)
        self.builds: Counter[str] = Counter()

    def get(self, name: str, key: Hashable, build: Callable[[], A]) -> A:
        """The agent built for `key`, built by `build()` the first time it is asked for."""
        agent: A | None = self._agents.get(key)
        if agent is None:
            agent = build()
            self._agents.put(key, agent)
            self.builds[name] += 1
        return agent

    def __len__(self) -> int:
        return len(self._agents)


# one per process: a configuration's agent is the same whichever conversation runs it
BUILT_AGENTS = BuiltAgents()
