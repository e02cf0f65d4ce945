"""Waiting for the user: a turn's `requires_action` status and its pending actions, the
`action.required` event, a conversation's client-executed tools and its clarification flag.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TURN_STATUSES = "status IN ('queued', 'running', 'completed', 'failed', 'cancelled')"
TURN_STATUSES_NOW = (
    "status IN ('queued', 'running', 'requires_action', 'completed', 'failed', 'cancelled')"
)
EVENT_TYPES = (
    "type IN ('turn.queued', 'turn.started', 'turn.resumed', 'turn.completed', 'turn.failed', "
    "'turn.cancelled', 'turn.cancel_requested', 'status.changed', 'message.committed')"
)
EVENT_TYPES_NOW = EVENT_TYPES[:-1] + ", 'action.required')"


def upgrade() -> None:
    with op.batch_alter_table("conversations") as batch:
        batch.add_column(sa.Column("client_tools", JSON, nullable=True))
        batch.add_column(
            sa.Column("clarify", sa.Boolean(), server_default=sa.true(), nullable=False)
        )
    with op.batch_alter_table("turns") as batch:
        batch.add_column(sa.Column("actions", JSON, nullable=True))
        batch.drop_constraint(op.f("ck_turns_status"), type_="check")
        batch.create_check_constraint("status", TURN_STATUSES_NOW)
    with op.batch_alter_table("events") as batch:
        batch.drop_constraint(op.f("ck_events_type"), type_="check")
        batch.create_check_constraint("type", EVENT_TYPES_NOW)


def downgrade() -> None:
    # A waiting turn cannot be told apart from a crashed running one by the old schema.
    op.execute("UPDATE turns SET status = 'running' WHERE status = 'requires_action'")
    op.execute("DELETE FROM events WHERE type = 'action.required'")
    with op.batch_alter_table("events") as batch:
        batch.drop_constraint(op.f("ck_events_type"), type_="check")
        batch.create_check_constraint("type", EVENT_TYPES)
    with op.batch_alter_table("turns") as batch:
        batch.drop_constraint(op.f("ck_turns_status"), type_="check")
        batch.create_check_constraint("status", TURN_STATUSES)
        batch.drop_column("actions")
    with op.batch_alter_table("conversations") as batch:
        batch.drop_column("clarify")
        batch.drop_column("client_tools")
