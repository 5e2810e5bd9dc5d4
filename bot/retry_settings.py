"""When a step whose run failed transiently is tried again: the step retry policy, in
Temporal's terms (one part of `bot.settings.Settings`). The other policies – a job's Slack
call, an outbox delivery, a storage outage, a commander turn – are fixed, and listed with
this one in `agents/core/retry_policy.py`."""

from __future__ import annotations

from datetime import timedelta

from pydantic import AliasChoices, BaseModel, Field, ValidationInfo, field_validator

from flotilla.agents.core.retry_policy import STEP, RetryPolicies, RetryPolicy


class RetrySettings(BaseModel):
    """The step retry policy: first wait, its growth, the longest wait, and the tries."""

    retry_initial_seconds: float = Field(
        default=STEP.initial_interval.total_seconds(),
        gt=0,
        le=3600,
        validation_alias=AliasChoices("FLOTILLA_RETRY_INITIAL_SECONDS"),
        description="The wait before a step whose run failed transiently (a timeout, 429, "
        "5xx) is tried again the first time; longer when the provider asked for longer.",
    )
    retry_backoff_coefficient: float = Field(
        default=STEP.backoff_coefficient,
        ge=1,
        le=10,
        validation_alias=AliasChoices("FLOTILLA_RETRY_BACKOFF_COEFFICIENT"),
        description="Each further wait is the one before times this.",
    )
    retry_maximum_seconds: float = Field(
        default=STEP.cap.total_seconds(),
        gt=0,
        le=86400,
        validation_alias=AliasChoices("FLOTILLA_RETRY_MAXIMUM_SECONDS"),
        description="The longest wait between two tries of a step.",
    )
    # tries in all for transient failures of a step; the old names are still read
    max_transient_failures: int = Field(
        default=STEP.maximum_attempts,
        ge=1,
        le=20,
        validation_alias=AliasChoices(
            "FLOTILLA_RETRY_MAXIMUM_ATTEMPTS",
            "FLOTILLA_MAX_TRANSIENT_FAILURES",
            "FLOTILLA_MAX_STEP_ATTEMPTS",
        ),
        description="Tries of a step for transient failures, the first included; then it "
        "counts as a real failure and its on_failure applies.",
    )

    @field_validator("retry_maximum_seconds")
    @classmethod
    def _not_below_the_first_wait(cls, value: float, info: ValidationInfo) -> float:
        first = info.data.get("retry_initial_seconds")
        if first is not None and value < first:
            raise ValueError(
                f"must be at least FLOTILLA_RETRY_INITIAL_SECONDS ({first:g} s), the first wait"
            )
        return value

    def retry_policies(self) -> RetryPolicies:
        """Every retry policy of the process, the step policy as set here."""
        step = RetryPolicy(
            initial_interval=timedelta(seconds=self.retry_initial_seconds),
            backoff_coefficient=self.retry_backoff_coefficient,
            maximum_interval=timedelta(seconds=self.retry_maximum_seconds),
            maximum_attempts=self.max_transient_failures,
        )
        return RetryPolicies(step=step)
