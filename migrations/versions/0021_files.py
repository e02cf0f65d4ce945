"""Files in messages: `files` (stored once per owner by content hash, in the database) and
`file_uses` (the conversations that hold each: a file goes with the last), and the files a user
message carries (`messages.files`, `turns.files` while it waits).

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-26
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "files",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("owner", sa.String(200), nullable=True),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("media_type", sa.String(100), nullable=False),
        sa.Column("name", sa.String(255), nullable=True),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("data", sa.LargeBinary(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("CURRENT_TIMESTAMP"),
            nullable=False,
        ),
        sa.CheckConstraint("size >= 0", name=op.f("ck_files_size_not_negative")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_files")),
    )
    op.create_table(
        "file_uses",
        sa.Column("file_id", sa.Uuid(), nullable=False),
        sa.Column("conversation_id", sa.Uuid(), nullable=False),
        sa.ForeignKeyConstraint(
            ["file_id"], ["files.id"], name=op.f("fk_file_uses_file_id_files"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["conversation_id"],
            ["conversations.id"],
            name=op.f("fk_file_uses_conversation_id_conversations"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("file_id", "conversation_id", name=op.f("pk_file_uses")),
    )
    op.create_index("ix_file_uses_conversation", "file_uses", ["conversation_id"])
    op.add_column("messages", sa.Column("files", JSON, nullable=True))
    op.add_column("turns", sa.Column("files", JSON, nullable=True))


def downgrade() -> None:
    for table in ("turns", "messages"):
        if op.get_context().dialect.name == "sqlite":
            op.execute(f"ALTER TABLE {table} DROP COLUMN files")
        else:
            op.drop_column(table, "files")
    op.drop_index("ix_file_uses_conversation", table_name="file_uses")
    op.drop_table("file_uses")
    op.drop_table("files")
