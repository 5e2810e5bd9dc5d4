"""What a run's first prompt shows of its thread: only what the run does not get already.

A step's prompt carries its input (with the upstream summaries its template asked for) and
the original request. The thread window beside them leaves out what would repeat those:

- Flotilla's own posts (dispatches, forms and questions, notices), recognised by their
  message metadata event type – the dispatch *is* the step's input;
- a message whose text the prompt already carries (the request, the new message);
- the answers of the plan's steps whose summaries reached this run – the ones its input
  was given, and transitively the ones those steps were given (a summary is written for
  the next steps: it passes on what they need of the answer);
- an answer still marked `streaming`: its stored text is only what it started with (the
  final text is stored with its step's outcome, `agents/reconciling/final_texts.py`), not
  its answer.

What is left – people's messages (interjections), the commander's replies, answers the
run was not given – is shown newest first up to a budget in characters, oldest first.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from flotilla.agents.planning.plan import Plan
from flotilla.agents.planning.plan_validation import STEP_REF, TEMPLATE
from flotilla.agents.tools.builtin import format_thread_line

# Message metadata event types Flotilla writes (bot/listeners/payloads.py writes the same
# strings, and bot/answer_stream.py the streaming mark; agents/ does not import bot/).
DISPATCH_EVENT = "flotilla_dispatch"  # `@agent <input>` for a step
RESULT_EVENT = "flotilla_result"  # a step's answer
FORM_EVENT = "flotilla_form"  # a user step's form, or a blocked step's question
NOTICE_EVENT = "flotilla_notice"  # a notice (plan card, plan stopped or finished)
OWN_POSTS = frozenset({DISPATCH_EVENT, FORM_EVENT, NOTICE_EVENT})
STREAMING_MARK = "streaming"  # in the payload of an answer whose final text is not stored

WINDOW_CHARS = 4_000  # the whole window, newest messages first
MESSAGE_CHARS = 400  # one message of the window
MIN_PASSAGE = 40  # a shorter text found inside a known one is a coincidence, not a repeat
REQUEST_HEADER = "The original request in this conversation:"
WINDOW_HEADER = "Recent messages in the thread (oldest first):"


@dataclass(frozen=True, slots=True)
class Known:
    """What a prompt already carries, so its thread window leaves it out."""

    texts: tuple[str, ...] = ()  # the input, the request, summaries shown
    plan_id: int | None = None  # the plan whose answers `steps` names
    steps: frozenset[int] = frozenset()  # steps whose answers reached the prompt as summaries


def flat(text: str) -> str:
    """`text` with its whitespace collapsed (how the window compares texts)."""
    return " ".join(text.split())


def carried(text: str, known: Iterable[str]) -> bool:
    """Whether `text` is one of the `known` texts, or a passage of one long enough to count."""
    text = flat(text)
    if not text:
        return True
    return any(text == k or (len(text) >= MIN_PASSAGE and text in k) for k in known)


def summary_refs(template: str) -> set[int]:
    """The steps whose `output_summary` a step input template refers to."""
    refs: set[int] = set()
    for name in TEMPLATE.findall(template):
        ref = STEP_REF.match(name.strip())
        if ref is not None and ref.group(2) == "output_summary":
            refs.add(int(ref.group(1)))
    return refs


def given_steps(plan: Plan, step_index: int | None, text: str) -> frozenset[int]:
    """The steps of `plan` whose summaries reached step `step_index` (its input is `text`):
    those its template refers to or whose summary is in `text`, and transitively the ones
    those steps were given through their own templates."""
    known = [flat(text)]
    todo = [s.index for s in plan.steps if s.output_summary and carried(s.output_summary, known)]
    own = plan.step(step_index) if step_index is not None else None
    if own is not None:
        todo += summary_refs(own.input)
    given: set[int] = set()
    while todo:
        index = todo.pop()
        if index in given or index == step_index:
            continue
        given.add(index)
        upstream = plan.step(index)
        if upstream is not None:
            todo += summary_refs(upstream.input)
    return frozenset(given)


def _event(message: Any) -> tuple[str | None, dict[str, Any]]:
    meta = getattr(message, "metadata", None)
    if not isinstance(meta, dict):
        return None, {}
    payload = meta.get("event_payload")
    return meta.get("event_type"), payload if isinstance(payload, dict) else {}


def left_out(message: Any, known: Known, texts: Sequence[str]) -> bool:
    """Whether the window leaves `message` out: see the module's docstring."""
    event, payload = _event(message)
    if event in OWN_POSTS or (event == RESULT_EVENT and payload.get(STREAMING_MARK)):
        return True
    if event == RESULT_EVENT and known.plan_id is not None:
        if payload.get("plan_id") == known.plan_id and payload.get("step") in known.steps:
            return True
    return carried(str(message.text or ""), texts)


def thread_window(
    thread: Sequence[Any],
    known: Known,
    *,
    budget: int = WINDOW_CHARS,
    per_message: int = MESSAGE_CHARS,
) -> list[str]:
    """The window's lines, oldest first: the newest messages not left out, within `budget`
    characters (each message cut to `per_message`)."""
    texts = [flat(t) for t in known.texts if t.strip()]
    lines: list[str] = []
    used = 0
    for message in reversed(thread):
        if left_out(message, known, texts):
            continue
        author = message.author_name or message.user_id or message.bot_id
        line = "- " + format_thread_line(author, str(message.text or ""), per_message)
        if used + len(line) + 1 > budget:
            break
        lines.append(line)
        used += len(line) + 1
    lines.reverse()
    return lines


def newest_plan_id(thread: Sequence[Any]) -> int | None:
    """The newest plan named by Flotilla's posts in the thread (its running plan), if any."""
    ids = [p.get("plan_id") for _e, p in map(_event, thread)]
    numbers = [i for i in ids if isinstance(i, int)]
    return max(numbers) if numbers else None


def prompt_with_context(task: str, request: str, window: Sequence[str]) -> str:
    """A run's first message: its task, the original request, the thread window."""
    lines = [task.strip(), ""]
    if request.strip() and flat(request) not in flat(task):  # e.g. `{{request}}` in the input
        lines += [REQUEST_HEADER, request.strip(), ""]
    if window:
        lines.append(WINDOW_HEADER)
        lines += window
    return "\n".join(lines).strip()
