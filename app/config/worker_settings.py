"""The worker and leases section: how a worker claims, keeps and gives back a conversation.

Also how many turns run at once, per worker process and per owner, and when the janitor gives up.
"""

from __future__ import annotations

from typing import ClassVar, Literal, Self

from pydantic import Field, model_validator

from app.config.section import Section, variable_of


class WorkerSettings(Section):
    """Leases, heartbeats, recovery and the limits on running turns."""

    title: ClassVar[str] = "Worker and leases"

    lease_ttl_seconds: float = Field(
        30,
        gt=0,
        description="how long a worker's claim lasts without renewal: how soon a frozen or cut-off "
        "worker's turn is re-enqueued (a dead one's is, within a second, by its liveness token)",
    )
    heartbeat_seconds: float = Field(
        10,
        gt=0,
        description="how often a running worker renews its claim (must be shorter than the lease)",
    )
    recovery_interval_seconds: float = Field(
        15,
        gt=0,
        description="how often each worker sweeps for turns nobody touched for a lease's length "
        "(a frozen or cut-off worker, a lost doorbell)",
    )
    liveness_token: bool = Field(
        True,
        description="each worker process holds a PostgreSQL session advisory lock on a connection "
        "of its own, which the database drops when the process dies, so a dead worker's turns "
        "continue within seconds; false behind a pooler in transaction mode (detected, too: the "
        "leases then wait out their TTL)",
    )
    dead_worker_sweep_seconds: float = Field(
        1.0,
        gt=0,
        description="how often each worker looks for leases whose worker's liveness token is gone",
    )
    lost_doorbell_seconds: float = Field(
        3.0,
        gt=0,
        description="how long a queued turn may wait for a worker before the dead-worker sweep "
        "rings its doorbell again (a doorbell Redis lost: a flush, a restart, an outage); then "
        "again after twice as long each time, up to the lease's length",
    )
    history_cache_mb: float = Field(
        256,
        ge=0,
        description="memory a worker process gives the transcripts it keeps between their "
        "conversations' turns (least recently used dropped first), so a claim reads only the "
        "messages committed since; 0: every claim reads the whole transcript",
    )
    max_attempts: int = Field(
        3,
        ge=1,
        le=100,
        description="claims of a turn that may end without committing a step before it is "
        "failed (a tool that kills its worker)",
    )
    stale_after_seconds: float = Field(
        300,
        gt=0,
        description="the janitor fails running conversations whose heartbeat is older than this",
    )
    max_in_flight: int = Field(
        500, ge=1, le=10_000, description="conversations one worker process runs at once"
    )
    event_loop: Literal["uvloop", "asyncio"] = Field(
        "uvloop",
        description="the worker's event loop: uvloop (measured 0-3 % faster per step) or "
        "asyncio's own; asyncio where uvloop is not installed",
    )
    database_io: Literal["threads", "async"] = Field(
        "threads",
        description="how a turn's step statements reach PostgreSQL: on the worker's database "
        "threads, or awaited on its event loop (psycopg's async connections: no thread hop, ~60 us "
        "less per statement alone, no gain measured per step: docs/PERFORMANCE.md)",
    )
    shutdown_grace_seconds: float = Field(
        10,
        ge=0,
        description="on SIGTERM, how long running turns may finish; the rest are released and "
        "re-enqueued for another worker",
    )
    owner_max_running_turns: int | None = Field(
        None,
        ge=1,
        description="the most turns one owner's conversations run at once (unset: no limit); "
        "a worker claims another of the owner's turns only when one ends, and "
        "`CHATWORKER_OWNER_LIMIT_POLICY` says what a new turn past the limit does",
    )
    owner_limit_policy: Literal["queue", "reject"] = Field(
        "queue",
        description="past the owner's limit: `queue` accepts the message and its turn waits for "
        "one of the owner's turns to end; `reject` answers 429 `too_many_running_turns` with "
        "`Retry-After`, nothing written",
    )

    @model_validator(mode="after")
    def _heartbeat_within_lease(self) -> Self:
        if self.heartbeat_seconds >= self.lease_ttl_seconds:
            heartbeat = variable_of(type(self), "heartbeat_seconds")
            lease = variable_of(type(self), "lease_ttl_seconds")
            raise ValueError(
                f"{heartbeat} ({self.heartbeat_seconds}) must be shorter than "
                f"{lease} ({self.lease_ttl_seconds}), "
                "or a live worker loses its lease between two heartbeats"
            )
        return self
