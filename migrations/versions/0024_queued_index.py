"""Lost doorbells found in seconds: an index of the queued conversations (running, no worker
holding them) by when they were last touched, so every worker's recovery round finds a turn whose
doorbell Redis lost (a flush, a restart, an outage) without reading the running ones.

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

QUEUED = sa.text("status IN ('processing', 'tool_loop') AND lease_owner IS NULL")


def upgrade() -> None:
    op.create_index(
        "ix_conversations_queued",
        "conversations",
        ["heartbeat_at"],
        postgresql_where=QUEUED,
        sqlite_where=QUEUED,
    )


def downgrade() -> None:
    op.drop_index("ix_conversations_queued", table_name="conversations")
