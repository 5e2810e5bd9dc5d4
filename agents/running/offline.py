"""The offline model: deterministic, no network, no key – for the local trial and for tests.

It is a pydantic-ai `FunctionModel`, so everything goes through the real agent loop: it
answers with real tool calls (`create_plan`, `reply`, `ask_user`, `final_result`, the
steering tools) that pydantic-ai validates and executes. Every text it writes starts
with "[offline model]".

As the commander (a turn with the `create_plan` tool) it recognises:

- a comparison to write up – "compare … pricing … competitors … and draft a note" (any of
  compare/pricing/competitor together with draft/note/write): a **diamond** plan –
  1 researcher ‖ 2 analyst -> 3 user form "which tiers?" -> 4 writer -> 5 commander synthesis;
- research to write up – research/investigate/find out together with write/draft/report/
  summarise: researcher -> writer -> commander synthesis;
- anything else: a short answer with `reply`.

Markers in the request, copied into the first line of the plan's first step input:

- `[fail transient]` – that step's run fails with a provider-style HTTP 503 (transient);
- `[fail]` – that step's run fails with an HTTP 400 (a real failure);
- `[ask]` – that step's agent calls `ask_user` before answering, and uses the answer;
- `[bad plan]` (commander only) – the first `create_plan` call is invalid (a step waits for
  a later one); the validation errors come back and the second call is corrected.

The same markers on the first line of a sub-agent's step input act on that step (a marker
inside a quoted request, e.g. from `{{request}}` on a later line, does not).

Asked for a plan's final answer (agents/delivering/plan_endings.py), the commander lists the
request and
each step's result. Woken after a failure, the offline commander retries the failed step
without its failure marker when it had one, and skips it otherwise; woken by a person's
message containing "cancel" or "stop" it cancels the plan; a message asking for more
("also", "add", "mention", "include", "make sure", "instead") is added to the first pending
sub-agent step's input (`edit_step`, as the walkthrough shows); anything else is
acknowledged with `reply`. The steps of its own plans get canned, plausible sample work
(`offline_content.py`: a competitor price list, our price sheet, a note for sales that
follows the tiers chosen and what the thread asked for, findings, a report, the closing
words); any other step is answered from its input (its first line and the upstream material
it was given). A person's answer to an agent's question is used. Files: a researcher quotes
the first lines of the text files attached to the request; a writer whose task asks for a
note writes it as `note.md` with `write_file` before answering.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from pydantic_ai.exceptions import (
    ModelHTTPError,
    ModelRequestRejectedError,
    ModelUnavailableError,
)
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from flotilla.agents.running.offline_content import canned, note_text
from flotilla.agents.running.offline_plans import chain, diamond
from flotilla.agents.running.step_files import ATTACHED_HEADER
from flotilla.agents.running.streamed_function import streamed
from flotilla.agents.tools.files import WRITE_FILE

PREFIX = "[offline model]"
MODEL_NAME = "offline"
FAIL_TRANSIENT = "[fail transient]"
FAIL = "[fail]"
ASK = "[ask]"
BAD_PLAN = "[bad plan]"
FINAL_ANSWER = "Write the final answer to the request"  # agents/delivering/plan_endings.py's task
MARKERS = (FAIL_TRANSIENT, FAIL, ASK)
NOTE_NAME = "note.md"  # the file the offline writer writes when its task asks for a note
_CONTEXT_HEADERS = ("\n\nThe original request in this conversation:", "\n\nRecent messages in")


def offline_model() -> FunctionModel:
    """The offline model as a pydantic-ai model (no network, deterministic answers)."""
    return FunctionModel(respond, stream_function=streamed(respond), model_name=MODEL_NAME)


def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The offline model's answer to a request: commander turn, steering turn, or a step."""
    tools = {t.name for t in info.function_tools}
    if "create_plan" in tools:
        return _plan_turn(messages, info)
    if "retry_step" in tools:
        return _steer_turn(messages)
    return _step_turn(messages, info, tools)


# --- reading the conversation --------------------------------------------------------------


def first_prompt(messages: Sequence[ModelMessage]) -> str:
    """The run's first user prompt (the step input or request, with its context); of a
    prompt sent with files, its text."""
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    return part.content
                if isinstance(part, UserPromptPart):
                    return next((c for c in part.content if isinstance(c, str)), "")
    return ""


