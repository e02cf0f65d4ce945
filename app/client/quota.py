"""An owner's storage quota (`CHATWORKER_OWNER_STORAGE_BYTES`): whether what a request would
store (a message's new files, a fork's copied messages) fits beside what the owner stores
(`store/storage.py` counts it, under the owner's storage lock, in the request's transaction).

    what the request adds            answer
    -------------------------------  ----------------------------------------------------------
    nothing new (bytes kept before)  stored, whatever the owner holds
    more than the whole quota        `LargerThanStorageQuota` (413 larger_than_storage_quota)
    past the quota with the rest     `StorageQuotaExceeded` (429 storage_quota_exceeded)
    within it                        stored

A refusal is raised inside the transaction, which then writes nothing (a fork's copy rolled
back with it).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy import Connection

from app.client.store import storage
from app.errors import LargerThanStorageQuota, StorageQuotaExceeded
from app.files.media import CheckedFile
from app.files.store import lock_storage

SETTING = "CHATWORKER_OWNER_STORAGE_BYTES"


def refusal(stored: int, adding: int, quota: int, what: str) -> StorageQuotaExceeded | None:
    """The refusal of adding `adding` bytes (`what`) to the owner's `stored`, or None."""
    if adding <= 0:
        return None
    if adding > quota:
        return LargerThanStorageQuota(
            f"{what} holds {adding:,} bytes, more than the {quota:,} an owner may store ({SETTING})"
        )
    if stored + adding > quota:
        return StorageQuotaExceeded(
            f"{what} would add {adding:,} bytes to the {stored:,} the owner stores, past the "
            f"{quota:,} it may ({SETTING}): delete conversations to make room"
        )
    return None


def check_files(
    connection: Connection, owner: str | None, checked: Sequence[CheckedFile], quota: int
) -> None:
    """Refuse a message's files whose new bytes would take the owner past its quota (the
    owner's storage lock taken first, kept until the files are stored)."""
    lock_storage(connection, owner)
    sizes = {item.sha256: len(item.data) for item in checked}
    adding = storage.new_bytes(connection, owner, sizes)
    if adding:
        refused = refusal(storage.stored_bytes(connection, owner), adding, quota, "the files")
        if refused is not None:
            raise refused


def stored_before_fork(connection: Connection, conversation_id: uuid.UUID) -> int:
    """What the conversation's owner stores before a fork of it (or a history imported into
    it), the owner's storage lock taken (kept until the commit)."""
    owner = storage.owner_of(connection, conversation_id)
    lock_storage(connection, owner)
    return storage.stored_bytes(connection, owner)


def check_fork(
    connection: Connection, stored: int, fork_id: uuid.UUID, quota: int, what: str = "the fork"
) -> None:
    """Refuse the fork just copied (or the history just imported: `what`), in this
    transaction, when its bytes take the owner past its quota: the transaction then rolls the
    copy back."""
    adding = storage.conversation_bytes(connection, fork_id)
    refused = refusal(stored, adding, quota, what)
    if refused is not None:
        raise refused


__all__ = ["check_files", "check_fork", "refusal", "stored_before_fork"]
