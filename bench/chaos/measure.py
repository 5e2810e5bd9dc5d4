"""What an experiment counts, read from the outside: the Slack threads (local_slack's state),
the deliveries Slack made, the model server's request log, and the processes' logs."""

from __future__ import annotations

import json
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.chaos.stack import CHANNEL, Mention, Stack
from flotilla.local_slack import Message

DISPATCH, RESULT, NOTICE = "flotilla_dispatch", "flotilla_result", "flotilla_notice"
FINAL_STEP = 3  # the offline commander's research chain: research, write, the synthesis
ENDED = "nothing else will run"  # the closing sentence of a plan that stopped


@dataclass
class Outcome:
    completed: bool  # the final answer (the last step's result) is in the thread
    ended: bool  # or the plan stopped with a sentence saying so
    duplicate_dispatches: int
    duplicate_answers: int
    duplicate_notices: int
    posted_twice: list[str] = field(default_factory=list)  # the keys of the duplicates


def _meta(message: Message) -> tuple[str, dict[str, Any]]:
    meta = message.metadata or {}
    payload = meta.get("event_payload")
    return str(meta.get("event_type", "")), payload if isinstance(payload, dict) else {}


def outcome(messages: list[Message]) -> Outcome:
    seen: dict[str, Counter[tuple[Any, ...]]] = {DISPATCH: Counter(), RESULT: Counter()}
    notices: Counter[str] = Counter()
    completed = False
    for message in messages:
        kind, payload = _meta(message)
        if kind in seen:
            seen[kind][(payload.get("plan_id"), payload.get("step"), payload.get("attempt"))] += 1
            completed |= kind == RESULT and payload.get("step") == FINAL_STEP
        elif kind == NOTICE and payload.get("key"):
            notices[str(payload["key"])] += 1
    ended = any(ENDED in m.text for m in messages)

    def extra(counts: Counter[Any]) -> int:
        return sum(n - 1 for n in counts.values())

    twice = [
        f"{kind.removeprefix('flotilla_')} of plan {plan} step {step} attempt {attempt}"
        for kind in seen
        for (plan, step, attempt), n in seen[kind].items()
        if n > 1
    ]
    twice += [key for key, n in notices.items() if n > 1]
    return Outcome(
        completed, ended, extra(seen[DISPATCH]), extra(seen[RESULT]), extra(notices), twice
    )


@dataclass
class Figures:
    """One experiment's figures; `table()` prints them."""

    title: str
    notes: list[str] = field(default_factory=list)
    rows: dict[str, str] = field(default_factory=dict)

    def add(self, name: str, value: object) -> None:
        self.rows[name] = " ".join(str(value).split()).replace("|", "\\|")

    def table(self) -> str:
        lines = [f"### {self.title}", ""]
        lines += [f"- {note}" for note in self.notes]
        lines += ["", "| figure | value |", "|---|---|"]
        lines += [f"| {name} | {value} |" for name, value in self.rows.items()]
        return "\n".join(lines)

    def number(self, name: str) -> int:
        return int(self.rows[name].split()[0])


def acked(stack: Stack, mention: Mention) -> bool:
    """Slack got a 200 for the mention's app_mention event (one of its deliveries)."""
    for delivery in stack.workspace.events.deliveries:
        event = delivery.payload.get("event") or {}
        if event.get("type") == "app_mention" and event.get("ts") == mention.root.ts:
            if delivery.acked:
                return True
    return False


def resolved(stack: Stack, mention: Mention) -> bool:
    found = outcome(stack.workspace.state.thread(_channel_id(stack), mention.root.ts))
    return found.completed or found.ended


def _channel_id(stack: Stack) -> str:
    return stack.workspace.state.channel_named(CHANNEL).id


def model_paid_twice(stack: Stack) -> int:
    """Prompts the model server answered in full (200, to a client still there) and was then
    sent again."""
    by_prompt: dict[str, list[int | None]] = {}
    for request in stack.model.requests:
        prompt = json.dumps(request.body.get("messages"), sort_keys=True)
        by_prompt.setdefault(prompt, []).append(request.status)
    twice = 0
    for statuses in by_prompt.values():
        if 200 in statuses and statuses.index(200) < len(statuses) - 1:
            twice += 1
    return twice


def http_statuses(stack: Stack) -> str:
    """What Flotilla answered Slack's deliveries (events, interactions, commands)."""
    counts: Counter[str] = Counter()
    for delivery in stack.workspace.events.deliveries:
        for attempt in delivery.attempts:
            counts[str(attempt.status) if attempt.status else (attempt.reason or "none")] += 1
    return format_counts(counts)


