"""The runs across owners, newest first, in an index: `ix_turns_created` (every turn by
`(created_at, id)`: the operators' list and its keyset pages) and `ix_turns_status_created` (the
same within one status: the failed ones of the last hour, the running ones).

On PostgreSQL both are built `CONCURRENTLY`, outside the migration's transaction: a table of
millions of turns keeps taking the workers' writes while they are built (an upgrade is done with
turns in flight).

Revision ID: 0028
Revises: 0027
Create Date: 2026-11-28
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0028"
down_revision: str | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEXES = {
    "ix_turns_created": ["created_at", "id"],
    "ix_turns_status_created": ["status", "created_at", "id"],
}


def upgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        with op.get_context().autocommit_block():
            for name, columns in INDEXES.items():
                op.create_index(
                    name, "turns", columns, postgresql_concurrently=True, if_not_exists=True
                )
        return
    for name, columns in INDEXES.items():
        op.create_index(name, "turns", columns)


def downgrade() -> None:
    for name in INDEXES:
        op.drop_index(name, table_name="turns")
