"""A dead worker noticed in seconds: a claim records the liveness token its worker process holds
(a session advisory lock the database drops the moment the process dies, `lease_token`), so the
recovery sweep and the next claim treat a lease whose token is gone as expired at once. NULL: a
lease that falls back to its TTL (no token held: a pooler in transaction mode, SQLite, turned
off). No index: the sweep reads the running conversations through their partial index.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("conversations", sa.Column("lease_token", sa.Integer(), nullable=True))


def downgrade() -> None:
    op.drop_column("conversations", "lease_token")