def _task(prompt: str) -> str:
    """The step input / new message: the prompt without the context the runtime appends."""
    cut = len(prompt)
    for header in _CONTEXT_HEADERS:
        found = prompt.find(header)
        if found != -1:
            cut = min(cut, found)
    return prompt[:cut].strip()


def _returns(messages: Sequence[ModelMessage]) -> list[ToolReturnPart]:
    last = messages[-1] if messages else None
    if not isinstance(last, ModelRequest):
        return []
    return [p for p in last.parts if isinstance(p, ToolReturnPart)]


def _roster(instructions: str | None) -> list[str]:
    """Sub-agent names from the commander's instructions ("- name: description" lines)."""
    names: list[str] = []
    listing = False
    for line in (instructions or "").splitlines():
        if line.startswith("Sub-agents you can assign"):
            listing = True
        elif listing and line.startswith("- ") and ":" in line:
            names.append(line[2:].split(":", 1)[0].strip())
        elif listing and not line.strip():
            break
    return [n for n in names if not n.startswith("(")]


def _markers(text: str) -> str:
    found = [m for m in MARKERS if m in text]
    return (" " + " ".join(found)) if found else ""


def _without_markers(text: str) -> str:
    for marker in (*MARKERS, BAD_PLAN):
        text = text.replace(marker, "")
    return "\n".join(" ".join(line.split()) for line in text.splitlines()).strip()


def _call(name: str, args: dict[str, Any]) -> ModelResponse:
    return ModelResponse(parts=[ToolCallPart(name, args)], model_name=MODEL_NAME)


def _text(text: str) -> ModelResponse:
    return ModelResponse(parts=[TextPart(f"{PREFIX} {text}")], model_name=MODEL_NAME)


# --- the commander -------------------------------------------------------------------------


