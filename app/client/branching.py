"""The tree's commands in their transaction: an edit and a regenerate (a submit whose turn hangs
somewhere else in the tree: `intake` admits it like any message), a switch of the active path,
and a fork into a new conversation. The SQL is `store/branches.py`'s.

Each command applies to the path of the message it names, whichever branch that is: an edit, a
regenerate or a reply after a message of another branch moves the active path there first (its
turn's start does: the web side's at rest, else the claim that starts it).

    command      what it needs                                  what it writes
    -----------  ---------------------------------------------  ------------------------------
    edit         a user message                                 a new sibling of it, made the
                                                                  path's leaf; a turn runs on it
    reply after  a message whose path answers every call it      a new user message below it
                   makes (OpenAI's previous_response_id)          (a new branch, unless it is
                                                                  the leaf); a turn runs on it
    regenerate   a message with a user message at or above it   a turn that answers that user
                   on its path (default: the leaf's)              message again: its answer is
                                                                  a sibling of the old one
    switch       any message; the conversation rests, no turn   the path moves to the newest
                   waits                                          message under it (the
                                                                  version's latest state);
                                                                  branch.switched
    fork         a message whose path answers every call it     a new conversation of the same
                   makes (default: the leaf)                      owner and setup holding a copy
                                                                  of that path

Every version stays: the path moves, nothing is deleted. A message of another conversation (or
none) is `MessageNotFound`; a message that cannot take the command is `NotBranchable`, naming
what can; nothing is written either way.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import Connection

from app.client import intake
from app.client.store import branches, conversations
from app.client.store.answers import waiting_turn
from app.client.store.journal import AT_REST, append, leaf_seq, lock_conversation, turn_id_of
from app.client.store.new_turns import ROOT, NewTurn, Target
from app.errors import ConversationBusy, NotBranchable
from app.models import BRANCH_SWITCHED, FOR_MESSAGE, FOR_REGENERATE, MESSAGE_COMMITTED, USER


@dataclass(frozen=True)
class Submit:
    """How an edit's or a regenerate's turn is admitted: as `intake.submit` admits a message."""

    idempotency_key: str | None
    on_busy: str
    owner_limit: int | None = None
    metadata: dict[str, str] | None = None
    output_schema: dict[str, Any] | None = None
    files: list[dict[str, Any]] | None = None
    echo: dict[str, Any] | None = None

    def run(
        self, connection: Connection, conversation_id: uuid.UUID, text: str, target: Target
    ) -> NewTurn:
        return intake.submit(
            connection,
            conversation_id,
            text,
            idempotency_key=self.idempotency_key,
            on_busy=self.on_busy,
            owner_limit=self.owner_limit,
            metadata=self.metadata,
            output_schema=self.output_schema,
            files=self.files,
            echo=self.echo,
            target=target,
        )


def edit(
    connection: Connection,
    conversation_id: uuid.UUID,
    seq: int,
    text: str,
    submit: Submit,
) -> NewTurn:
    """The user message `seq` edited: a new sibling with `text` (and the files of the message it
    edits), admitted like any message."""
    found = branches.node(connection, conversation_id, seq)
    if found.role != USER:
        raise NotBranchable(
            f"message {seq} of conversation {conversation_id} is a {found.role} message: only "
            "a user message can be edited; regenerate an answer instead"
        )
    target = Target(FOR_MESSAGE, found.parent_seq or ROOT)
    kept = branches.files_of(connection, conversation_id, seq)
    return replace(submit, files=kept).run(connection, conversation_id, text, target)


def reply_after(
    connection: Connection, conversation_id: uuid.UUID, seq: int, text: str, submit: Submit
) -> NewTurn:
    """A new user message right after message `seq` (a new branch there, unless `seq` is the
    leaf): the path up to it must answer every call it makes."""
    _answered_path(connection, conversation_id, seq, "continue")
    return submit.run(connection, conversation_id, text, Target(FOR_MESSAGE, seq))


def regenerate(
    connection: Connection, conversation_id: uuid.UUID, seq: int | None, submit: Submit
) -> NewTurn:
    """A new answer to the user message at or above `seq` (None: the leaf) on its path."""
    at = seq if seq is not None else leaf_seq(connection, conversation_id)
    if at is None:
        raise NotBranchable(f"conversation {conversation_id} has no message to regenerate")
    asked = [node for node in _path(connection, conversation_id, at) if node.role == USER]
    if not asked:
        raise NotBranchable(
            f"message {at} of conversation {conversation_id} has no user message before it "
            "to answer again"
        )
    question = asked[-1].seq
    text = branches.text_of(connection, conversation_id, question)
    return submit.run(connection, conversation_id, text, Target(FOR_REGENERATE, question))


def switch(connection: Connection, conversation_id: uuid.UUID, seq: int) -> int:
    """The active path moved to the newest message under `seq`; that leaf. The conversation
    must rest with no turn waiting (`ConversationBusy`): a turn's messages belong to its path."""
    row = lock_conversation(connection, conversation_id)
    waits = row.turn_count > row.turn_number or (
        row.turn_number and waiting_turn(connection, conversation_id, row.turn_number)
    )
    if row.status not in AT_REST or waits:
        busy = turn_id_of(connection, conversation_id, row.turn_number)
        raise ConversationBusy(
            f"conversation {conversation_id} is {row.status}: turn {busy} runs or waits on the "
            "active path; cancel it (or let it end), then switch",
            turn_id=busy,
        )
    branches.node(connection, conversation_id, seq)
    leaf = branches.newest_under(connection, conversation_id, seq)
    if leaf != leaf_seq(connection, conversation_id):
        branches.move_to(connection, conversation_id, leaf)
        append(
            connection,
            conversation_id,
            row.event_seq,
            [{"type": BRANCH_SWITCHED, "message_seq": leaf}],
        )
    return leaf


def fork(
    connection: Connection, conversation_id: uuid.UUID, seq: int | None, new_id: uuid.UUID
) -> None:
    """A new conversation `new_id`, set up as this one, of its owner, holding a copy of the path
    up to `seq` (None: the leaf) as its own single path, idle."""
    at = seq if seq is not None else leaf_seq(connection, conversation_id)
    path = [] if at is None else _answered_path(connection, conversation_id, at, "fork")
    conversations.insert_fork(connection, conversation_id, new_id, at)
    renumbered = branches.copy_path(connection, conversation_id, new_id, path)
    if renumbered:
        committed = [
            {"type": MESSAGE_COMMITTED, "message_seq": new} for new in sorted(renumbered.values())
        ]
        append(connection, new_id, 0, committed)


def _answered_path(
    connection: Connection, conversation_id: uuid.UUID, seq: int, verb: str
) -> list[branches.Node]:
    """The path up to message `seq`, which must answer every call it makes (`NotBranchable`
    naming them; `MessageNotFound` when there is no such message)."""
    path = _path(connection, conversation_id, seq)
    open_calls = branches.unanswered_calls(
        connection, conversation_id, path, {node.seq for node in path}
    )
    if open_calls:
        raise NotBranchable(
            f"message {seq} of conversation {conversation_id} leaves the calls "
            f"{', '.join(open_calls)} without results: {verb} at a message after their results"
        )
    return path


def _path(connection: Connection, conversation_id: uuid.UUID, seq: int) -> list[branches.Node]:
    """The path from a root to message `seq`; `MessageNotFound` when there is no such one."""
    path = branches.path_to(connection, conversation_id, seq)
    if not path:
        branches.node(connection, conversation_id, seq)  # (raises MessageNotFound)
    return path


__all__ = ["Submit", "edit", "fork", "regenerate", "reply_after", "switch"]
