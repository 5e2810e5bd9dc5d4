"""Agents are built once per configuration, not per step; an admin's edit rebuilds one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from flotilla.agents.running import commander, runtime
from flotilla.agents.running.built_agents import BuiltAgents
from tests.e2e.slice.conftest import Run, scripted
from tests.e2e.slice.scripts import plans
from tests.e2e.slice.test_admin_modal import open_modal, save

STEPS = [
    {"index": 1, "title": "Draft", "assignee": "writer", "input": "Draft the note."},
    {
        "index": 2,
        "title": "Polish",
        "assignee": "writer",
        "wait_for": [1],
        "input": "Polish: {{step_1.output_summary}}",
    },
    {
        "index": 3,
        "title": "Check",
        "assignee": "analyst",
        "wait_for": [2],
        "input": "Check: {{step_2.output_summary}}",
    },
]


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> BuiltAgents:
    """A fresh cache for this test (the process's one has seen other tests' agents)."""
    fresh = BuiltAgents()
    monkeypatch.setattr(runtime, "BUILT_AGENTS", fresh)
    monkeypatch.setattr(commander, "BUILT_AGENTS", fresh)
    return fresh


async def run_plan(run: Run, request: str) -> None:
    root = run.ask(request)
    await run.quiesce()
    plan = await run.plan(root)
    assert plan.status == "completed", [(s.index, s.status) for s in plan.steps]


async def test_steps_of_one_agent_share_its_built_agent_until_an_admin_edits_it(
    start: Callable[..., Any], built: BuiltAgents
) -> None:
    async with start(model=scripted(plans({"NOTE": STEPS}))) as run:
        await run_plan(run, "NOTE for sales")
        await run_plan(run, "NOTE for support")
        # four writer steps and two analyst steps in two plans: each agent built once; the
        # commander twice in all: its planning turn and its closing answer (a step agent)
        assert built.builds == {"writer": 1, "analyst": 1, "commander": 2}

        await open_modal(run, "alex", "agent edit writer")
        await save(run, "alex", {"description": "Writes crisp notes."}, "*writer* is saved.")
        await run_plan(run, "NOTE for marketing")
        # the edited writer is a new configuration, and so is the planning commander's
        # roster (it lists the writer's description); the closing answer's agent is not
        assert built.builds == {"writer": 2, "analyst": 1, "commander": 3}


def test_the_cache_of_built_agents_is_bounded() -> None:
    built = BuiltAgents(max_size=2)
    for name in ("a", "b", "c", "a"):
        built.get(name, name, lambda: object())
    assert len(built) == 2 and built.builds == {"a": 2, "b": 1, "c": 1}
