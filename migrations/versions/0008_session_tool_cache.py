"""The session tool cache: `tool_outputs`, the whole output of each MCP call, keyed by
conversation and call id, each row tied to its tool message (the one foreign key: it also removes
the row with its conversation).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "tool_outputs",
        sa.Column("conversation_id", sa.Uuid(), nullable=False),
        sa.Column("call_id", sa.String(200), nullable=False),
        sa.Column("turn_id", sa.Uuid(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("tool", sa.String(200), nullable=False),
        sa.Column("arguments", JSON, nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("chars", sa.Integer(), nullable=False),
        sa.Column("is_error", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("CURRENT_TIMESTAMP"),
            nullable=False,
        ),
        sa.CheckConstraint("chars >= 0", name=op.f("ck_tool_outputs_chars_not_negative")),
        sa.ForeignKeyConstraint(
            ["conversation_id", "call_id"],
            ["messages.conversation_id", "messages.tool_call_id"],
            name="fk_tool_outputs_message",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("conversation_id", "call_id", name=op.f("pk_tool_outputs")),
    )


def downgrade() -> None:
    op.drop_table("tool_outputs")
