"""The commands of `AsyncChatClient` on a conversation as a whole: create it (or find it again),
delete it, switch its active path, fork it; and the checks and reads of its files.

Each command checks its input (`checks`) and runs its SQL (`store/`) in one transaction, both in
the client's `offload`; a bad request raises an `InvalidRequest` subclass and writes nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy.exc import IntegrityError

from app.client import attachments, branching, filing, quota
from app.client.checks import (
    check_approval_tools,
    check_context,
    check_context_policy,
    check_fallback_models,
    check_model,
    check_seq,
    check_text,
    check_tool_choice,
    check_tool_names,
    check_tools_offered,
    parse_conversation_id,
    parse_file_id,
)
from app.client.keys import check_owner_name
from app.client.reader import AsyncReader
from app.client.schemas import check_client_tools, check_output_schema
from app.client.store import conversations, reads
from app.client.store import files as stored_files
from app.client.views import ConversationView, StoredFile
from app.errors import InvalidRequest


class ConversationCommands(AsyncReader):
    """What `AsyncChatClient` does to a conversation as a whole (its base)."""

    async def create_conversation(
        self,
        *,
        model: str | None = None,
        instructions: str | None = None,
        tools: Sequence[str] = (),
        tool_choice: str = "auto",
        context: dict[str, Any] | None = None,
        owner: str | None = None,
        conversation_id: uuid.UUID | str | None = None,
        client_tools: Sequence[dict[str, Any]] | None = None,
        clarify: bool = True,
        approval_tools: Sequence[str] | None = None,
        context_policy: dict[str, Any] | None = None,
        output_schema: Mapping[str, Any] | None = None,
        fallback_models: Sequence[str] | None = None,
    ) -> uuid.UUID:
        """A new idle conversation; `tools` are names from `list_tools()`.

        `owner`: who may see it through the HTTP API (None: no one in particular). A caller may
        choose its id: a second create with the same id and the same fields returns it again
        (see `create_or_get`), with other fields it is `ConversationConflict`.

        `client_tools`: tools the web app's client executes ({"name", "description",
        "parameters": a JSON Schema}); a call of one pauses the turn (`requires_action`) until
        the client posts its output (`answer_actions`). `clarify`: the model may ask the
        user a question (`agent_clarify`) when it has tools; the next message answers it.
        `approval_tools`: tools (of `tools`) whose every call the user approves first, beyond
        what each MCP server's own policy asks (a caller can ask for more, never less).
        `context_policy`: this conversation's own rules for what the model is sent as it grows
        (`window`, `threshold`, `reply_tokens`, `compaction`, `summary_model`, `prompt_cache`),
        over the settings'. `output_schema`: every final answer must match this JSON Schema
        (`{"name", "schema", "strict"}`; checked before the turn completes, one repair asked
        for); a message may ask for its own. `fallback_models`: the models a call moves to, in
        order, when the one in use is down or its transient errors spent their retries (None:
        the settings' `CHATWORKER_FALLBACK_MODELS`)."""
        created, _ = await self.create_or_get(
            model=model,
            instructions=instructions,
            tools=tools,
            tool_choice=tool_choice,
            context=context,
            owner=owner,
            conversation_id=conversation_id,
            client_tools=client_tools,
            clarify=clarify,
            approval_tools=approval_tools,
            context_policy=context_policy,
            output_schema=output_schema,
            fallback_models=fallback_models,
        )
        return created.id

    async def create_or_get(
        self,
        *,
        model: str | None = None,
        instructions: str | None = None,
        tools: Sequence[str] = (),
        tool_choice: str = "auto",
        context: dict[str, Any] | None = None,
        owner: str | None = None,
        conversation_id: uuid.UUID | str | None = None,
        client_tools: Sequence[dict[str, Any]] | None = None,
        clarify: bool = True,
        approval_tools: Sequence[str] | None = None,
        context_policy: dict[str, Any] | None = None,
        output_schema: Mapping[str, Any] | None = None,
        fallback_models: Sequence[str] | None = None,
    ) -> tuple[ConversationView, bool]:
        """`create_conversation`, as read in its transaction (without messages), and whether it
        was created (False: it existed, same fields)."""

        def create() -> tuple[ConversationView, bool]:
            chosen_model = check_model(self.settings.model if model is None else model)
            check_tool_choice(tool_choice)
            names = check_tool_names(tools, tool_choice)
            declared = check_client_tools(client_tools, names)
            approval = check_approval_tools(approval_tools, names)
            if not isinstance(clarify, bool):
                raise InvalidRequest(f"clarify must be true or false, not {clarify!r}")
            if instructions is not None:
                check_text(instructions, "instructions", self.wiring.limit, allow_empty=True)
            check_context(context)
            policy = check_context_policy(context_policy)
            schema = check_output_schema(output_schema)
            fallbacks = check_fallback_models(fallback_models, chosen_model)
            if owner is not None:
                check_owner_name(owner)
            chosen = (
                uuid.uuid4() if conversation_id is None else parse_conversation_id(conversation_id)
            )
            setup: dict[str, Any] = {
                "owner": owner,
                "model": chosen_model,
                "instructions": instructions,
                "tools": names,
                "tool_choice": tool_choice,
                "context": context,
                "client_tools": declared,
                "clarify": clarify,
                "approval_tools": approval,
                "context_policy": policy,
                "output_schema": schema,
                "fallback_models": fallbacks,
            }
            try:
                return self._insert(chosen, setup)
            except IntegrityError:
                if conversation_id is None:
                    raise
                # Two creates of one chosen id at once: the other one won; compare with it.
                return self._insert(chosen, setup)

        return await self.offload(create)

    def _insert(
        self, conversation_id: uuid.UUID, setup: dict[str, Any]
    ) -> tuple[ConversationView, bool]:
        with self.engine.begin() as connection:
            if setup["tools"]:
                check_tools_offered(setup["tools"], reads.catalogue_names(connection))
            created = conversations.insert_conversation(connection, conversation_id, **setup)
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
