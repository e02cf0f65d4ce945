"""The tools of a conversation whose every call the user approves first, beyond each MCP server's
own policy (`conversations.approval_tools`: OpenAI's `require_approval` on an `mcp` tool, our
`approval_tools`); NULL: the servers' policies alone.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "conversations",
        sa.Column(
            "approval_tools",
            sa.JSON().with_variant(postgresql.JSONB(), "postgresql"),
            nullable=True,
        ),
    )


def downgrade() -> None:
    # Not a batch (a copy of the table): migration 0014's trigger names this table, and SQLite
    # (3.35+) drops a column in place.
    if op.get_context().dialect.name == "sqlite":
        op.execute("ALTER TABLE conversations DROP COLUMN approval_tools")
    else:
        op.drop_column("conversations", "approval_tools")