def format_counts(counts: Counter[Any]) -> str:
    return ", ".join(f"{key}: {n}" for key, n in sorted(counts.items(), key=str)) or "none"


def tracebacks(lines: Sequence[str]) -> int:
    return sum("Traceback (most recent call last)" in line for line in lines)


def traceback_messages(lines: Sequence[str]) -> str:
    """The log messages that carried a traceback, counted (what an operator would read)."""
    found: Counter[str] = Counter()
    for line in lines:
        if "Traceback (most recent call last)" not in line:
            continue
        try:
            entry = json.loads(line)
            message = str(entry.get("message", ""))
            error = str(entry.get("error", "")).strip().splitlines()[-1:]
        except ValueError:
            message, error = line, []
        found[f"{message[:70]} ({error[0][:70] if error else '?'})"] += 1
    return "; ".join(f"{n}× {text}" for text, n in found.most_common(5)) or "none"


def secrets_in_logs(stack: Stack, extra: Sequence[str] = ()) -> int:
    lines = stack.raw_logs() + list(extra)
    return sum(secret in line for secret in stack.secrets.values() for line in lines)


def seconds(values: list[float]) -> str:
    if not values:
        return "no kill hit a running step"
    return (
        f"median {statistics.median(values):.1f} s, max {max(values):.1f} s "
        f"({len(values)} kills with a step in flight)"
    )


def plan_figures(stack: Stack, figures: Figures) -> None:
    """The common figures: plans, lost requests, duplicates, model paid twice, HTTP, logs."""
    channel = _channel_id(stack)
    outcomes = [outcome(stack.workspace.state.thread(channel, m.root.ts)) for m in stack.mentions]
    lost = [
        m for m, o in zip(stack.mentions, outcomes, strict=True) if not (o.completed or o.ended)
    ]
    lost_acked = [m for m in lost if acked(stack, m)]
    figures.add("plans requested (mentions)", len(stack.mentions))
    figures.add("plans completed (final answer posted)", sum(o.completed for o in outcomes))
    figures.add(
        "plans stopped with a sentence",
        sum(o.ended and not o.completed for o in outcomes),
    )
    figures.add(
        "requests lost",
        f"{len(lost)} ({len(lost_acked)} acked by Flotilla, {len(lost) - len(lost_acked)} "
        "never acked in Slack's 4 attempts)",
    )
    told = trouble_told(stack)
    figures.add("trouble sentences people saw", f"{sum(told.values())}: {format_trouble(told)}")
    figures.add("duplicate dispatches", sum(o.duplicate_dispatches for o in outcomes))
    figures.add("duplicate answers", sum(o.duplicate_answers for o in outcomes))
    figures.add("duplicate notices", sum(o.duplicate_notices for o in outcomes))
    if twice := [key for o in outcomes for key in o.posted_twice]:
        figures.add("what was posted twice", "; ".join(twice[:5]))
    figures.add("model calls paid twice", model_paid_twice(stack))
    figures.add("model requests (answered 200)", _model_requests(stack))
    figures.add("HTTP statuses to Slack's deliveries", http_statuses(stack))
    figures.add("tracebacks logged", tracebacks(stack.raw_logs()))
    if tracebacks(stack.raw_logs()):
        figures.add("what the tracebacks were", traceback_messages(stack.raw_logs()))
    figures.add("secrets found in logs", secrets_in_logs(stack))
    if stack.startups:
        figures.add(
            "`flotilla run` start -> serving",
            f"median {statistics.median(stack.startups):.1f} s, max {max(stack.startups):.1f} s "
            f"({len(stack.startups)} starts)",
        )


TROUBLE = ("could not", "trouble", "try again", "in time", "went wrong", "failed")


def trouble_told(stack: Stack) -> Counter[str]:
    """Flotilla's messages in the threads that tell people something went wrong."""
    channel = _channel_id(stack)
    told: Counter[str] = Counter()
    for mention in stack.mentions:
        for message in stack.workspace.state.thread(channel, mention.root.ts):
            kind, payload = _meta(message)
            card = str(payload.get("key", "")).endswith(":card")
            if message.user == mention.root.user or kind in (DISPATCH, RESULT) or card:
                continue
            if any(word in message.text.lower() for word in TROUBLE):
                told[message.text[:90]] += 1
    return told


def format_trouble(told: Counter[str]) -> str:
    return "; ".join(f"{n}× “{text}”" for text, n in told.most_common(3)) or "none"


def _model_requests(stack: Stack) -> str:
    ok = sum(r.status == 200 for r in stack.model.requests)
    return f"{len(stack.model.requests)} ({ok})"
