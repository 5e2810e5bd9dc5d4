"""Liveness, property-tested: no plan is ever left waiting on nothing.

Random plans meet random outcomes (success, transient and permanent failures, blocked
steps, answers, lost runs), random commander decisions (nothing, an error, retry_step –
also past the cap –, skip, edit, add steps, abort) and people cancelling, in random
interleavings. The executor's reaction to the effects decided is modelled: a dispatch is
a run in flight, RetryDue a timer, ShowForm/AskUser a person asked, AskCommander and
PlanStalled a commander turn in flight; after a decision turn, the real stall rule
(`commander_turns.after_turn`) asks again or stops the plan. Pure: no database, no clock.

At every quiescent point (between two events) every plan that is not finished has a run
in flight, a timer that will move it, a person asked, or a commander turn in flight; and
a stopped plan (aborted or cancelled) has no step left pending or in progress, whatever
arrives late.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TypeVar

from hypothesis import example, given
from hypothesis import strategies as st

from flotilla.agents.core.errors import OperationRejected, PlanValidationError
from flotilla.agents.core.retry_policy import COMMANDER
from flotilla.agents.planning.decisions import Decision, decide, start
from flotilla.agents.planning.effects import (
    AskCommander,
    AskUser,
    Effect,
    PlanFinished,
    PlanStalled,
    PlanStopped,
    PostDispatch,
    ResumeStep,
    RetryDue,
    RunCommanderStep,
    ShowForm,
    stalled_key,
)
from flotilla.agents.planning.plan import (
    SUCCESSFUL,
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
from flotilla.agents.planning.plan_transitions import stalled
from flotilla.agents.running.commander_turns import after_turn, gave_up, wanted
from tests.unit.reconcile_helpers import AGENTS, T0, make_plan
from tests.unit.test_plan_properties import SETTINGS, plans

Run = PostDispatch | RunCommanderStep | ResumeStep
Asked = ShowForm | AskUser
Turn = AskCommander | PlanStalled
CHOICES = ("nothing", "error", "retry", "retry", "skip", "edit", "add", "abort", "cancel")
OUTCOMES = ("ok", "ok", "transient", "fail", "block", "lost")
UNFINISHED = ("pending", "in_progress", "blocked")
T = TypeVar("T")
SCRIPT = st.lists(st.integers(0, 2**16), max_size=400)


@dataclass
class World:
    """One plan and everything the executor holds for it, moved one event at a time."""

    plan: Plan
    script: list[int]  # the world's choices, in order (hypothesis shrinks them)
    retries: int  # the executor's commander_retries
    now: datetime = T0
    runs: dict[str, Run] = field(default_factory=dict)
    asked: dict[str, Asked] = field(default_factory=dict)
    timers: list[RetryDue | PlanStalled] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    added: int = 0
    log: list[str] = field(default_factory=list)
    read: int = 0

    def choose(self, options: Sequence[T]) -> T:
        """The next choice of the script among `options` (the first once it ran out)."""
        n = self.script[self.read] if self.read < len(self.script) else 0
        self.read += 1
        return options[n % len(options)]

    def decided(self, decision: Decision) -> None:
        """Take the new plan and perform its effects the way the executor does."""
        self.plan = decision.plan
        for effect in decision.effects:
            self.perform(effect)

    def perform(self, effect: Effect) -> None:
        if isinstance(effect, PostDispatch | RunCommanderStep | ResumeStep):
            self.runs[effect.key] = effect
        elif isinstance(effect, ShowForm | AskUser):
            self.asked[effect.key] = effect
        elif isinstance(effect, RetryDue):
            self.timers.append(effect)
        elif isinstance(effect, PlanStalled) and effect.available_at is not None:
            self.timers.append(effect)
        elif isinstance(effect, AskCommander | PlanStalled):
            self.turns.append(effect)
        elif isinstance(effect, PlanStopped | PlanFinished) and self.plan.status != "completed":
            # the runs are cancelled at once here; one in another process may still report
            # before its heartbeat notices (a late outcome)
            for key in list(self.runs):
                if self.choose((True, False)):
                    del self.runs[key]

    # --- events ---------------------------------------------------------------------------

    def step(self) -> bool:
        """One event, chosen at random among those possible; False when none is."""
        kinds = [
            name
            for name, pending in (
                ("run", self.runs),
                ("answer", self.asked),
                ("timer", self.timers),
                ("turn", self.turns),
            )
            if pending
        ]
        if not kinds:
            return False
        kinds = kinds * 4  # a person steps in now and then, not at every turn
        if self.plan.status not in TERMINAL_PLAN:
            kinds.append("person")
        kind = self.choose(kinds)
        getattr(self, f"on_{kind}")()
        return True

    def pick(self, items: list[str]) -> str:
        return self.choose(items)

    def on_run(self) -> None:
        run = self.runs.pop(self.pick(sorted(self.runs)))
        outcome = self.outcome_of(run)
        self.log.append(f"{run.key} -> {type(outcome).__name__}")
        if outcome is not None:
            self.decided(decide(self.plan, self.now, outcomes=[outcome]))

    def outcome_of(self, run: Run) -> Outcome | None:
        index, attempt = run.step, run.attempt
        kind = self.choose(OUTCOMES)
        if kind == "transient":
            return StepFailed(index=index, attempt=attempt, reason="503", retryable=True)
        if kind == "fail":
            return StepFailed(index=index, attempt=attempt, reason="400", retryable=False)
        if kind == "block" and not isinstance(run, RunCommanderStep):
            return StepBlocked(index=index, attempt=attempt, question=f"q{attempt}-{run.key}?")
        if kind == "lost":  # the process died; the run is handed back
            return StepCancelled(index=index, attempt=attempt)
        return StepSucceeded(index=index, attempt=attempt, summary=f"s{index}")

    def on_answer(self) -> None:
        asked = self.asked.pop(self.pick(sorted(self.asked)))
        rnd = asked.round if isinstance(asked, AskUser) else None
        answer = StepAnswered(
            index=asked.step,
            values={"a": "b"},
            answered_by="U1",
            attempt=asked.attempt,
            round=rnd,
        )
        self.log.append(f"{asked.key} answered")
        self.decided(decide(self.plan, self.now, outcomes=[answer]))

    def on_timer(self) -> None:
        timer = min(self.timers, key=lambda t: t.available_at or self.now)
        self.timers.remove(timer)
        assert timer.available_at is not None
        self.now = max(self.now, timer.available_at)
        self.log.append(f"{timer.key} due")
        if isinstance(timer, PlanStalled):
            self.turns.append(timer)  # the stall check's turn starts
        else:
            self.decided(decide(self.plan, self.now))  # the executor reconciles

    def on_turn(self) -> None:
        """A decision turn on a failure or a stall, then the real stall rule."""
        effect = self.turns.pop(self.choose(range(len(self.turns))))
        if not wanted(self.plan, effect):
            self.log.append(f"{effect.key} dropped")
            return
        choice = self.choose(CHOICES)
        self.log.append(f"{effect.key} commander: {choice}")
        changed = self.apply(self.operation(choice, effect))
        plan = changed.plan if changed is not None else self.plan
        asked = changed is not None and any(isinstance(e, PlanStalled) for e in changed.effects)
        tries = effect.turn if isinstance(effect, AskCommander) else effect.attempt
        follow = after_turn(plan, effect.plan_id, tries, self.retries, asked=asked)
        if follow == "ask_again":
            self.timers.append(
                PlanStalled(
                    key=f"{stalled_key(plan.id, plan.version)}:try:{tries + 1}",
                    conversation_id=plan.conversation_id,
                    plan_id=plan.id,
                    version=plan.version,
                    attempt=tries + 1,
                    available_at=self.now + COMMANDER.delay(tries + 1),
                )
            )
        elif follow == "stop":
            reason = gave_up(plan, errored=choice == "error")
            self.apply(AbortPlan(reason=reason))

    def on_person(self) -> None:
        """A person cancels, or writes and the commander changes the plan (no stall
        handling follows a person's message)."""
        if self.choose((False, True)):
            self.log.append("person: cancel")
            self.apply(CancelPlan(reason="not needed"), actor="U1")
            return
        choice = self.choose(CHOICES)
        self.log.append(f"person's message, commander: {choice}")
        self.apply(self.operation(choice, None))

    def operation(self, choice: str, effect: Turn | None) -> CommanderOperation | None:
        failed = [s.index for s in self.plan.steps if s.status == "failed"]
        if isinstance(effect, AskCommander):
            failed.append(effect.step)
        n = len(self.plan.steps)
        index = self.choose([*failed, *failed, *range(1, n + 1)])  # mostly a failed one
        if choice == "retry":
            return RetryStep(index=index)
        if choice == "skip":
            return SkipStep(index=index, reason="route around")
        if choice == "edit":
            return EditStep(index=self.choose(range(1, n + 1)), title="edited")
        if choice == "add" and self.added < 2:
            self.added += 1
            wait = sorted({self.choose(range(1, n + 1)) for _ in range(self.choose((0, 1, 2)))})
            new = StepProposal(index=n + 1, title="added", assignee="writer", wait_for=wait)
            return AddSteps(steps=[new])
        if choice == "abort":
            return AbortPlan(reason="the commander gave up")
        if choice == "cancel":
            return CancelPlan(reason="the commander cancelled")
        return None  # only a reply, or the turn failed

    def apply(self, op: CommanderOperation | None, actor: str | None = None) -> Decision | None:
        """Apply an operation like the reconciler; the decision when it changed the plan."""
        if op is None:
            return None
        try:
            decision = decide(self.plan, self.now, operations=[op], assignees=AGENTS, actor=actor)
        except (OperationRejected, PlanValidationError) as exc:
            self.log.append(f"  refused: {exc}")
            return None
        self.decided(decision)
        return decision if decision.changed else None

    # --- what must hold at every quiescent point -----------------------------------------

    def check(self) -> None:
        plan = self.plan
        steps = [s.status for s in plan.steps]
        if plan.status in ("aborted", "cancelled"):
            left = [
                s.index for s in plan.steps if s.status in ("pending", "in_progress", "blocked")
            ]
            assert not left, f"{plan.status} plan with steps {left} left: {steps}\n{self.trail}"
            return
        if plan.status in TERMINAL_PLAN:
            return
        assert self.waits_on(), f"{plan.status} plan waits on nothing: {steps}\n{self.trail}"

    def waits_on(self) -> list[str]:
        """What will move the plan: live runs, timers, people asked, commander turns."""
        plan = self.plan
        found = [f"turn {t.key}" for t in self.turns]
        for run in self.runs.values():
            step = plan.step(run.step)
            if step is not None and step.status == "in_progress" and step.attempts == run.attempt:
                found.append(f"run {run.key}")
        for asked in self.asked.values():
            step = plan.step(asked.step)
            if step is None or step.attempts != asked.attempt:
                continue
            if isinstance(asked, ShowForm) and step.status == "in_progress":
                found.append(f"form {asked.key}")
            question = step.question
            if isinstance(asked, AskUser) and step.status == "blocked" and question is not None:
                if question.round == asked.round:
                    found.append(f"question {asked.key}")
        for timer in self.timers:
            if isinstance(timer, PlanStalled):
                found.append(f"stall check {timer.key}")
            elif self.will_run(timer.step, timer.attempt):
                found.append(f"timer {timer.key}")
        return found

    def will_run(self, index: int, attempt: int) -> bool:
        """A step backing off is dispatched when its timer fires (its upstream succeeded)."""
        step = self.plan.step(index)
        if step is None or step.status != "pending" or step.not_before is None:
            return False
        if step.attempts != attempt:
            return False  # an older attempt's timer
        return all(self.plan.steps[d - 1].status in SUCCESSFUL for d in step.wait_for)

    @property
    def trail(self) -> str:
        return "\n".join(self.log[-40:])


def run_world(plan: Plan, script: list[int], retries: int) -> World:
    """Start `plan` and move the world along `script`, checking after every event."""
    world = World(plan, script, retries)
    world.decided(start(plan, T0))
    world.check()
    for _ in range(600):
        if not world.step():
            break
        world.check()
    return world


# Found by this property: step 1 fails while step 2 runs, the commander changes nothing
# (the plan is not stalled then), steps 2 and 3 succeed – and nobody was asked again.
ASKED_WHILE_OTHERS_RAN = make_plan(
    {"on_failure": "ask_commander"},
    {"wait_for": [], "on_failure": "abort_plan"},
    {"wait_for": [], "on_failure": "abort_plan"},
)


@SETTINGS
@given(plan=plans(), script=SCRIPT, retries=st.integers(0, 3))
@example(plan=ASKED_WHILE_OTHERS_RAN, script=[0, 0, 52077, 1], retries=0)
def test_no_plan_is_ever_left_waiting_on_nothing(
    plan: Plan, script: list[int], retries: int
) -> None:
    world = run_world(plan, script, retries)
    if not (world.runs or world.asked or world.timers or world.turns):
        # nothing left to happen: the plan must have ended
        assert world.plan.status in TERMINAL_PLAN, world.trail


def test_a_step_backing_off_behind_a_failed_upstream_is_no_timer() -> None:
    """Found reading the stall rule: the commander skips failed step 1, step 2 then backs
    off after a transient failure, a person has step 1 retried and it fails again. Step
    2's timer will dispatch nothing, so the plan is stalled: a silent commander must be
    asked again (before, `stalled` counted the timer and the plan waited for ever)."""
    world = World(make_plan({"on_failure": "ask_commander"}, {}), script=[], retries=2)
    world.decided(start(world.plan, T0))
    fail = StepFailed(index=1, attempt=1, reason="400", retryable=False)
    world.decided(decide(world.plan, T0, outcomes=[fail]))
    world.apply(SkipStep(index=1, reason="route around"))
    busy = StepFailed(index=2, attempt=1, reason="503", retryable=True)
    world.decided(decide(world.plan, T0, outcomes=[busy]))
    world.apply(RetryStep(index=1))  # a person's message: no stall handling follows
    again = StepFailed(index=1, attempt=2, reason="400 again", retryable=False)
    world.decided(decide(world.plan, T0, outcomes=[again]))
    assert [s.status for s in world.plan.steps] == ["failed", "pending"]
    assert world.plan.steps[1].not_before is not None
    assert stalled(world.plan)
    follow = after_turn(world.plan, world.plan.id, tries=1, max_retries=2, asked=False)
    assert follow == "ask_again"
    assert gave_up(world.plan, errored=True) == (
        "I could not decide how to continue after step 1 failed (400 again): "
        "my own model kept failing"
    )