def _plan_turn(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    request = _task(first_prompt(messages))
    returns = _returns(messages)
    if returns:
        part = returns[-1]
        if part.tool_name == "create_plan" and part.outcome != "success":
            if _attempted(messages, "create_plan") >= 2:
                return _call("reply", {"text": f"{PREFIX} I could not write a valid plan."})
            return _call("create_plan", {"steps": _plan_for(request, info, bad=False)})
        if part.tool_name == "create_plan":
            steps = _plan_for(request, info, bad=False)
            return _text(f"I wrote a plan of {len(steps)} steps: {_flow(steps)}.")
        return _text("Done.")
    steps = _plan_for(request, info, bad=BAD_PLAN in request)
    if steps:
        return _call("create_plan", {"steps": steps})
    return _call("reply", {"text": _short_answer(request)})


def _flow(steps: list[dict[str, Any]]) -> str:
    """Who works when, e.g. "the researcher and the analyst at once, then you (a form), then
    the writer, then I review it and answer"."""
    depth: dict[int, int] = {}
    for step in steps:  # a valid plan lists a step after those it waits for
        after = step.get("wait_for", [step["index"] - 1] if step["index"] > 1 else [])
        depth[step["index"]] = 1 + max((depth.get(i, 0) for i in after), default=-1)
    stages: dict[int, list[str]] = {}
    for step in steps:
        stages.setdefault(depth[step["index"]], []).append(_who(step["assignee"]))
    said: list[str] = []
    for level in sorted(stages):
        names = list(dict.fromkeys(stages[level]))
        together = " and ".join(names) + (" at once" if len(names) > 1 else "")
        said.append(together if not said else "then " + together)
    return ", ".join(said)


def _who(assignee: str) -> str:
    if assignee == "user":
        return "you (a form)"
    if assignee == "commander":
        return "I review it and answer"
    return f"the {assignee}"


def _attempted(messages: Sequence[ModelMessage], tool: str) -> int:
    return sum(
        1
        for m in messages
        if isinstance(m, ModelResponse)
        for p in m.parts
        if isinstance(p, ToolCallPart) and p.tool_name == tool
    )


def _short_answer(request: str) -> str:
    asked = " ".join(_without_markers(request).split())[:200]
    return (
        f"{PREFIX} You asked: “{asked}”. I am Flotilla's offline model, so I answer without "
        "a provider. Try “compare our pricing with competitors and draft a note” to see the "
        "team plan and work."
    )


def _wants(text: str, *words: str) -> bool:
    return any(w in text for w in words)


def _plan_for(request: str, info: AgentInfo, *, bad: bool) -> list[dict[str, Any]]:
    low = request.lower()
    roster = _roster(info.instructions)
    writes = _wants(low, "draft", "note", "write", "report", "summar")
    marks = _markers(request)
    if _wants(low, "compare", "pricing", "competitor") and writes:
        return diamond(roster, marks, bad=bad)
    if _wants(low, "research", "investigate", "find out") and writes:
        return chain(roster, marks, bad=bad)
    return []


def _steer_turn(messages: list[ModelMessage]) -> ModelResponse:
    returns = _returns(messages)
    if returns:
        edited = next((r for r in returns if r.tool_name == "edit_step"), None)
        if edited is not None and edited.outcome == "success":
            return _text("Noted – added to the next step's instructions before it starts.")
        return _text("Noted.")
    prompt = first_prompt(messages)
    failed = re.search(r"^Failed step: (\d+)$", prompt, re.MULTILINE)
    if failed:
        index = int(failed.group(1))
        line = re.search(
            rf'^- step {index} \[[a-z_]+\] .*?\| input: ("(?:[^"\\]|\\.)*")', prompt, re.M
        )
        step_input = json.loads(line.group(1)) if line else ""
        if any(m in step_input for m in MARKERS):
            return _call("retry_step", {"index": index, "input": _without_markers(step_input)})
        return _call("skip_step", {"index": index, "reason": f"{PREFIX} skipped after it failed"})
    happened = prompt.split("What happened:", 1)[-1].split("\n\nThe plan now:", 1)[0].strip()
    addressed = re.search(r" wrote to ([a-z0-9_-]+) directly: (.+)", happened)
    if addressed:  # a person addressed an agent: its request becomes that agent's step
        last = max((int(i) for i in re.findall(r"^- step (\d+) ", prompt, re.M)), default=0)
        step: dict[str, Any] = {
            "index": last + 1,
            "title": "As asked in the thread",
            "wait_for": [],
            "assignee": addressed.group(1),
            "input": addressed.group(2).strip(),
        }
        return _call("add_steps", {"steps": [step]})
    if _wants(happened.lower(), "cancel", "stop"):
        return _call("cancel_plan", {"reason": f"{PREFIX} cancelled as asked in the thread"})
    said = happened.split(" wrote: ", 1)[-1].strip()
    pending = re.search(
        r"^- step (\d+) \[pending\] \((?!user\)|commander\))([^)]+)\) .*?\| input: "
        r'("(?:[^"\\]|\\.)*")',
        prompt,
        re.M,
    )
    if pending and _wants(
        said.lower(), "also", "add", "mention", "include", "make sure", "instead"
    ):
        index, old_input = int(pending.group(1)), json.loads(pending.group(3))
        return _call(
            "edit_step",
            {"index": index, "input": f"{old_input}\nAlso, as asked in the thread: {said}"},
        )
    return _call("reply", {"text": f"{PREFIX} Noted; the plan continues."})


# --- a sub-agent's step --------------------------------------------------------------------


def _step_turn(messages: list[ModelMessage], info: AgentInfo, tools: set[str]) -> ModelResponse:
    task = _task(first_prompt(messages))
    # markers act on the step's own first line, not on a quoted request ({{request}})
    own = task.splitlines()[0] if task else ""
    returns = _returns(messages)
    answer = next((r for r in returns if r.tool_name == "ask_user"), None)
    if not returns:
        if FAIL_TRANSIENT in own:
            raise ModelHTTPError.for_category(
                ModelUnavailableError,
                status_code=503,
                model_name=MODEL_NAME,
                body={"error": f"{PREFIX} simulated transient failure"},
            )
        if FAIL in own:
            raise ModelHTTPError.for_category(
                ModelRequestRejectedError,
                status_code=400,
                model_name=MODEL_NAME,
                body={"error": f"{PREFIX} simulated failure"},
            )
        if ASK in own and "ask_user" in tools:
            headline = _headline(task)
            return _call(
                "ask_user",
                {"question": f"{PREFIX} Before I start “{headline}”: what should I focus on?"},
            )
    if task.startswith(FINAL_ANSWER):
        return _final_answer(task)
    agent = _agent_name(info)
    if _writes_note(agent, own, tools, messages):
        return _call(
            WRITE_FILE, {"name": NOTE_NAME, "content_type": "text/markdown", "text": _note(task)}
        )
    read = _attachments(first_prompt(messages)) if "research" in agent else []
    return _final(info, agent, task, answer.content if answer else None, read)


def _writes_note(agent: str, own: str, tools: set[str], messages: list[ModelMessage]) -> bool:
    """The writer writes `note.md` when its task asks for a note (once per run)."""
    return (
        "writ" in agent
        and "note" in own.lower()
        and WRITE_FILE in tools
        and _attempted(messages, WRITE_FILE) == 0
    )


def _note(task: str) -> str:
    if canned(task, _headline(task), None, ()) is not None:
        return note_text(task)
    lines = [f"# {_headline(task)}", ""]
    lines += [f"- {_without_markers(line)[:300]}" for line in task.splitlines()[1:] if line.strip()]
    return "\n".join(lines) + "\n"


def _attachments(prompt: str) -> list[str]:
    """What an agent reads of the text files attached to the request: each file's first
    lines (the runtime puts them after "Files attached to the request:")."""
    section = prompt.split(ATTACHED_HEADER, 1)
    if len(section) < 2:
        return []
    found = []
    for match in re.finditer(r"^--- (.+?) ---\n(.*?)\n--- end of \1 ---", section[1], re.S | re.M):
        rows = [" ".join(r.split()) for r in match.group(2).splitlines() if r.strip()]
        found.append(f"read {match.group(1)}: " + "; ".join(rows[:4])[:300])
    return found


def _final_answer(task: str) -> ModelResponse:
    """The commander's final answer of a plan: the request, then each step's result."""
    lines = task.splitlines()
    asked = next((ln.removeprefix("Request: ") for ln in lines if ln.startswith("Request: ")), "")
    found = [
        re.sub(r"^Step \d+ \([^)]*\) ", "", ln) for ln in lines if re.match(r"Step \d+ \(", ln)
    ]
    head = f"{PREFIX} What the team found" + (f" for “{asked[:200]}”" if asked else "") + ":"
    message = "\n".join([head, *(f"- {r[:300]}" for r in found)])
    return _call("final_result", {"message": message, "summary": f"{len(found)} step results"})


def _agent_name(info: AgentInfo) -> str:
    found = re.search(r"\(`([^`]+)`\)", info.instructions or "")
    return found.group(1) if found else "agent"


def _headline(task: str) -> str:
    first = _without_markers(task.splitlines()[0] if task else "").strip()
    return first[:160] or "the task"


def _final(
    info: AgentInfo, agent: str, task: str, answer: Any, read: Sequence[str] = ()
) -> ModelResponse:
    headline = _headline(task)
    answered = _answer_text(answer) if answer is not None else None
    work = canned(task, headline, answered, read)
    if work is not None:
        first, *rest = work.lines
        message = "\n".join([f"{PREFIX} {agent}: {first}", *rest])
        return _report(info, message, work.summary)
    material = [_without_markers(line) for line in task.splitlines()[1:] if line.strip()]
    lines = [f"{PREFIX} {agent}: {headline}"]
    lines += [f"- from the input: {m[:200]}" for m in material[:4]]
    if answered is not None:
        lines.append(f"- as answered in the thread: {answered}")
    lines += [f"- {r}" for r in read]
    message = "\n".join(lines)
    summary = f"{agent} (offline) on “{headline[:120]}”"
    if answered is not None:
        summary += f"; answered: {answered[:120]}"
    if material:
        summary += f"; input ended with: {material[-1][:120]}"
    if read:
        summary += f"; {read[0][:160]}"
    return _report(info, message, summary)


def _report(info: AgentInfo, message: str, summary: str) -> ModelResponse:
    if any(t.name == "final_result" for t in info.output_tools):
        return _call("final_result", {"message": message, "summary": summary})
    return ModelResponse(parts=[TextPart(message)], model_name=MODEL_NAME)


def _answer_text(answer: Any) -> str:
    """A person's answer as words: the plain question's one field as its value ("Pro", not
    "answer: Pro"), a form's fields named ("tiers: Pro, notes: …")."""
    if isinstance(answer, dict):
        if list(answer) == ["answer"]:
            return str(answer["answer"])
        return ", ".join(f"{k}: {v}" for k, v in answer.items())
    return str(answer)
