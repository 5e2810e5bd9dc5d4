"""How a crash is noticed and recovered from: run leases, heartbeats and the replay of stored
inbound work (one part of `bot.settings.Settings`)."""

from __future__ import annotations

from pydantic import AliasChoices, BaseModel, Field, ValidationInfo, field_validator


class LeaseSettings(BaseModel):
    """The run lease, the heartbeat that renews it, and the inbox claim."""

    run_lease_seconds: float = Field(
        default=30.0,
        ge=1,
        le=3600,
        validation_alias=AliasChoices("FLOTILLA_RUN_LEASE_SECONDS"),
        description="After a crash, another replica takes a running step over within this.",
    )
    heartbeat_seconds: float = Field(
        default=5.0,
        gt=0,
        le=1800,
        validation_alias=AliasChoices("FLOTILLA_HEARTBEAT_SECONDS"),
        description="How often a running step renews its lease (and notices a cancel); "
        "less than half the lease.",
    )
    inbox_claim_seconds: float = Field(
        default=60.0,
        ge=5,
        le=86400,
        validation_alias=AliasChoices("FLOTILLA_INBOX_CLAIM_SECONDS"),
        description="A stored click, submission or command whose handling was cut short "
        "(a crash after the ack) is replayed after this many seconds.",
    )

    @field_validator("heartbeat_seconds")
    @classmethod
    def _beats_within_the_lease(cls, value: float, info: ValidationInfo) -> float:
        lease = info.data.get("run_lease_seconds")
        if lease is not None and value >= lease / 2:
            raise ValueError(
                f"must be less than half of FLOTILLA_RUN_LEASE_SECONDS ({lease:g} s), so a "
                f"missed heartbeat does not lose the lease: use at most {lease / 3:g}"
            )
        return value
