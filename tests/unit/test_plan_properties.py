"""Property tests: random valid DAGs, random outcome orders, duplicated/reordered deliveries."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flotilla.agents.core.errors import OperationRejected, PlanValidationError
from flotilla.agents.planning.commander_operations import apply_operation
from flotilla.agents.planning.decisions import decide, start
from flotilla.agents.planning.effects import AskCommander, Effect, StepEffect
from flotilla.agents.planning.plan import (
    TERMINAL_PLAN,
    AbortPlan,
    AddSteps,
    CancelPlan,
    CommanderOperation,
    EditStep,
    Outcome,
    Plan,
    RetryStep,
    SkipStep,
    StepAnswered,
    StepBlocked,
    StepCancelled,
    StepFailed,
    StepProposal,
    StepSucceeded,
)
from flotilla.agents.planning.plan_transitions import in_flight
from tests.unit.reconcile_helpers import AGENTS, T0, make_plan

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DISPATCH_KINDS = ("post_dispatch", "show_form")


@st.composite
def plans(draw: st.DrawFn) -> Plan:
    """A random valid DAG: each step waits for a random subset of earlier steps."""
    n = draw(st.integers(1, 10))
    specs: list[dict[str, Any]] = []
    for i in range(1, n + 1):
        wait_for = draw(st.lists(st.integers(1, i - 1), unique=True)) if i > 1 else []
        specs.append(
            {
                "wait_for": sorted(wait_for),
                "assignee": draw(st.sampled_from(["researcher", "writer", "commander", "user"])),
                "on_failure": draw(st.sampled_from(["abort_plan", "continue", "ask_commander"])),
            }
        )
    return make_plan(*specs, max_parallel=draw(st.integers(1, 4)))


def is_dispatch(effect: Effect) -> bool:
    return effect.kind in DISPATCH_KINDS or (effect.kind == "run_commander_step")


class Simulation:
    """Drives a plan the way the world would: results, duplicates, a commander."""

    def __init__(self, plan: Plan, data: st.DataObject) -> None:
        self.data = data
        self.now = T0
        self.pool: list[Outcome] = []  # deliveries in flight, in any order, maybe twice
        self.commander: list[CommanderOperation] = []
        self.dispatched: set[str] = set()
        self.applied: list[Outcome] = []
        decision = start(plan, self.now)
        self.plan = decision.plan
        self.observe(decision.effects)

    def observe(self, effects: list[Effect]) -> None:
        for effect in effects:
            if is_dispatch(effect):
                assert effect.key not in self.dispatched, f"{effect.key} dispatched twice"
                self.dispatched.add(effect.key)
                self.pool.append(self.result_of(effect))
            elif effect.kind == "ask_user":
                values = {"answer": "yes"}
                self.pool.append(StepAnswered(index=effect.step, values=values, answered_by="U1"))
            elif effect.kind == "resume_step":  # the resumed run finishes
                index, attempt = effect.step, effect.attempt
                self.pool.append(StepSucceeded(index=index, attempt=attempt, summary="after"))
            elif isinstance(effect, AskCommander):
                self.commander.append(self.commander_choice(effect))
        assert in_flight(self.plan) <= self.plan.max_parallel
        if self.plan.max_parallel == 1:
            assert in_flight(self.plan) <= 1

    def result_of(self, effect: Effect) -> Outcome:
        assert isinstance(effect, StepEffect)
        index, attempt = effect.step, effect.attempt
        if effect.kind == "show_form":
            return StepAnswered(index=index, values={"a": "b"}, answered_by="U1")
        kind = self.data.draw(st.sampled_from(["ok", "ok", "transient", "fail", "block", "cancel"]))
        if kind == "transient":
            return StepFailed(index=index, attempt=attempt, reason="429", retryable=True)
        if kind == "fail":
            return StepFailed(index=index, attempt=attempt, reason="bad", retryable=False)
        if kind == "block" and effect.kind == "post_dispatch":
            return StepBlocked(index=index, attempt=attempt, question=f"q{attempt}?")
        if kind == "cancel" and attempt < 3:
            return StepCancelled(index=index, attempt=attempt)
        return StepSucceeded(index=index, attempt=attempt, summary=f"s{index}")

    def commander_choice(self, wake: Effect) -> CommanderOperation:
        assert isinstance(wake, AskCommander)
        index, attempt = wake.step, wake.attempt
        choice = self.data.draw(st.sampled_from(["retry", "skip", "abort"]))
        if choice == "retry" and attempt < 4:
            return RetryStep(index=index)
        if choice == "abort":
            return AbortPlan(reason="commander gave up")
        return SkipStep(index=index, reason="route around")

    def run(self) -> None:
        for _ in range(400):
            if not self.pool and not self.commander:
                self.now += timedelta(hours=1)  # let backoffs pass
                decision = decide(self.plan, self.now)
                self.plan = decision.plan
                self.observe(decision.effects)
                if not self.pool:
                    return
            self.step_once()
        raise AssertionError("the simulation did not settle")

    def step_once(self) -> None:
        commander_turn: bool = self.data.draw(st.booleans())
        if self.commander and commander_turn:
            op = self.commander.pop(0)
            try:
                decision = decide(self.plan, self.now, operations=[op])
            except OperationRejected:
                return
        elif self.pool:
            i = self.data.draw(st.integers(0, len(self.pool) - 1))
            outcome = self.pool[i]
            if not self.data.draw(st.booleans()):  # sometimes leave it in: a duplicate
                self.pool.pop(i)
            decision = decide(self.plan, self.now, outcomes=[outcome])
            self.applied.append(outcome)
        else:
            return
        self.plan = decision.plan
        self.observe(decision.effects)


@SETTINGS
@given(plan=plans(), data=st.data())
def test_random_deliveries_never_dispatch_twice_and_always_terminate(
    plan: Plan, data: st.DataObject
) -> None:
    sim = Simulation(plan, data)
    sim.run()
    assert sim.plan.status in TERMINAL_PLAN, [s.status for s in sim.plan.steps]
    # completed means every step really finished (done or skipped)
    if sim.plan.status == "completed":
        assert all(s.status in ("done", "skipped") for s in sim.plan.steps)


@SETTINGS
@given(plan=plans(), data=st.data())
def test_reconciling_with_nothing_new_changes_nothing(plan: Plan, data: st.DataObject) -> None:
    sim = Simulation(plan, data)
    for _ in range(data.draw(st.integers(0, 15))):
        sim.step_once()
    again = decide(sim.plan, sim.now)
    assert again.plan is again.before and again.effects == []
    for outcome in sim.pool:  # anything already applied, delivered once more
        if outcome in sim.applied:
            repeat = decide(sim.plan, sim.now, outcomes=[outcome])
            assert repeat.plan is sim.plan and repeat.effects == []


def operations(n_steps: int) -> st.SearchStrategy[CommanderOperation]:
    index = st.integers(0, n_steps + 2)
    text = st.sampled_from(["x", "{{request}}", "{{step_1.output_summary}}"])
    new_step = st.builds(
        StepProposal,
        index=st.integers(n_steps + 1, n_steps + 2),
        title=st.just("added"),
        assignee=st.sampled_from(["researcher", "user", "nobody"]),
        wait_for=st.lists(st.integers(1, n_steps + 1), max_size=2),
    )
    return st.one_of(
        st.builds(RetryStep, index=index, input=st.none() | text),
        st.builds(SkipStep, index=index, reason=st.just("r")),
        st.builds(EditStep, index=index, input=st.none() | text, title=st.none() | text),
        st.builds(AddSteps, steps=st.lists(new_step, min_size=1, max_size=2)),
        st.builds(AbortPlan, reason=st.just("r")),
        st.builds(CancelPlan, reason=st.just("r")),
    )


@SETTINGS
@given(plan=plans(), data=st.data())
def test_no_commander_operation_ever_sets_done_or_failed(plan: Plan, data: st.DataObject) -> None:
    sim = Simulation(plan, data)
    for _ in range(data.draw(st.integers(0, 12))):
        sim.step_once()
    current = sim.plan
    for op in data.draw(st.lists(operations(len(current.steps)), max_size=8)):
        try:
            after = apply_operation(current, op, assignees=AGENTS)
        except (OperationRejected, PlanValidationError):
            continue
        for i, step in enumerate(after.steps):
            old = current.steps[i].status if i < len(current.steps) else "pending"
            if step.status in ("done", "failed"):
                assert old == step.status, f"{type(op).__name__} set step {i + 1} {step.status}"
            if i < len(current.steps) and step.status == "done":
                assert step.output_summary == current.steps[i].output_summary
        current = after
