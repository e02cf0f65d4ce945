"""The project's exceptions, in one tree.

    ChatWorkerError                 base of everything raised on purpose here
    ├── ConfigError                 a setting is invalid; the message names the variable
    ├── DatabaseUnavailable         the database cannot be reached or migrated, or did not answer
    │                               (the client's engine raises it for every outage)
    └── InvalidRequest              the caller's mistake; nothing was written
        ├── ConversationNotFound    no conversation has that id
        ├── TurnNotFound            no turn has that id
        ├── MessageNotFound         the conversation has no message with that seq
        ├── ConversationBusy        a turn is running and the busy policy is `reject`
        ├── NotBranchable           the message cannot take that operation (an edit of an
        │                           assistant message, a fork at unanswered calls, a steer
        │                           into a turn that waits for its client, ...)
        ├── IdempotencyKeyReused    the key was used before, with another text
        ├── InvalidCursor           an event cursor that is negative or beyond the end
        ├── NotRetryable            only a `failed` conversation can be retried
        ├── InvalidMessage          empty or unstorable text
        │   └── MessageTooLarge     over the configured limit
        ├── InvalidFile             a message's file: a media type its bytes belie, not taken
        │   ├── FileTooLarge        over CHATWORKER_MAX_FILE_BYTES (or the message's total)
        │   └── FileNotTaken        the model takes no such file (an image, a PDF): named
        ├── FileNotFound            no file has that id (or another owner's)
        ├── ConversationConflict    a caller-chosen id already names another conversation
        ├── KeyNotFound             no API key has that id
        ├── BudgetExceeded          the conversation's or its owner's budget is used up
        ├── StorageQuotaExceeded    a message's files or a fork would take the owner past
        │   │                       CHATWORKER_OWNER_STORAGE_BYTES (delete conversations)
        │   └── LargerThanStorageQuota  it alone holds more than the whole quota
        ├── TooManyRunningTurns     the owner runs its limit of turns (`retry_after` seconds)
        ├── WebhookNotFound         no webhook (or delivery) has that id
        ├── UnknownTool             a tool name no worker offers
        └── InvalidOutputSchema     an output schema that is not a usable JSON Schema of an object

Worker-side errors (a model call that failed for good, a lost lease) live beside the worker code:
`app.worker.ports.ModelError`, `app.worker.store.LeaseLost`.
"""

from __future__ import annotations

import uuid


class ChatWorkerError(Exception):
    """Base class of every error this package raises on purpose."""


class ConfigError(ChatWorkerError):
    """A setting is invalid; the message names the environment variable to fix."""


class DatabaseUnavailable(ChatWorkerError):
    """The database cannot be reached or migrated, or did not answer: what the client raises for
    an outage (`app.client.store.outage`), so its callers need no SQLAlchemy to tell one."""


class InvalidRequest(ChatWorkerError):
    """The caller asked for something that cannot be done; nothing was written."""


class ConversationNotFound(InvalidRequest):
    """No conversation has that id."""


class MessageNotFound(InvalidRequest):
    """The conversation has no message with that seq."""


class InvalidOutputSchema(InvalidRequest):
    """An `output_schema` that is not a usable JSON Schema of an object; the error says where."""


class NotBranchable(InvalidRequest):
    """The message (or the running turn) cannot take that operation; the error says what can."""


class ConversationBusy(InvalidRequest):
    """The conversation is running a turn (`turn_id`) and the message was not queued behind it."""

    def __init__(self, message: str, turn_id: uuid.UUID | None = None) -> None:
        super().__init__(message)
        self.turn_id = turn_id


class BudgetExceeded(InvalidRequest):
    """A budget of the conversation or of its owner is used up: no new turn until it resets
    (a daily one, at midnight UTC) or is raised."""


class StorageQuotaExceeded(InvalidRequest):
    """What the request would store (a message's new files, a fork's copied messages) takes the
    owner past `CHATWORKER_OWNER_STORAGE_BYTES`: deleting conversations makes room (their
    messages, and the files no other conversation uses, go with them)."""


class LargerThanStorageQuota(StorageQuotaExceeded):
    """What the request would store is more than the owner's whole storage quota: no deletion
    makes room for it."""


class TooManyRunningTurns(InvalidRequest):
    """The owner already runs `CHATWORKER_OWNER_MAX_RUNNING_TURNS` turns and the owner limit
    policy is `reject`: try again in `retry_after` seconds."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class WebhookNotFound(InvalidRequest):
    """No webhook, or no delivery of it, has that id (or it is another owner's)."""


class TurnNotFound(InvalidRequest):
    """No turn has that id."""


class ActionNotFound(InvalidRequest):
    """The turn never waited for an action with that call id."""


class ActionAlreadyAnswered(InvalidRequest):
    """The action has an answer already (another output, or the turn was cancelled): the new
    one is refused."""


class IdempotencyKeyReused(InvalidRequest):
    """The idempotency key was already used for this conversation with another text."""


class InvalidCursor(InvalidRequest):
    """An event cursor that is negative or beyond the conversation's last event."""


class NotRetryable(InvalidRequest):
    """Only a failed conversation can be retried."""


class InvalidMessage(InvalidRequest):
    """The message text is empty, too large, or cannot be stored."""


class MessageTooLarge(InvalidMessage):
    """The message is longer than `CHATWORKER_MAX_MESSAGE_CHARS`."""


class InvalidFile(InvalidRequest):
    """A file of a message is not what it says, of a type not taken, or empty."""


class FileTooLarge(InvalidFile):
    """A file, or a message's files together, over the configured limits."""


class FileNotTaken(InvalidFile):
    """The conversation's model does not take that kind of file (an image to a text-only model)."""


class FileNotFound(InvalidRequest):
    """No file has that id, or another owner's."""


class ConversationConflict(InvalidRequest):
    """A caller-chosen conversation id is taken by a conversation set up otherwise (or by another
    owner's: which one is never said)."""


class KeyNotFound(InvalidRequest):
    """No API key has that id."""


class UnknownTool(InvalidRequest):
    """A tool name that no worker's MCP servers offer."""
