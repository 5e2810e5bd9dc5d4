"""Validation of a proposed plan (or of steps added to one): every problem as a sentence.

The sentences are written for the commander model: which step, what is wrong, how to
fix it, so it can correct its plan in one more turn. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from flotilla.agents.core.errors import PlanValidationError
from flotilla.agents.planning.plan import (
    COMMANDER,
    MAX_INPUT,
    MAX_STEPS,
    MAX_TITLE,
    RUNTIME_FIELDS,
    USER,
    FormSpec,
    PlanProposal,
    Step,
    StepProposal,
    dependencies,
)

MAX_FORM_FIELDS = 10
MAX_LABEL = 2000  # Slack's limit for an input block's label
MAX_OPTIONS = 100
MAX_OPTION = 75  # Slack's limit for an option's text
PROPOSAL_FIELDS = "index, title, assignee, input, wait_for, on_failure, form"
TEMPLATE = re.compile(r"\{\{(.*?)\}\}")
STEP_REF = re.compile(r"^step_(\d+)\.(\w+)$")
STEP_FIELDS = ("output_summary", "output_files")
_FIELD_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")


def parse(data: Any) -> PlanProposal:
    """Parse the model's raw plan into a proposal; pydantic's errors become sentences."""
    try:
        return PlanProposal.model_validate(data)
    except ValidationError as exc:
        raise PlanValidationError([_sentence(e) for e in exc.errors()]) from None


def _sentence(error: Any) -> str:
    loc = list(error["loc"])
    where = "the plan"
    if len(loc) >= 2 and loc[0] == "steps" and isinstance(loc[1], int):
        where = f"step at position {loc[1] + 1}"
        loc = loc[2:]
    name = ".".join(str(p) for p in loc)
    if error["type"] == "extra_forbidden" and name in RUNTIME_FIELDS:
        return (
            f"{where}: '{name}' is execution state that only the orchestrator writes; "
            f"remove it (a step may set {PROPOSAL_FIELDS})"
        )
    if error["type"] == "extra_forbidden":
        return f"{where}: unknown field '{name}'; a step may set {PROPOSAL_FIELDS}"
    return f"{where}: {name or 'value'}: {error['msg']}"


def validated(
    proposal: PlanProposal,
    *,
    assignees: Collection[str],
    disabled: Collection[str] = (),
    existing: Sequence[Step] = (),
) -> PlanProposal:
    """The proposal with every `wait_for` filled in, or PlanValidationError."""
    problems = problems_of(proposal.steps, assignees, disabled, existing)
    if problems:
        raise PlanValidationError(problems)
    steps = [s.model_copy(update={"wait_for": dependencies(s)}) for s in proposal.steps]
    return PlanProposal(steps=steps)


def problems_of(
    steps: Sequence[StepProposal],
    assignees: Collection[str],
    disabled: Collection[str] = (),
    existing: Sequence[Step] = (),
) -> list[str]:
    """Every problem of `steps` (numbered after `existing`) as an actionable sentence."""
    if not steps:
        return ["the plan has no steps: write at least one step, or answer without a plan"]
    total = len(existing) + len(steps)
    problems: list[str] = []
    if total > MAX_STEPS:
        problems.append(f"the plan has {total} steps; the limit is {MAX_STEPS}: merge small steps")
    first = len(existing) + 1
    for position, step in enumerate(steps):
        expected = first + position
        if step.index != expected:
            problems.append(
                f"step at position {position + 1} has index {step.index}, expected {expected}: "
                f"indexes must be exactly {first}..{first + len(steps) - 1}, in order"
            )
    if problems:
        return problems  # the checks below rely on correct numbering
    upstream: dict[int, frozenset[int]] = {}
    for old in existing:
        upstream[old.index] = frozenset(old.wait_for).union(*(upstream[d] for d in old.wait_for))
    for step in steps:
        problems.extend(_step_problems(step, assignees, disabled, upstream))
        deps = [d for d in dependencies(step) if d in upstream]
        upstream[step.index] = frozenset(deps).union(*(upstream[d] for d in deps))
    return problems


def _step_problems(
    step: StepProposal,
    assignees: Collection[str],
    disabled: Collection[str],
    upstream: Mapping[int, frozenset[int]],
) -> list[str]:
    where = f"step {step.index}"
    problems = _dependency_problems(step, upstream)
    problems.extend(_assignee_problems(step, assignees, disabled))
    if not step.title.strip():
        problems.append(f"{where}: the title is empty; give it a short title for the plan card")
    elif len(step.title) > MAX_TITLE:
        problems.append(
            f"{where}: the title has {len(step.title)} characters; shorten it to {MAX_TITLE}"
        )
    deps = [d for d in dependencies(step) if d in upstream]
    reachable = frozenset(deps).union(*(upstream[d] for d in deps))
    problems.extend(f"{where}: {p}" for p in input_problems(step.input, reachable))
    if step.form is not None and step.assignee != USER:
        problems.append(f"{where}: only a step assigned to 'user' can have a form; remove it")
    elif step.form is not None:
        problems.extend(f"{where}: {p}" for p in form_problems(step.form))
    return problems


def _dependency_problems(step: StepProposal, upstream: Mapping[int, frozenset[int]]) -> list[str]:
    where = f"step {step.index}"
    problems: list[str] = []
    deps = dependencies(step)
    if len(set(deps)) != len(deps):
        problems.append(f"{where}: wait_for names a step twice; list each step once")
    for dep in deps:
        if dep == step.index:
            problems.append(
                f"{where}: wait_for names step {dep} itself; a step may only wait for earlier steps"
            )
        elif dep > step.index:
            problems.append(
                f"{where}: wait_for names step {dep}, which comes later; "
                "a step may only wait for earlier steps (reorder the steps)"
            )
        elif dep not in upstream:
            problems.append(f"{where}: wait_for names step {dep}, which does not exist")
    return problems


def _assignee_problems(
    step: StepProposal, assignees: Collection[str], disabled: Collection[str]
) -> list[str]:
    if step.assignee in (USER, COMMANDER) or step.assignee in assignees:
        return []
    choices = ", ".join([USER, COMMANDER, *sorted(assignees)])
    if step.assignee in disabled:
        return [
            f"step {step.index}: the agent '{step.assignee}' is disabled; "
            f"assign the step to one of: {choices}"
        ]
    return [
        f"step {step.index}: there is no agent named '{step.assignee}'; "
        f"assign the step to one of: {choices}"
    ]


def form_problems(form: FormSpec) -> list[str]:
    """What is wrong with a form beyond its types: count, names, labels, select options."""
    problems: list[str] = []
    if not 1 <= len(form.fields) <= MAX_FORM_FIELDS:
        problems.append(f"the form has {len(form.fields)} fields; give it 1..{MAX_FORM_FIELDS}")
    names = [f.name for f in form.fields]
    if len(set(names)) != len(names):
        problems.append("the form has two fields with the same name; name each field once")
    for f in form.fields:
        if not _FIELD_NAME.match(f.name):
            problems.append(
                f"form field '{f.name}': a name is lowercase letters, digits and _ "
                "(starting with a letter, at most 40 characters)"
            )
        if not 1 <= len(f.label) <= MAX_LABEL:
            problems.append(f"form field '{f.name}': the label must be 1..{MAX_LABEL} characters")
        if f.kind == "select" and not 1 <= len(f.options) <= MAX_OPTIONS:
            problems.append(f"form field '{f.name}' is a select: give it 1..{MAX_OPTIONS} options")
        elif f.kind != "select" and f.options:
            problems.append(f"form field '{f.name}' has options but is not a select; remove them")
        if any(not o or len(o) > MAX_OPTION for o in f.options):
            problems.append(
                f"form field '{f.name}': each option must be 1..{MAX_OPTION} characters"
            )
    return problems


def input_problems(template: str, upstream: frozenset[int]) -> list[str]:
    """Problems of an input template whose step has the steps `upstream` as ancestors."""
    problems: list[str] = []
    if len(template) > MAX_INPUT:
        problems.append(
            f"the input has {len(template)} characters; shorten it to {MAX_INPUT} "
            "(refer to earlier results with {{step_N.output_summary}} instead of copying them)"
        )
    for ref in TEMPLATE.findall(template):
        name = ref.strip()
        if name == "request":
            continue
        match = STEP_REF.match(name)
        if match is None or match.group(2) not in STEP_FIELDS:
            problems.append(
                f"the input refers to '{{{{{name}}}}}', which is unknown; use "
                "{{step_N.output_summary}}, {{step_N.output_files}} or {{request}}"
            )
        elif int(match.group(1)) not in upstream:
            problems.append(
                f"the input refers to step {match.group(1)}, which is not upstream of this "
                "step; add it to wait_for (directly or through a step it waits for)"
            )
    return problems


def validate_plan(
    proposal: PlanProposal,
    *,
    assignees: Collection[str],
    disabled: Collection[str] = (),
    existing: Sequence[Step] = (),
) -> PlanProposal:
    """Return the normalised proposal (wait_for filled in) or raise PlanValidationError.

    `assignees` = names of enabled sub-agents ("user" and "commander" are always allowed).
    One actionable sentence per problem. A proposal carrying runtime fields (status,
    output_summary, …) is rejected with a sentence saying the orchestrator sets those.
    (That rejection happens when the model's dict is parsed: see `parse_plan`.)
    Optional: `disabled` = names of disabled sub-agents (for a precise sentence), and
    `existing` = the plan's stored steps when `proposal` adds steps to it.
    """
    return validated(proposal, assignees=assignees, disabled=disabled, existing=existing)


def parse_plan(data: Any) -> PlanProposal:
    """The model's raw plan (a dict) as a proposal, or PlanValidationError in sentences."""
    return parse(data)
