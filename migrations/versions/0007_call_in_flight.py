"""The call a worker started and may not simply run again: `conversations.in_flight`.

Set (fenced) right before a call of a tool that is neither read-only nor idempotent; a later claim
that finds it still without a result knows the call was running when its worker stopped.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("conversations") as batch:
        batch.add_column(sa.Column("in_flight", sa.String(200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("conversations") as batch:
        batch.drop_column("in_flight")
