"""What a dialect shows back, and a tool the model must call: `turns.echo` keeps what the
Responses API echoes of the request that submitted a turn and holds nowhere else (`store`,
`previous_response_id`); `conversations.forced_tool` names the one tool the model must call
(OpenAI's `tool_choice` naming a function), only beside `tool_choice` 'required' (the CHECK
`ck_conversations_forced_tool_required`).

Expand only: the previous release writes neither column; its turns have no echo (shown as
stored, with no previous response, as it showed them) and its conversations force no tool. A
previous release's worker that claims a conversation forcing a tool reads `required` and asks
for any tool, its rule then.

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
FORCED_TOOL_CHECK = "forced_tool IS NULL OR tool_choice = 'required'"


def upgrade() -> None:
    op.add_column("turns", sa.Column("echo", JSON, nullable=True))
    if op.get_context().dialect.name == "sqlite":
        # In place, the CHECK on the column: a copy of `conversations` (batch mode) would take
        # every row of the tables that reference it with it, through their foreign keys.
        op.execute(
            "ALTER TABLE conversations ADD COLUMN forced_tool VARCHAR(200) CONSTRAINT "
            f"ck_conversations_forced_tool_required CHECK ({FORCED_TOOL_CHECK})"
        )
        return
    op.add_column("conversations", sa.Column("forced_tool", sa.String(200), nullable=True))
    # (its rows all pass: the column is new, NULL everywhere; the check reads them once)
    op.create_check_constraint("forced_tool_required", "conversations", FORCED_TOOL_CHECK)


def downgrade() -> None:
    if op.get_context().dialect.name == "sqlite":
        # (the column's own CHECK goes with it)
        op.execute("ALTER TABLE conversations DROP COLUMN forced_tool")
        op.execute("ALTER TABLE turns DROP COLUMN echo")
        return
    op.drop_constraint(
        op.f("ck_conversations_forced_tool_required"), "conversations", type_="check"
    )
    op.drop_column("conversations", "forced_tool")
    op.drop_column("turns", "echo")
