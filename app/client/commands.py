"""The commands of `AsyncChatClient` on a conversation as a whole: create it (or find it again),
delete it, switch its active path, fork it; and the checks and reads of its files.

Each command checks its input (`checks`) and runs its SQL (`store/`) in one transaction, both in
the client's `offload`; a bad request raises an `InvalidRequest` subclass and writes nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Unpack

from sqlalchemy.exc import IntegrityError

from app.client import attachments, branching, filing, quota
from app.client.checks import check_seq, parse_conversation_id, parse_file_id
from app.client.history import check_history
from app.client.keys import check_owner_name
from app.client.setup import Setup, check_setup, check_tools_offered
from app.client.store import conversations, reads
from app.client.store import files as stored_files
from app.client.turn_finder import TurnFinder
from app.client.views import ConversationView, StoredFile


class ConversationCommands(TurnFinder):
    """What `AsyncChatClient` does to a conversation as a whole (its base)."""

    async def create_conversation(
        self,
        *,
        owner: str | None = None,
        conversation_id: uuid.UUID | str | None = None,
        **setup: Unpack[Setup],
    ) -> uuid.UUID:
        """A new idle conversation, set up by `setup` (`setup.Setup` says each key).

        `owner`: who may see it through the HTTP API (None: no one in particular). A caller may
        choose its id: a second create with the same id and the same fields returns it again
        (see `create_or_get`), with other fields it is `ConversationConflict`."""
        return (await self.create_or_get(owner=owner, conversation_id=conversation_id, **setup))[
            0
        ].id

    async def create_or_get(
        self,
        *,
        owner: str | None = None,
        conversation_id: uuid.UUID | str | None = None,
        **setup: Unpack[Setup],
    ) -> tuple[ConversationView, bool]:
        """`create_conversation`, as read in its transaction (without messages), and whether it
        was created (False: it existed, same fields)."""

        def create() -> tuple[ConversationView, bool]:
            columns = check_setup(setup, self.settings.model, self.wiring.limit)
            if owner is not None:
                check_owner_name(owner)
            chosen = (
                uuid.uuid4() if conversation_id is None else parse_conversation_id(conversation_id)
            )
            try:
                return self._insert(chosen, owner, columns)
            except IntegrityError:
                if conversation_id is None:
                    raise
                # Two creates of one chosen id at once: the other one won; compare with it.
                return self._insert(chosen, owner, columns)

        return await self.offload(create)

    def _insert(
        self, conversation_id: uuid.UUID, owner: str | None, columns: dict[str, Any]
    ) -> tuple[ConversationView, bool]:
        with self.engine.begin() as connection:
            if columns["allowed_tools"]:
                check_tools_offered(columns["allowed_tools"], reads.catalogue_names(connection))
            created = conversations.insert_conversation(connection, conversation_id, owner, columns)
            return reads.read_conversation(
                connection, conversation_id, None, messages=False
            ), created

    async def delete_conversation(
        self, conversation_id: uuid.UUID | str, *, owner: str | None = None
    ) -> None:
        """Delete the conversation with its turns, messages and events; `ConversationBusy` while
        a turn runs or waits (cancel first), `ConversationNotFound`."""

        def delete() -> None:
            found = parse_conversation_id(conversation_id)
            with self.engine.begin() as connection:
                reads.check_owner(connection, found, owner)
                conversations.delete_conversation(connection, found)

        await self.offload(delete)

    async def switch_branch(
        self, conversation_id: uuid.UUID | str, seq: int, *, owner: str | None = None
    ) -> ConversationView:
        """Make the version holding message `seq` the active path: its newest message becomes
        the leaf (the version's latest state); no turn runs. The conversation must rest with no
        turn waiting (`ConversationBusy`). Followers hear `branch.switched`. The conversation,
        with its new path."""

        def switch() -> ConversationView:
            found = parse_conversation_id(conversation_id)
            at = check_seq(seq)
            with self.engine.begin() as connection:
                reads.check_owner(connection, found, owner)
                branching.switch(connection, found, at)
                view = reads.read_conversation(connection, found, None)
            self.wiring.notify(found)
            return view

        return await self.offload(switch)

    async def fork_conversation(
        self,
        conversation_id: uuid.UUID | str,
        seq: int | None = None,
        *,
        new_id: uuid.UUID | str | None = None,
        owner: str | None = None,
    ) -> ConversationView:
        """A new conversation of the same owner and setup holding a copy of the path up to
        message `seq` (None: all of the active path) as its own, idle: it goes its own way from
        there. `NotBranchable` at a message whose path leaves a tool call unanswered."""

        def fork() -> ConversationView:
            found = parse_conversation_id(conversation_id)
            fork_id = uuid.uuid4() if new_id is None else parse_conversation_id(new_id)
            at = None if seq is None else check_seq(seq)
            with self.engine.begin() as connection:
                reads.check_owner(connection, found, owner)
                stored = quota.stored_before_fork(connection, found)
                branching.fork(connection, found, at, fork_id)
                quota.check_fork(connection, stored, fork_id, self.settings.owner_storage_bytes)
                return reads.read_conversation(connection, fork_id, None)

        return await self.offload(fork)

    async def import_history(
        self,
        conversation_id: uuid.UUID | str,
        history: Sequence[Mapping[str, Any]],
        *,
        owner: str | None = None,
    ) -> bool:
        """A history written elsewhere (an agent framework's, another provider's) as the start of
        a new conversation: its messages (`role` user, assistant or tool; `content`; an
        assistant's `tool_calls` as `{"id", "name", "arguments"}`; a tool's `tool_call_id`) as
        the conversation's path, each call answered by the tool message after it. The next
        message continues it. False, writing nothing, when the conversation holds messages
        already; `InvalidMessage` naming the message that cannot be taken; the owner's storage
        quota counts it (`StorageQuotaExceeded`, `LargerThanStorageQuota`)."""

        def write() -> bool:
            found = parse_conversation_id(conversation_id)
            rows = check_history(history, self.wiring.limit)
            with self.engine.begin() as connection:
                reads.check_owner(connection, found, owner)
                stored = quota.stored_before_fork(connection, found)
                written = conversations.insert_history(connection, found, rows)
                if written:
                    limit = self.settings.owner_storage_bytes
                    quota.check_fork(connection, stored, found, limit, "the imported history")
            if written:
                self.wiring.notify(found)
            return written

        return await self.offload(write)

    async def check_files(
        self, files: Sequence[Mapping[str, Any] | bytes] | None, model: str | None = None
    ) -> None:
        """Check files as `submit_message` does (and, with `model`, that it takes them),
        writing nothing: for a caller that creates a conversation before its first message."""

        def check() -> None:
            limits = filing.limits(self.settings)
            checked = attachments.check_files(files, limits)
            if model is not None:
                attachments.check_taken(checked, model, limits)

        await self.offload(check)

    async def get_file(self, file_id: uuid.UUID | str, *, owner: str | None = None) -> StoredFile:
        """A message's file: its media type, name and bytes (`FileNotFound` for another
        owner's, or an unknown id)."""

        def read() -> StoredFile:
            found = parse_file_id(file_id)
            with self.engine.connect() as connection:
                return stored_files.read(connection, found, owner)

        return await self.offload(read)


__all__ = ["ConversationCommands"]
