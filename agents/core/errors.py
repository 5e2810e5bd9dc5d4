"""The error taxonomy of the agents layer.

Control flow and people-facing sentences depend on these types, never on message text.
Every run failure says whether it is worth retrying (`retryable`), like Temporal's
`ApplicationError(non_retryable=…)`.
"""

from __future__ import annotations

from datetime import timedelta


class FlotillaError(Exception):
    """Base of every error Flotilla raises on purpose. `str()` is a sentence for people."""


class PlanValidationError(FlotillaError, ValueError):
    """A plan (or a revision) the model proposed is invalid; nothing was stored.

    `problems` lists each issue as a sentence the model can act on
    ("step 3: wait_for names step 5, which comes later; a step may only wait for earlier steps").
    """

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        super().__init__("The plan is invalid:\n" + "\n".join(f"- {p}" for p in self.problems))


class OperationRejected(FlotillaError, ValueError):
    """A commander operation (retry, skip, edit, …) that the plan's state does not allow."""


class RunError(FlotillaError):
    """An agent run failed. `retryable` tells the orchestrator whether to re-dispatch.

    Two texts: `detail` (also `str(exc)`) is for operators – status code, provider, model
    and what to fix – and goes to the log; `public` is one short sentence safe to show a
    person in Slack, never library advice. Without `public=` the detail is taken to be a
    sentence for people already (errors Flotilla raises itself).
    """

    retryable: bool = False

    def __init__(
        self, detail: str, *, public: str | None = None, retryable: bool | None = None
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.public = public if public is not None else detail
        if retryable is not None:
            self.retryable = retryable


class TransientError(RunError):
    """Connection dropped, timeout, 429, 5xx or overloaded provider: worth another try.

    `retry_after`: how long the provider or Slack asked to wait (its `Retry-After`), honoured
    by the retry policy (`agents/core/retry_policy.py`); None when it said nothing."""

    retryable = True

    def __init__(
        self, detail: str, *, public: str | None = None, retry_after: timedelta | None = None
    ) -> None:
        super().__init__(detail, public=public)
        self.retry_after = retry_after


class PermanentError(RunError):
    """Other 4xx, usage limit exceeded, output still invalid after retries: retrying won't help."""

    retryable = False


class StorageError(TransientError):
    """The database could not be reached or was busy: retried with backoff until it is back,
    never counted against a step's attempts nor its model's transient retries."""
