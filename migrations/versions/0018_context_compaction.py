"""Conversations that never outgrow the model: `compactions` (what the model is sent instead of
the whole transcript, one committed row per compaction), the `context.compacted` event and a
conversation's own `context_policy`; prompt caching's accounting: the cached prompt tokens of
each turn and conversation, and each model call's usage on the message it wrote.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
# The CHECK on `events.type` before and after, frozen: later migrations do not move them.
EVENT_TYPES_BEFORE = (
    "turn.queued",
    "turn.started",
    "turn.resumed",
    "turn.completed",
    "turn.failed",
    "turn.cancelled",
    "turn.cancel_requested",
    "status.changed",
    "message.committed",
    "action.required",
)
EVENT_TYPES = (*EVENT_TYPES_BEFORE, "context.compacted")
# Migration 0014's webhook outbox trigger on SQLite, as it made it: a copy of `events` drops it.
SQLITE_OUTBOX = """
    CREATE TRIGGER events_webhook_outbox AFTER INSERT ON events FOR EACH ROW
    WHEN NEW.type IN ('turn.completed', 'turn.failed', 'turn.cancelled', 'action.required')
    BEGIN
    INSERT INTO webhook_deliveries
        (webhook_id, conversation_id, event_seq, turn_id, type, error, occurred_at)
    SELECT w.id, NEW.conversation_id, NEW.seq, NEW.turn_id,
        CASE NEW.type WHEN 'action.required' THEN 'turn.requires_action' ELSE NEW.type END,
        (SELECT t.error FROM turns t WHERE t.id = NEW.turn_id), NEW.created_at
    FROM webhooks w
    WHERE (
        w.conversation_id = NEW.conversation_id
        OR (
            w.conversation_id IS NULL
            AND w.owner IS (
                SELECT c.owner FROM conversations c WHERE c.id = NEW.conversation_id
            )
        )
    )
    AND w.event_types LIKE '% ' || (
        CASE NEW.type WHEN 'action.required' THEN 'turn.requires_action' ELSE NEW.type END
    ) || ' %';
    END
"""


def upgrade() -> None:
    op.add_column("conversations", sa.Column("context_policy", JSON, nullable=True))
    for table in ("conversations", "turns"):
        op.add_column(
            table,
            sa.Column("cached_tokens", sa.BigInteger(), server_default="0", nullable=False),
        )
    op.add_column("messages", sa.Column("usage", JSON, nullable=True))
    op.create_table(
        "compactions",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("conversation_id", sa.Uuid(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("turn_id", sa.Uuid(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(16), nullable=False),
        sa.Column("from_seq", sa.Integer(), nullable=False),
        sa.Column("through_seq", sa.Integer(), nullable=False),
        sa.Column("elided_through", sa.Integer(), nullable=False),
        sa.Column("summarized_through", sa.Integer(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=True),
        sa.Column("tokens_before", sa.Integer(), nullable=False),
        sa.Column("tokens_after", sa.Integer(), nullable=False),
        sa.Column("window", sa.Integer(), nullable=True),
        sa.Column("model", sa.String(200), nullable=True),
        sa.Column("prompt_tokens", sa.Integer(), server_default="0", nullable=False),
        sa.Column("completion_tokens", sa.Integer(), server_default="0", nullable=False),
        sa.Column("cost_usd", sa.Numeric(20, 10), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("CURRENT_TIMESTAMP"),
            nullable=False,
        ),
        sa.CheckConstraint("kind IN ('elide', 'summary')", name=op.f("ck_compactions_kind")),
        sa.CheckConstraint(
            "reason IN ('threshold', 'overflow')", name=op.f("ck_compactions_reason")
        ),
        sa.CheckConstraint("number >= 1", name=op.f("ck_compactions_number_positive")),
        sa.CheckConstraint(
            "elided_through >= 0 AND summarized_through >= 0",
            name=op.f("ck_compactions_through_not_negative"),
        ),
        sa.CheckConstraint(
            "(summarized_through = 0) = (summary IS NULL)",
            name=op.f("ck_compactions_summary_names_its_range"),
        ),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_compactions_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_compactions")),
        sa.UniqueConstraint(
            "conversation_id", "number", name=op.f("uq_compactions_conversation_id_number")
        ),
    )
    _events_type_check(EVENT_TYPES)


def downgrade() -> None:
    op.execute("DELETE FROM events WHERE type = 'context.compacted'")
    _events_type_check(EVENT_TYPES_BEFORE)
    op.drop_table("compactions")
    # Not a batch (a copy of the table): migration 0014's trigger names these tables, and
    # SQLite (3.35+) drops a column in place.
    for table, column in (
        ("messages", "usage"),
        ("turns", "cached_tokens"),
        ("conversations", "cached_tokens"),
        ("conversations", "context_policy"),
    ):
        if op.get_context().dialect.name == "sqlite":
            op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
        else:
            op.drop_column(table, column)


def _events_type_check(event_types: tuple[str, ...]) -> None:
    """Replace the CHECK on `events.type`. SQLite copies the table to do it, which drops the
    webhook outbox trigger on it: it is made again as migration 0014 made it."""
    sqlite = op.get_context().dialect.name == "sqlite"
    if sqlite:
        op.execute("DROP TRIGGER events_webhook_outbox")
    with op.batch_alter_table("events") as batch:
        batch.drop_constraint(op.f("ck_events_type"), type_="check")
        batch.create_check_constraint("type", _in("type", event_types))
    if sqlite:
        op.execute(SQLITE_OUTBOX)


def _in(column: str, words: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(word) for word in words)})"
