"""Files reached only by their owner: `file_names` (a name and media type an owner sent a file's
bytes under, with an id of its own: what a message shows and `GET /v1/files/{id}` serves), and
the index `ix_files_owner_sha256` (an owner's file of given bytes, now that new files' ids are
random; an owner's stored bytes, counted against `CHATWORKER_OWNER_STORAGE_BYTES`).

Expand only: the previous release still derives ids from owner and hash and writes no name rows;
its rows are read as they are (a message's file without a `name_id` is served by its file's id,
under the file's first name).

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-29
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_files_owner_sha256", "files", ["owner", "sha256"])
    op.create_table(
        "file_names",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("file_id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(255), nullable=True),
        sa.Column("media_type", sa.String(100), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("CURRENT_TIMESTAMP"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["file_id"], ["files.id"], name=op.f("fk_file_names_file_id_files"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_file_names")),
    )
    op.create_index("ix_file_names_file", "file_names", ["file_id"])


def downgrade() -> None:
    op.drop_index("ix_file_names_file", table_name="file_names")
    op.drop_table("file_names")
    op.drop_index("ix_files_owner_sha256", table_name="files")
