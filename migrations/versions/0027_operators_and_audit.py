"""Operators apart from owners: `api_keys.operator` marks a key that reads and acts on every
owner's runs through the operator routes (`/v1/admin`) and nothing else, and `audit_log` keeps
every operator action (who, what, on which target, how many, when); reading is not logged.

Expand only: the previous release writes no operator key (the column's default is false) and
knows no audit log; a previous release's API takes an operator key's text as no key at all (its
prefix is not `cwk_`), so an operator key is refused there, never taken as an owner's.

Revision ID: 0027
Revises: 0026
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
BIGINT_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.add_column(
        "api_keys",
        sa.Column("operator", sa.Boolean(), nullable=False, server_default=sa.text("false")),
    )
    op.create_table(
        "audit_log",
        sa.Column("id", BIGINT_ID, autoincrement=True, nullable=False),
        sa.Column(
            "at",
            sa.DateTime(timezone=True),
            server_default=sa.text("CURRENT_TIMESTAMP"),
            nullable=False,
        ),
        sa.Column("operator", sa.String(200), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("selected", sa.Integer(), nullable=False),
        sa.Column("detail", JSON, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_log")),
    )
    op.create_index(op.f("ix_audit_log_at"), "audit_log", ["at"])


def downgrade() -> None:
    op.drop_index(op.f("ix_audit_log_at"), table_name="audit_log")
    op.drop_table("audit_log")
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("operator")
