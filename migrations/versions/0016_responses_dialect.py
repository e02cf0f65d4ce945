"""What OpenAI's Responses dialect keeps: how a committed reply was streamed (the attempt that was
committed and the length of the text each of its live deltas carried: `messages.reply_stream`),
so a stream of it replayed later splits and numbers the text exactly as the live stream did; the
caller's metadata of a turn (`turns.caller_metadata`), shown with its responses; and the shape of
a webhook's bodies (`webhooks.body_format`: ours, `standard`, or OpenAI's, `openai`).

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "webhooks",
        sa.Column(
            "body_format", sa.String(16), nullable=False, server_default=sa.text("'standard'")
        ),
    )
    op.add_column(
        "turns",
        sa.Column(
            "caller_metadata",
            sa.JSON().with_variant(postgresql.JSONB(), "postgresql"),
            nullable=True,
        ),
    )
    op.add_column(
        "messages",
        sa.Column(
            "reply_stream",
            sa.JSON().with_variant(postgresql.JSONB(), "postgresql"),
            nullable=True,
        ),
    )


def downgrade() -> None:
    # Not a batch (a copy of the table): migration 0014's trigger names these tables, and SQLite
    # (3.35+) drops a column in place.
    for table, column in (
        ("messages", "reply_stream"),
        ("turns", "caller_metadata"),
        ("webhooks", "body_format"),
    ):
        if op.get_context().dialect.name == "sqlite":
            op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
        else:
            op.drop_column(table, column)
