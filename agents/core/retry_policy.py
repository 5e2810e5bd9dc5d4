"""When failed work is tried again: one policy type, in the style of Temporal's `RetryPolicy`,
and Flotilla's policies, by what they retry, in one place.

A policy says how long to wait after the n-th failure in a row – `initial_interval`, times
`backoff_coefficient` for each failure after the first, at most `maximum_interval`, and never
less than a `Retry-After` the provider or Slack asked for – and whether to try at all:
`maximum_attempts` tries in all (0: no limit), never for a non-retryable error or one of the
`non_retryable` kinds (an error's class name).

Tries are not counted here, nor waited for in a loop of this process: the stored counters
say how many tries were spent – a step's `transient_failures`, an outbox row's `failures` –
and the outbox is the loop that tries again (a row made due again at `now + delay`, or the
timer row that re-dispatches a step once its `not_before` has come). The one wait inside a
process is `before_ack`: a write that must be stored before Slack's 3 s ack.

    policy      what it retries                                first   ×  at most  tries
    step        a step's run that failed transiently (model        30 s    2  10 min   3 (a
                429/5xx, timeouts): a new attempt of the step                          setting)
    job         a run or turn whose Slack call failed transiently: 15 s    1  15 s     8
                handed over, its stored run answers again
    delivery    an outbox effect (a post, a card) not delivered    2 s     2  5 min    8
    storage     work whose database was away: handed over,         1 s     2  60 s     no limit
                counted against nothing
    commander   a commander turn that failed or stalled its plan   10 s    1  10 s     3
    before_ack  a request stored before its ack, database busy     50 ms   2  1 s      2 s budget
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import timedelta

from flotilla.agents.core.errors import RunError, TransientError


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How long to wait after each failure, and how many tries in all (Temporal's fields)."""

    initial_interval: timedelta
    backoff_coefficient: float = 2.0
    maximum_interval: timedelta | None = None  # None: 100 × the initial interval (Temporal)
    maximum_attempts: int = 0  # tries in all, the first included; 0: no limit
    non_retryable: frozenset[str] = field(default_factory=frozenset)  # error class names

    def __post_init__(self) -> None:
        if self.initial_interval <= timedelta(0):
            raise ValueError("a retry policy's initial interval must be positive")
        if self.backoff_coefficient < 1:
            raise ValueError("a retry policy's backoff coefficient must be at least 1")
        if self.maximum_attempts < 0:
            raise ValueError("a retry policy's maximum attempts must be 0 (no limit) or more")

    @property
    def cap(self) -> timedelta:
        """The longest wait between two tries."""
        return self.maximum_interval or self.initial_interval * 100

    def delay(self, failures: int, retry_after: timedelta | None = None) -> timedelta:
        """The wait after the `failures`-th failure in a row (≥ 1): initial interval ×
        coefficient^(failures − 1), at most the cap; at least `retry_after` when the other
        side asked for it (a `Retry-After` is honoured even above the cap)."""
        exponent = min(max(failures - 1, 0), 60)
        seconds = self.initial_interval.total_seconds() * self.backoff_coefficient**exponent
        wait = min(timedelta(seconds=min(seconds, 10**9)), self.cap)
        if retry_after is not None and retry_after > wait:
            return retry_after
        return wait

    def tries_left(self, failures: int) -> bool:
        """Whether another try is allowed after `failures` tries failed."""
        return self.maximum_attempts == 0 or failures < self.maximum_attempts

    def retries(self, error: BaseException, failures: int) -> bool:
        """Whether work that failed with `error`, its `failures`-th failure, is tried again."""
        if isinstance(error, RunError) and not error.retryable:
            return False
        if type(error).__name__ in self.non_retryable:
            return False
        return self.tries_left(failures)

    def with_attempts(self, maximum_attempts: int) -> RetryPolicy:
        """The same policy with another number of tries (a plan keeps its own)."""
        return replace(self, maximum_attempts=maximum_attempts)


def retry_after(error: BaseException) -> timedelta | None:
    """The wait the provider or Slack asked for, carried on a transient error (else None)."""
    return error.retry_after if isinstance(error, TransientError) else None


STEP = RetryPolicy(
    initial_interval=timedelta(seconds=30),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(minutes=10),
    maximum_attempts=3,
)
JOB = RetryPolicy(
    initial_interval=timedelta(seconds=15), backoff_coefficient=1.0, maximum_attempts=8
)
DELIVERY = RetryPolicy(
    initial_interval=timedelta(seconds=2), maximum_interval=timedelta(minutes=5), maximum_attempts=8
)
STORAGE = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=60))
COMMANDER = RetryPolicy(
    initial_interval=timedelta(seconds=10), backoff_coefficient=1.0, maximum_attempts=3
)
BEFORE_ACK = RetryPolicy(
    initial_interval=timedelta(milliseconds=50), maximum_interval=timedelta(seconds=1)
)
BEFORE_ACK_BUDGET = timedelta(seconds=2)  # of Slack's 3 s: the store's tries, waits included

# Inside one Web API call, slack_sdk's retry handlers wait out a 429 (its Retry-After) and
# retry a 5xx this many times before the call fails with a TransientError (the job policy)
SLACK_CALL_RATE_LIMITED_RETRIES = 3
SLACK_CALL_SERVER_ERROR_RETRIES = 2


@dataclass(frozen=True, slots=True)
class RetryPolicies:
    """Every retry policy of a process, by what it retries (see the module's table); only the
    step policy is an operator's setting (`FLOTILLA_RETRY_*`)."""

    step: RetryPolicy = STEP
    job: RetryPolicy = JOB
    delivery: RetryPolicy = DELIVERY
    storage: RetryPolicy = STORAGE
    commander: RetryPolicy = COMMANDER
