"""Built-in tools every agent may be given: `ask_user` and `read_thread`.

`ask_user` does not wait inside the run. It defers the call (pydantic-ai's
`CallDeferred(kind="question")`): the run ends with the question, its message history is
stored, the step becomes blocked, and the person's answer resumes the same run from that
history as the tool's return value.
"""

from __future__ import annotations

from pydantic_ai import RunContext
from pydantic_ai.exceptions import CallDeferred, ModelRetry

from flotilla.agents.planning.plan import FormSpec
from flotilla.agents.tools.context import RunDeps

ASK_USER = "ask_user"
READ_THREAD = "read_thread"
QUESTION_MAX_CHARS = 2000
THREAD_MESSAGE_MAX_CHARS = 1500


async def ask_user(ctx: RunContext[RunDeps], question: str, form: FormSpec | None = None) -> str:
    """Ask a person in the thread a question and wait for the answer.

    Use it only when you cannot do the task without information that only a person has.
    Give `form` to ask for specific fields; leave it out for one free-text answer.
    """
    question = question.strip()
    if not question:
        raise ModelRetry("ask_user needs a non-empty question.")
    if len(question) > QUESTION_MAX_CHARS:
        raise ModelRetry(f"Keep the question under {QUESTION_MAX_CHARS} characters.")
    metadata = {"question": question, "form": form.model_dump() if form else None}
    raise CallDeferred(metadata=metadata, kind="question")


async def read_thread(ctx: RunContext[RunDeps], last: int = 20) -> str:
    """Read the newest messages of this conversation's thread (oldest first)."""
    messages = ctx.deps.thread[-max(1, min(last, 200)) :]
    if not messages:
        return "The thread has no stored messages."
    return "\n".join(
        format_thread_line(m.author_name or m.user_id or m.bot_id, m.text) for m in messages
    )


def format_thread_line(author: str | None, text: str, limit: int = THREAD_MESSAGE_MAX_CHARS) -> str:
    """One thread message as a line of context, cut to `limit` characters."""
    text = " ".join(text.split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return f"{author or 'someone'}: {text}"
