"""How a committed reply was streamed: the attempt that was committed and the length of the text
each of its live deltas carried (`messages.reply_stream`), so a stream of it replayed later (the
OpenAI Responses dialect numbers every event) splits and numbers the text exactly as the live
stream did.

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
        "messages",
        sa.Column(
            "reply_stream",
            sa.JSON().with_variant(postgresql.JSONB(), "postgresql"),
            nullable=True,
        ),
    )


def downgrade() -> None:
    with op.batch_alter_table("messages") as batch:
        batch.drop_column("reply_stream")
