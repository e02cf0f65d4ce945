"""Webhooks: `webhooks` (who is told, where, signed with what), `webhook_deliveries` (the
outbox), and the trigger on `events` that writes the outbox in the same transaction as each
terminal event (`turn.completed`, `turn.failed`, `turn.cancelled`, and `action.required` as
`turn.requires_action`), whoever appends it.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PENDING = sa.text("status = 'pending'")
TOLD = "('turn.completed', 'turn.failed', 'turn.cancelled', 'action.required')"
WEBHOOK_TYPE = "CASE NEW.type WHEN 'action.required' THEN 'turn.requires_action' ELSE NEW.type END"

# The webhooks that hear of the event: the conversation's own, its owner's, or (no owner) the
# ownerless ones; each only for the types it asked for.
_SUBSCRIBED = f"""
    FROM webhooks w
    WHERE (
        w.conversation_id = NEW.conversation_id
        OR (
            w.conversation_id IS NULL
            AND w.owner IS NOT DISTINCT FROM (
                SELECT c.owner FROM conversations c WHERE c.id = NEW.conversation_id
            )
        )
    )
    AND w.event_types LIKE '% ' || ({WEBHOOK_TYPE}) || ' %'
"""
_OUTBOX_ROWS = f"""
    INSERT INTO webhook_deliveries
        (webhook_id, conversation_id, event_seq, turn_id, type, error, occurred_at)
    SELECT w.id, NEW.conversation_id, NEW.seq, NEW.turn_id, {WEBHOOK_TYPE},
        (SELECT t.error FROM turns t WHERE t.id = NEW.turn_id), NEW.created_at
    {_SUBSCRIBED}
"""

POSTGRESQL = [
    f"""
    CREATE FUNCTION chatworker_webhook_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        {_OUTBOX_ROWS};
        RETURN NULL;
    END
    $$
    """,
    f"""
    CREATE TRIGGER events_webhook_outbox AFTER INSERT ON events FOR EACH ROW
    WHEN (NEW.type IN {TOLD}) EXECUTE FUNCTION chatworker_webhook_outbox()
    """,
]
SQLITE = [
    f"""
    CREATE TRIGGER events_webhook_outbox AFTER INSERT ON events FOR EACH ROW
    WHEN NEW.type IN {TOLD}
    BEGIN
        {_OUTBOX_ROWS.replace("IS NOT DISTINCT FROM", "IS")};
    END
    """
]


def upgrade() -> None:
    op.create_table(
        "webhooks",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("owner", sa.String(200), nullable=True),
        sa.Column("conversation_id", sa.Uuid(), nullable=True),
        sa.Column("url", sa.String(2000), nullable=False),
        sa.Column("secret", sa.String(100), nullable=False),
        sa.Column("event_types", sa.String(200), nullable=False),
        sa.Column("description", sa.String(500), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("CURRENT_TIMESTAMP"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "(owner IS NULL) OR (conversation_id IS NULL)", name=op.f("ck_webhooks_one_subject")
        ),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_webhooks_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhooks")),
    )
    op.create_index(op.f("ix_webhooks_owner"), "webhooks", ["owner"])
    op.create_index(op.f("ix_webhooks_conversation_id"), "webhooks", ["conversation_id"])
    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True),
        sa.Column("webhook_id", sa.Uuid(), nullable=False),
        sa.Column("conversation_id", sa.Uuid(), nullable=False),
        sa.Column("event_seq", sa.Integer(), nullable=False),
        sa.Column("turn_id", sa.Uuid(), nullable=True),
        sa.Column("type", sa.String(32), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("occurred_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status", sa.String(16), server_default="pending", nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column(
            "next_attempt_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("CURRENT_TIMESTAMP"),
            nullable=False,
        ),
        sa.Column("last_attempt_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_status_code", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("CURRENT_TIMESTAMP"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "status IN ('pending', 'delivered', 'failed')",
            name=op.f("ck_webhook_deliveries_status"),
        ),
        sa.CheckConstraint(
            "type IN ('turn.completed', 'turn.failed', 'turn.cancelled', 'turn.requires_action')",
            name=op.f("ck_webhook_deliveries_type"),
        ),
        sa.ForeignKeyConstraint(
            ["webhook_id"],
            ["webhooks.id"],
            name=op.f("fk_webhook_deliveries_webhook_id_webhooks"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_webhook_deliveries")),
        sa.UniqueConstraint(
            "webhook_id",
            "conversation_id",
            "event_seq",
            name=op.f("uq_webhook_deliveries_webhook_id_conversation_id_event_seq"),
        ),
    )
    op.create_index(op.f("ix_webhook_deliveries_webhook_id"), "webhook_deliveries", ["webhook_id"])
    op.create_index(
        "ix_webhook_deliveries_due",
        "webhook_deliveries",
        ["next_attempt_at"],
        postgresql_where=PENDING,
        sqlite_where=PENDING,
    )
    statements = POSTGRESQL if op.get_bind().dialect.name == "postgresql" else SQLITE
    for statement in statements:
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER events_webhook_outbox ON events")
        op.execute("DROP FUNCTION chatworker_webhook_outbox()")
    else:
        op.execute("DROP TRIGGER events_webhook_outbox")
    op.drop_table("webhook_deliveries")
    op.drop_table("webhooks")
