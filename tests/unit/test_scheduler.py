"""The scheduler's pure core: caps hold, nothing is granted twice, every wait has a reason,
slots are shared fairly between backlogged tenants, urgent work goes first."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from flotilla.agents.scheduling.scheduler import (
    BATCH,
    NORMAL,
    URGENT,
    Budget,
    Limits,
    Running,
    RunRequest,
    Wait,
    admit,
    in_line,
)

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
TENANTS = ("T1", "T2", "T3", "T4")
AGENTS = ("researcher", "writer", "analyst")
TOOLS = ("http_fetch", "crm")
SETTINGS = settings(max_examples=150, deadline=None)


@st.composite
def situations(draw: st.DrawFn) -> tuple[list[RunRequest], list[Running], Limits]:
    n_wait = draw(st.integers(0, 25))
    waiting = [
        RunRequest(
            key=f"w{i}",
            tenant=draw(st.sampled_from(TENANTS)),
            agent=draw(st.sampled_from(AGENTS)),
            enqueued_at=T0 + timedelta(seconds=draw(st.integers(0, 50))),
            priority=draw(st.integers(1, 5)),
            tools=tuple(draw(st.sets(st.sampled_from(TOOLS), max_size=2))),
            estimate_tokens=draw(st.integers(0, 5_000)),
        )
        for i in range(n_wait)
    ]
    capacity = draw(st.integers(0, 8))
    running = [
        Running(
            key=f"r{i}",
            tenant=draw(st.sampled_from(TENANTS)),
            agent=draw(st.sampled_from(AGENTS)),
            started_at=T0 - timedelta(seconds=draw(st.integers(1, 100))),
            priority=draw(st.integers(1, 5)),
            tools=tuple(draw(st.sets(st.sampled_from(TOOLS), max_size=2))),
        )
        for i in range(draw(st.integers(0, capacity)))
    ]
    caps = st.dictionaries(st.sampled_from(AGENTS), st.integers(1, 4), max_size=3)
    tool_caps = st.dictionaries(st.sampled_from(TOOLS), st.integers(1, 3), max_size=2)
    budgets = st.dictionaries(
        st.sampled_from(TENANTS),
        st.builds(Budget, st.integers(0, 20_000), st.just(T0 + timedelta(hours=15))),
        max_size=4,
    )
    limits = Limits(
        capacity=capacity,
        agent_caps=draw(caps),
        tool_caps=draw(tool_caps),
        budgets=draw(budgets),
    )
    return waiting, running, limits


@SETTINGS
@given(situations())
def test_caps_hold_and_every_waiting_run_is_granted_or_told_why(
    situation: tuple[list[RunRequest], list[Running], Limits],
) -> None:
    waiting, running, limits = situation
    decision = admit(waiting, running, limits, T0)
    granted = [r for r in waiting if r.key in decision.grants]
    assert len(decision.grants) == len(set(decision.grants))  # nothing granted twice
    assert set(decision.grants) | set(decision.waits) == {r.key for r in waiting}
    assert not set(decision.grants) & set(decision.waits)
    assert len(running) + len(granted) <= max(limits.capacity, len(running))
    agents = Counter(r.agent for r in running) + Counter(r.agent for r in granted)
    for agent, cap in limits.agent_caps.items():
        newly = sum(1 for r in granted if r.agent == agent)
        assert newly == 0 or agents[agent] <= cap
    for tool, cap in limits.tool_caps.items():
        using = sum(tool in r.tools for r in running) + sum(tool in r.tools for r in granted)
        newly = sum(1 for r in granted if tool in r.tools)
        assert newly == 0 or using <= cap
    for tenant, budget in limits.budgets.items():
        spent = sum(r.estimate_tokens for r in granted if r.tenant == tenant)
        assert spent <= max(budget.remaining, 0)
    for wait in decision.waits.values():
        assert wait.sentence.startswith("waiting: ")


@SETTINGS
@given(situations())
def test_a_free_slot_is_never_left_to_a_run_that_could_use_it(
    situation: tuple[list[RunRequest], list[Running], Limits],
) -> None:
    waiting, running, limits = situation
    decision = admit(waiting, running, limits, T0)
    free = limits.capacity - len(running) - len(decision.grants)
    queued = [k for k, w in decision.waits.items() if w.kind == "capacity"]
    assert not (free > 0 and queued)  # work-conserving: "in line" only when full
    places = sorted(decision.waits[k].sentence for k in queued)
    assert places == sorted(f"waiting: {in_line(n)}" for n in range(1, len(queued) + 1))


@SETTINGS
@given(situations())
def test_urgent_work_goes_before_less_urgent_work(
    situation: tuple[list[RunRequest], list[Running], Limits],
) -> None:
    waiting, running, limits = situation
    decision = admit(waiting, running, limits, T0)
    granted = {r.key: r for r in waiting if r.key in decision.grants}
    in_line = [r for r in waiting if (w := decision.waits.get(r.key)) and w.kind == "capacity"]
    for queued in in_line:  # nothing less urgent took the slot it waits for
        assert all(g.priority <= queued.priority for g in granted.values())


def backlog(sizes: dict[str, int], priority: int = NORMAL) -> list[RunRequest]:
    return [
        RunRequest(
            key=f"{tenant}-{i}",
            tenant=tenant,
            agent=AGENTS[i % len(AGENTS)],
            enqueued_at=T0 + timedelta(seconds=i) if tenant == "A" else T0 + timedelta(hours=1),
            priority=priority,
        )
        for tenant, n in sizes.items()
        for i in range(n)
    ]


def test_a_big_tenant_does_not_starve_the_small_ones() -> None:
    """A submits 100 runs first, B–E 5 each later; 4 slots; each round the running runs
    finish and the slots are granted again. While all are backlogged each tenant gets the
    same share of slots (Jain's index 1.0); FIFO would give A every slot."""
    waiting = backlog({"A": 100, "B": 5, "C": 5, "D": 5, "E": 5})
    shares: Counter[str] = Counter()
    for _ in range(5):  # the small tenants stay backlogged for 5 rounds of 4 slots
        decision = admit(waiting, [], Limits(capacity=4), T0, served=shares)
        granted = [r for r in waiting if r.key in decision.grants]
        shares.update(r.tenant for r in granted)
        waiting = [r for r in waiting if r.key not in decision.grants]
    counts = [shares[t] for t in "ABCDE"]
    jain = sum(counts) ** 2 / (len(counts) * sum(c * c for c in counts))
    assert jain >= 0.95, counts
    assert counts == [4, 4, 4, 4, 4]


def test_weights_share_slots_in_proportion() -> None:
    """Weights 2:1, 3 slots, runs that finish oldest first, one per round: A holds two
    thirds of the slot time while both are backlogged."""
    waiting = backlog({"A": 60, "B": 60})
    limits = Limits(capacity=3, weights={"A": 2.0, "B": 1.0})
    running: list[Running] = []
    held: Counter[str] = Counter()
    for _ in range(30):
        decision = admit(waiting, running, limits, T0)
        started = [r for r in waiting if r.key in decision.grants]
        running += [Running(r.key, r.tenant, r.agent, T0, r.priority) for r in started]
        waiting = [r for r in waiting if r.key not in decision.grants]
        held.update(r.tenant for r in running)
        running = running[1:]  # the oldest run finishes
    assert abs(held["A"] / (held["A"] + held["B"]) - 2 / 3) <= 0.05, held


def test_a_run_blocked_by_its_agent_does_not_block_the_runs_behind_it() -> None:
    first = RunRequest("r1", "T1", "researcher", T0)
    second = RunRequest("r2", "T1", "writer", T0 + timedelta(seconds=1))
    busy = Running("x", "T2", "researcher", T0 - timedelta(seconds=5))
    decision = admit([first, second], [busy], Limits(capacity=3, agent_caps={"researcher": 1}), T0)
    assert decision.grants == ("r2",)
    assert decision.waits["r1"].sentence == "waiting: researcher busy (1/1)"


def test_a_budget_wait_says_when_it_resets() -> None:
    request = RunRequest("r1", "T1", "researcher", T0, estimate_tokens=2_000)
    budget = Budget(
        remaining=1_000, resets_at=datetime(2026, 12, 2, 0, 0, tzinfo=UTC), label="channel budget"
    )
    decision = admit([request], [], Limits(capacity=2, budgets={"T1": budget}), T0)
    assert decision.grants == ()
    assert decision.waits["r1"].sentence == "waiting: channel budget (resets 00:00 UTC)"
    monthly = Budget(remaining=0, resets_at=datetime(2027, 1, 1, tzinfo=UTC), label="x budget")
    decision = admit([request], [], Limits(capacity=2, budgets={"T1": monthly}), T0)
    assert decision.waits["r1"].sentence == "waiting: x budget (resets 01 Jan 00:00 UTC)"


def test_a_run_must_fit_its_workspace_budget_too() -> None:
    request = RunRequest("r1", "W:C1", "researcher", T0, estimate_tokens=10, workspace="W")
    budgets = {
        "W:C1": Budget(remaining=100, label="channel budget"),
        "W": Budget(remaining=5, label="workspace budget"),
    }
    decision = admit([request], [], Limits(capacity=2, budgets=budgets), T0)
    assert decision.waits["r1"].sentence == "waiting: workspace budget used up"


def test_workspaces_share_first_then_their_channels() -> None:
    """Workspace W1 has three busy channels, W2 one: W2's channel gets the free slot."""
    running = [Running(f"x{i}", f"W1:C{i}", "researcher", T0, workspace="W1") for i in range(3)]
    waiting = [
        RunRequest("a", "W1:C9", "researcher", T0, workspace="W1"),
        RunRequest("b", "W2:C1", "researcher", T0 + timedelta(seconds=5), workspace="W2"),
    ]
    decision = admit(waiting, running, Limits(capacity=4), T0)
    assert decision.grants == ("b",)


def test_urgent_work_waits_first_in_line_for_a_slot_held_by_batch_runs() -> None:
    """The pass only says it waits for a slot: the first batch run to reach a model-turn
    boundary gives it one (agents/running/preemption.py, tests/integration/test_urgent_yield.py)."""
    batch = [
        Running(f"b{i}", "T1", "researcher", T0 - timedelta(minutes=10 - i), priority=BATCH)
        for i in range(3)
    ]
    normal = Running("n", "T2", "writer", T0 - timedelta(minutes=1), priority=NORMAL)
    urgent = RunRequest("u", "T3", "analyst", T0, priority=URGENT)
    decision = admit([urgent], [*batch, normal], Limits(capacity=4), T0)
    assert decision.grants == ()
    assert decision.waits["u"] == Wait("capacity", "waiting: next in line")
