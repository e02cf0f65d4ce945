"""Retention (`chatworker prune`): an index of resting conversations by when they were last
touched, so each batch finds its rows without scanning the table; and `events.turn_id` without
its foreign key, which made every deleted turn scan the event log (events and turns only ever go
together, with their conversation).

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

RESTING = sa.text("status IN ('idle', 'failed')")


def upgrade() -> None:
    op.create_index(
        "ix_conversations_resting_updated",
        "conversations",
        ["updated_at", "id"],
        postgresql_where=RESTING,
        sqlite_where=RESTING,
    )
    with op.batch_alter_table("events") as batch:
        batch.drop_constraint(op.f("fk_events_turn_id_turns"), type_="foreignkey")


def downgrade() -> None:
    with op.batch_alter_table("events") as batch:
        batch.create_foreign_key(
            op.f("fk_events_turn_id_turns"), "turns", ["turn_id"], ["id"], ondelete="CASCADE"
        )
    op.drop_index("ix_conversations_resting_updated", table_name="conversations")
