"""What a running turn reads besides its claim, and the files it keeps: whether a budget is used
up, the session tool cache's outputs, a request's files, a waiting steer message; a tool's media
kept as the conversation's files."""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Sequence
from typing import Any

from sqlalchemy import Engine

from app.budgets import store as budgets
from app.files import store as stored_files
from app.worker.ports import ToolMedia
from app.worker.store import claim_statements, files, outputs
from app.worker.store.clock import Clock
from app.worker.store.outputs import ListedOutput, OutputPage
from app.worker.store.records import Steering


class TurnReads:
    """The reads' part of `TurnStore` (its engine, autocommit reads and clock are the store's)."""

    engine: Engine
    reads: Engine
    clock: Clock

    def budget_used_up(self, conversation_id: uuid.UUID) -> str | None:
        """The error naming a used-up budget of the conversation or its owner, else None."""
        with self.reads.connect() as connection:
            return budgets.check(connection, conversation_id, self.clock())

    def cached_outputs(
        self, conversation_id: uuid.UUID, *, tool: str | None = None, limit: int = 50
    ) -> tuple[list[ListedOutput], int]:
        """The conversation's kept tool outputs (the latest `limit`), and how many it has."""
        return outputs.list_outputs(self.reads, conversation_id, tool=tool, limit=limit)

    def cached_output(
        self, conversation_id: uuid.UUID, call_id: str, *, offset: int, limit: int
    ) -> OutputPage | None:
        """A page of the output kept for `call_id`, or None when there is none."""
        return outputs.read_output(self.reads, conversation_id, call_id, offset=offset, limit=limit)

    def keep_files(
        self, conversation_id: uuid.UUID, media: Sequence[ToolMedia]
    ) -> list[dict[str, Any]]:
        """A tool's images and blobs kept whole as the conversation's files (for its owner, by
        content hash: a repeated one is one row), before the result that names them commits;
        what its message keeps of them. (Written first, on its own: a crash before the
        result leaves files the conversation uses, gone with it.)"""
        checked = [files.checked(item.data, item.media_type, item.name) for item in media]
        with self.engine.begin() as connection:
            _, owner = stored_files.conversation_setup(connection, conversation_id)
            return stored_files.keep(connection, owner, conversation_id, checked)

    def read_files(self, conversation: uuid.UUID, ids: Collection[uuid.UUID]) -> dict[Any, bytes]:
        """The bytes of the files a request sends: the conversation's owner's, that it uses."""
        return files.read_files(self.reads, conversation, ids)

    def next_steer(self, conversation_id: uuid.UUID) -> Steering | None:
        """The turn right behind the current one when it is a steer message still waiting (its
        id and text), else None (plan row 26)."""
        with self.reads.connect() as connection:
            found = connection.execute(
                claim_statements.NEXT_STEER, {"steer_conversation": conversation_id}
            ).one_or_none()
        if found is None:
            return None
        files = tuple(json.loads(found.files) or ()) if found.files else ()
        return Steering(found.id, str(found.input or ""), files)


__all__ = ["TurnReads"]
