"""The webhooks section: how a worker sends a webhook delivery, retries it, and gives it up.

A delivery is leased like a turn, so a worker that dies sending one leaves it to another.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Self

from pydantic import Field, field_validator, model_validator
from pydantic_settings import NoDecode

from app.config.section import Section, comma_list, variable_of
from app.egress import Network, parse_networks


class WebhookSettings(Section):
    """The receiver's timeout, the retry schedule, the delivery lease, the poll, the opt-out."""

    title: ClassVar[str] = "Webhooks"

    webhook_timeout_seconds: float = Field(
        10, gt=0, le=300, description="how long a webhook's receiver has to answer one POST"
    )
    webhook_retry_schedule: Annotated[tuple[float, ...], NoDecode] = Field(
        (5, 60, 300, 1800, 7200, 18000, 28800, 28800),
        description="the waits (seconds, comma-separated) before each new attempt of a failed "
        "webhook delivery; after the last it is given up (`failed`, listed by the API); the "
        "default makes 9 attempts over about a day",
    )
    webhook_lease_seconds: float = Field(
        60,
        gt=0,
        description="how long a worker holds a delivery it is sending; if it dies, another sends "
        "it after (must be longer than the timeout)",
    )
    webhook_poll_seconds: float = Field(
        1,
        gt=0,
        le=60,
        description="how often a worker looks for due webhook deliveries (and at once when a "
        "turn ends on it)",
    )
    webhook_delivery: bool = Field(
        True,
        description="this worker delivers webhooks (`false`: leave them to the others)",
    )
    webhook_allowed_networks: Annotated[tuple[str, ...], NoDecode] = Field(
        (),
        description="networks (CIDR, comma-separated) a webhook may be sent to although they are "
        "loopback, private, link-local or reserved (refused by default: a receiver on your own "
        "network must be listed, e.g. 10.1.0.0/16)",
    )
    webhook_owner_concurrency: int = Field(
        4,
        ge=1,
        le=50,
        description="deliveries of one owner a worker sends at once (a slow receiver holds only "
        "its owner's)",
    )

    @field_validator("webhook_retry_schedule", mode="before")
    @classmethod
    def _parse_schedule(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                value = tuple(float(part) for part in comma_list(value))
            except ValueError:
                raise ValueError("must be seconds separated by commas, e.g. 5,60,300") from None
        if any(wait < 0 for wait in value):
            raise ValueError("a wait cannot be negative")
        return value

    @field_validator("webhook_allowed_networks", mode="before")
    @classmethod
    def _parse_networks(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = tuple(comma_list(value))
        parse_networks(value)  # ValueError names a bad one
        return tuple(value)

    @property
    def webhook_networks(self) -> tuple[Network, ...]:
        """The allowed networks, parsed."""
        return parse_networks(self.webhook_allowed_networks)

    @model_validator(mode="after")
    def _webhook_lease_past_timeout(self) -> Self:
        if self.webhook_lease_seconds <= self.webhook_timeout_seconds:
            lease = variable_of(type(self), "webhook_lease_seconds")
            timeout = variable_of(type(self), "webhook_timeout_seconds")
            raise ValueError(
                f"{lease} ({self.webhook_lease_seconds}) must be longer than "
                f"{timeout} ({self.webhook_timeout_seconds}), "
                "or a slow receiver gets every delivery twice"
            )
        return self
