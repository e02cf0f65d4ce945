"""`cost_usd` of conversations and turns: US dollars of their model calls by litellm's prices,
NULL once any call's price was unknown (unknown, never zero).

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    for table in ("conversations", "turns"):
        with op.batch_alter_table(table) as batch:
            batch.add_column(
                sa.Column("cost_usd", sa.Numeric(20, 10), server_default="0", nullable=True)
            )


def downgrade() -> None:
    for table in ("turns", "conversations"):
        with op.batch_alter_table(table) as batch:
            batch.drop_column("cost_usd")
