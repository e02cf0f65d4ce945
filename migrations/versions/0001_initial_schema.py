"""Initial schema: conversations and their messages.

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
NOW = sa.text("CURRENT_TIMESTAMP")
RUNNING = sa.text("status IN ('processing', 'tool_loop')")


def upgrade() -> None:
    op.create_table(
        "conversations",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("status", sa.String(16), server_default="idle", nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("instructions", sa.Text(), nullable=True),
        sa.Column("allowed_tools", JSON, nullable=False),
        sa.Column("tool_choice", sa.String(16), server_default="auto", nullable=False),
        sa.Column("context", JSON, nullable=True),
        sa.Column("iterations", sa.Integer(), server_default="0", nullable=False),
        sa.Column("lease_owner", sa.String(200), nullable=True),
        sa.Column("lease_epoch", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), server_default=NOW, nullable=False),
        sa.Column("prompt_tokens", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("completion_tokens", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=NOW, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=NOW, nullable=False),
        sa.CheckConstraint(
            "status IN ('idle', 'processing', 'tool_loop', 'failed')",
            name=op.f("ck_conversations_status"),
        ),
        sa.CheckConstraint(
            "tool_choice IN ('auto', 'none', 'required')", name=op.f("ck_conversations_tool_choice")
        ),
        sa.CheckConstraint(
            "iterations >= 0", name=op.f("ck_conversations_iterations_not_negative")
        ),
        sa.CheckConstraint(
            "lease_epoch >= 0", name=op.f("ck_conversations_lease_epoch_not_negative")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_conversations")),
    )
    op.create_index(
        "ix_conversations_running_heartbeat",
        "conversations",
        ["heartbeat_at"],
        postgresql_where=RUNNING,
        sqlite_where=RUNNING,
    )
    op.create_table(
        "messages",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("conversation_id", sa.Uuid(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("content", sa.Text(), nullable=True),
        sa.Column("tool_calls", JSON, nullable=True),
        sa.Column("tool_call_id", sa.String(200), nullable=True),
        sa.Column("tool_name", sa.String(200), nullable=True),
        sa.Column("is_error", sa.Boolean(), server_default=sa.text("false"), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=NOW, nullable=False),
        sa.CheckConstraint(
            "role IN ('system', 'user', 'assistant', 'tool')", name=op.f("ck_messages_role")
        ),
        sa.CheckConstraint("seq >= 1", name=op.f("ck_messages_seq_positive")),
        sa.CheckConstraint(
            "(role = 'tool' AND tool_call_id IS NOT NULL)"
            " OR (role <> 'tool' AND tool_call_id IS NULL)",
            name=op.f("ck_messages_tool_result_has_call_id"),
        ),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_messages_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_messages")),
        sa.UniqueConstraint("conversation_id", "seq", name=op.f("uq_messages_conversation_id_seq")),
        sa.UniqueConstraint(
            "conversation_id",
            "tool_call_id",
            name=op.f("uq_messages_conversation_id_tool_call_id"),
        ),
    )


def downgrade() -> None:
    op.drop_table("messages")
    op.drop_index("ix_conversations_running_heartbeat", table_name="conversations")
    op.drop_table("conversations")
