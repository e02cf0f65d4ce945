"""A conversation: the unit of state, with its status, its turn counters and its lease.

Status and tool choice are closed sets enforced by CHECK constraints; the partial indexes on
`heartbeat_at` let the janitor find running conversations that went silent, and the recovery round
the queued ones nobody took (a lost doorbell), without a table scan.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from types import MappingProxyType
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    DateTime,
    Index,
    Integer,
    Numeric,
    String,
    Text,
    Uuid,
    false,
    func,
    true,
)
from sqlalchemy import text as sql_text
from sqlalchemy.orm import Mapped, mapped_column

from app.models.base import Base, JsonType, in_list
from app.vocabulary import FAILED, IDLE, RUNNING_STATUSES, STATUSES, TOOL_CHOICES

#: The SQL of a queued conversation: running, and no worker holds it (its partial index's WHERE,
#: written as constants so a prepared statement's generic plan can use the index too).
UNHELD_SQL = f"{in_list('status', RUNNING_STATUSES)} AND lease_owner IS NULL"

#: A forced tool narrows `required` to one tool: it never comes with `auto` or `none`.
FORCED_TOOL_SQL = "forced_tool IS NULL OR tool_choice = 'required'"

#: The columns of a conversation that no worker holds: what every end of a lease writes (an answer,
#: a failure, a release at shutdown, the janitor, a new turn from the web app). Defined once.
#: The seed of an owner's advisory lock key (`hashtextextended(owner, seed)`), taken by the
#: worker's limited claim and the web side's `reject` check alike (per-owner limits).
OWNER_LOCK_SEED = 7
#: The class of the session advisory lock a worker process holds while it lives (its liveness
#: token, `app/worker/store/liveness.py`); the operators' fleet reads who holds one.
LIVENESS_NAMESPACE = 0x63687768
#: How a worker's liveness session names itself (`application_name`, then its lease owner name).
LIVENESS_APPLICATION = "chatworker liveness"

RELEASED_LEASE: Mapping[str, None] = MappingProxyType(
    {"lease_owner": None, "lease_expires_at": None, "lease_token": None}
)


class Conversation(Base):
    __tablename__ = "conversations"
    __table_args__ = (
        CheckConstraint(in_list("status", STATUSES), name="status"),
        CheckConstraint(in_list("tool_choice", TOOL_CHOICES), name="tool_choice"),
        CheckConstraint(FORCED_TOOL_SQL, name="forced_tool_required"),
        CheckConstraint("iterations >= 0", name="iterations_not_negative"),
        CheckConstraint("lease_epoch >= 0", name="lease_epoch_not_negative"),
        CheckConstraint("attempts >= 0", name="attempts_not_negative"),
        CheckConstraint("turn_number <= turn_count", name="turn_number_submitted"),
        Index(
            "ix_conversations_running_heartbeat",
            "heartbeat_at",
            postgresql_where=sql_text(in_list("status", RUNNING_STATUSES)),
            sqlite_where=sql_text(in_list("status", RUNNING_STATUSES)),
        ),
        # Resting conversations by when they were last touched (`chatworker prune`).
        Index(
            "ix_conversations_resting_updated",
            "updated_at",
            "id",
            postgresql_where=sql_text(in_list("status", (IDLE, FAILED))),
            sqlite_where=sql_text(in_list("status", (IDLE, FAILED))),
        ),
        # The queued ones (running, no worker holds them) by when they were last touched: the
        # recovery round rings again those nobody took for a few seconds (a lost doorbell).
        Index(
            "ix_conversations_queued",
            "heartbeat_at",
            postgresql_where=sql_text(UNHELD_SQL),
            sqlite_where=sql_text(UNHELD_SQL),
        ),
        # An owner's conversations, newest first (`GET /v1/conversations`).
        Index("ix_conversations_owner_created", "owner", "created_at", "id"),
        # An owner's running conversations, oldest first (per-owner limits: the claim's count,
        # the web side's, the next one to ring when a turn ends).
        Index(
            "ix_conversations_owner_running",
            "owner",
            "updated_at",
            postgresql_where=sql_text(in_list("status", RUNNING_STATUSES)),
            sqlite_where=sql_text(in_list("status", RUNNING_STATUSES)),
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    status: Mapped[str] = mapped_column(String(16), default=IDLE, server_default=IDLE)
    # Who may see it through the HTTP API (an API key's owner, a token's `sub`); None: created by
    # a trusted caller (the Python client, the CLI) for nobody in particular.
    owner: Mapped[str | None] = mapped_column(String(200))
    error: Mapped[str | None] = mapped_column(Text)
    model: Mapped[str] = mapped_column(String(200))
    instructions: Mapped[str | None] = mapped_column(Text)
    allowed_tools: Mapped[list[str]] = mapped_column(JsonType, default=list)
    tool_choice: Mapped[str] = mapped_column(String(16), default="auto", server_default="auto")
    # The one tool the model must call (OpenAI's `{"type": "function", "name": ...}`), with
    # `tool_choice` 'required'; NULL: any tool `tool_choice` allows (`client/tool_choice.py`).
    forced_tool: Mapped[str | None] = mapped_column(String(200))
    # Tools the web app's client executes ({"name", "description", "parameters"}); a call of one
    # pauses the turn until the client posts its output.
    client_tools: Mapped[list[dict[str, Any]] | None] = mapped_column(JsonType)
    # Tools whose every call the user approves first, beyond each MCP server's own policy.
    approval_tools: Mapped[list[str] | None] = mapped_column(JsonType)
    # Whether the model may ask the user a question (`agent_clarify`) when it uses tools.
    clarify: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    # What the model is sent when the transcript grows (`app/worker/context.py`): the window,
    # threshold, summary model and switches that override the settings for this conversation.
    context_policy: Mapped[dict[str, Any] | None] = mapped_column(JsonType)
    # The JSON Schema every final answer must match ({"name", "schema", "strict"}; a message
    # may ask for its own, `turns.output_schema`): checked before a turn completes.
    output_schema: Mapped[dict[str, Any] | None] = mapped_column(JsonType)
    # The models a call falls back to, in order, when the one in use is down (None: the
    # settings' `CHATWORKER_FALLBACK_MODELS`).
    fallback_models: Mapped[list[str] | None] = mapped_column(JsonType)
    # The conversation it was forked from, and the seq there of the last message copied.
    forked_from: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    forked_at_seq: Mapped[int | None] = mapped_column(Integer)
    # Opaque to the worker: the web app's own tracking data, passed through untouched.
    context: Mapped[dict[str, Any] | None] = mapped_column(JsonType)
    iterations: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Claims of this turn since its last committed step: bounds a step that kills its worker.
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")

    lease_owner: Mapped[str | None] = mapped_column(String(200))
    # The call a worker started last of a tool that may not simply run again (neither read-only
    # nor idempotent): found with no result by a later claim, it was running when its worker
    # stopped, and may or may not have happened.
    in_flight: Mapped[str | None] = mapped_column(String(200))
    # The current lease was taken from a worker that stopped without releasing it (a crash, a
    # kill, a partition): set by every claim, for the metrics and traces of a resumed turn.
    taken_over: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    lease_epoch: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    lease_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # The liveness token the lease holder's process held when it claimed (`worker/store/liveness`):
    # once the database no longer shows it held, the holder is dead and the lease is free at once.
    # None: the lease lasts until `lease_expires_at` (no token: a pooler, SQLite, turned off).
    # A lease that changes hands keeping its last holder's token (a claim of the previous
    # release, which knows no tokens) loses it: a trigger on PostgreSQL (migration 0023).
    lease_token: Mapped[int | None] = mapped_column(Integer)
    # The last sign of life (submit, claim or heartbeat): what the janitor keys on.
    heartbeat_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=sql_text("CURRENT_TIMESTAMP")
    )

    # The turns: the current one's number and the last submitted one's (those between wait).
    turn_number: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    turn_count: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # The seq of the last event: every writer takes the next ones under this row's lock.
    event_seq: Mapped[int] = mapped_column(Integer, default=0, server_default="0")

    prompt_tokens: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # US dollars of every model call (litellm's prices); NULL once any call had no known price.
    cost_usd: Mapped[Decimal | None] = mapped_column(Numeric(20, 10), default=0, server_default="0")
    completion_tokens: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    # Of the prompt tokens, those read from the provider's prompt cache.
    cached_tokens: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")

    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), server_default=sql_text("CURRENT_TIMESTAMP")
    )
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True),
        server_default=sql_text("CURRENT_TIMESTAMP"),
        onupdate=func.current_timestamp(),
    )

    def __repr__(self) -> str:
        return f"<Conversation {self.id} {self.status}>"
