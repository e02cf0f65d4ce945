"""Attempt counter on conversations; the tool catalogue.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("conversations") as batch:
        batch.add_column(sa.Column("attempts", sa.Integer(), server_default="0", nullable=False))
        batch.create_check_constraint("attempts_not_negative", "attempts >= 0")
    op.create_table(
        "tool_catalog",
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("server", sa.String(64), nullable=False),
        sa.Column("description", sa.Text(), server_default="", nullable=False),
        sa.Column("input_schema", JSON, nullable=False),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("CURRENT_TIMESTAMP"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_tool_catalog")),
    )


def downgrade() -> None:
    op.drop_table("tool_catalog")
    with op.batch_alter_table("conversations") as batch:
        batch.drop_constraint(op.f("ck_conversations_attempts_not_negative"), type_="check")
        batch.drop_column("attempts")
