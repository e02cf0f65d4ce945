"""Owners: who may see a conversation through the HTTP API; the API keys that name them.

Existing conversations get no owner (a trusted caller's: visible only with auth mode `none`).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

NOW = sa.text("CURRENT_TIMESTAMP")


def upgrade() -> None:
    with op.batch_alter_table("conversations") as batch:
        batch.add_column(sa.Column("owner", sa.String(200), nullable=True))
    op.create_index(
        "ix_conversations_owner_created", "conversations", ["owner", "created_at", "id"]
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("owner", sa.String(200), nullable=False),
        sa.Column("name", sa.String(200), server_default="", nullable=False),
        sa.Column("secret_sha256", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=NOW, nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
    )
    op.create_index(op.f("ix_api_keys_owner"), "api_keys", ["owner"])


def downgrade() -> None:
    op.drop_index(op.f("ix_api_keys_owner"), table_name="api_keys")
    op.drop_table("api_keys")
    op.drop_index("ix_conversations_owner_created", table_name="conversations")
    with op.batch_alter_table("conversations") as batch:
        batch.drop_column("owner")
