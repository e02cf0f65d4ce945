"""A message's files kept for its conversation: checked against the conversation's model (it
takes that kind) and its owner's storage quota (`quota`), then stored once per owner by content
hash (`app/files/store.py`); what the message keeps of them."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection

from app.client import attachments, quota
from app.config import Settings
from app.files import store
from app.files.media import CheckedFile


def limits(settings: Settings) -> attachments.Limits:
    """The settings a message's files are checked against."""
    return attachments.Limits(
        settings.max_file_bytes,
        settings.max_message_file_bytes,
        settings.max_message_files,
        settings.model_file_kinds,
    )


def keep(
    connection: Connection,
    conversation_id: uuid.UUID,
    checked: Sequence[CheckedFile],
    settings: Settings,
) -> list[dict[str, Any]] | None:
    """The message's files, if the conversation's model takes them and its owner has room for
    them, stored for its owner (None: it carries none)."""
    if not checked:
        return None
    model, owner = store.conversation_setup(connection, conversation_id)
    attachments.check_taken(checked, model, limits(settings))
    quota.check_files(connection, owner, checked, settings.owner_storage_bytes)
    return store.keep(connection, owner, conversation_id, checked)


__all__ = ["keep", "limits"]
