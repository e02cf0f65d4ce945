"""`budgets`: caps on the tokens and money an owner or a conversation may spend, in total or
per UTC day.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "budgets",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("owner", sa.String(200), nullable=True),
        sa.Column("conversation_id", sa.Uuid(), nullable=True),
        sa.Column("period", sa.String(16), nullable=False),
        sa.Column("max_tokens", sa.BigInteger(), nullable=True),
        sa.Column("max_cost_usd", sa.Numeric(20, 10), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("CURRENT_TIMESTAMP"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "(owner IS NULL) <> (conversation_id IS NULL)", name=op.f("ck_budgets_one_subject")
        ),
        sa.CheckConstraint(
            "max_tokens IS NOT NULL OR max_cost_usd IS NOT NULL", name=op.f("ck_budgets_a_limit")
        ),
        sa.CheckConstraint(
            "max_tokens IS NULL OR max_tokens >= 0", name=op.f("ck_budgets_tokens_not_negative")
        ),
        sa.CheckConstraint(
            "max_cost_usd IS NULL OR max_cost_usd >= 0", name=op.f("ck_budgets_cost_not_negative")
        ),
        sa.CheckConstraint("period IN ('total', 'day')", name=op.f("ck_budgets_period")),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_budgets_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_budgets")),
        sa.UniqueConstraint("owner", "period", name=op.f("uq_budgets_owner_period")),
        sa.UniqueConstraint(
            "conversation_id", "period", name=op.f("uq_budgets_conversation_id_period")
        ),
    )
    op.create_index(op.f("ix_budgets_owner"), "budgets", ["owner"])
    op.create_index(op.f("ix_budgets_conversation_id"), "budgets", ["conversation_id"])


def downgrade() -> None:
    op.drop_table("budgets")
