"""Per-owner limits: an index of each owner's running conversations by when they were last
touched (the claim's count of the owner's leases, the web side's count, the owner's next
waiting conversation).

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

RUNNING = sa.text("status IN ('processing', 'tool_loop')")


def upgrade() -> None:
    op.create_index(
        "ix_conversations_owner_running",
        "conversations",
        ["owner", "updated_at"],
        postgresql_where=RUNNING,
        sqlite_where=RUNNING,
    )


def downgrade() -> None:
    op.drop_index("ix_conversations_owner_running", table_name="conversations")
