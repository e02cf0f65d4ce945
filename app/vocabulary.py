"""The closed vocabularies: each fixed set of words the database, the worker, the clients, the API
and the chat page agree on, spelt once here; every other listing is derived from it.

Each set is a `Literal` (what mypy, pydantic and the OpenAPI document read) and a tuple taken
from it with `get_args` (what a CHECK, an argparse `choices` or a loop reads); each word's
constant is a member of its set (the test of this module says so). The migrations are the
exception on purpose: each holds its CHECK lists as a frozen literal (history does not move), and
`tests/unit/test_vocabulary.py` fails when the latest one no longer equals a set here. Pure: the
standard library only, so the admission, the worker and the page's server all import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final, Literal, get_args

# --- a message sent while a turn runs ------------------------------------------------------------

# What a new branch (an edit, a regenerate) may do: it cannot join the running turn.
BranchBusyPolicy = Literal["reject", "enqueue", "interrupt", "rollback"]
BusyPolicy = Literal[BranchBusyPolicy, "steer"]
REJECT: Final = "reject"
ENQUEUE: Final = "enqueue"
INTERRUPT: Final = "interrupt"
ROLLBACK: Final = "rollback"
STEER: Final = "steer"
BUSY_POLICIES: tuple[BusyPolicy, ...] = get_args(BusyPolicy)
BRANCH_BUSY_POLICIES: tuple[BranchBusyPolicy, ...] = get_args(BranchBusyPolicy)
# Each policy said once for a reader: the API's and the CLI's help join these, the chat page
# offers `BUSY_POLICY_LABELS` (the test of this module holds both to `BUSY_POLICIES`).
BUSY_POLICY_MEANINGS: Mapping[BusyPolicy, str] = MappingProxyType(
    {
        REJECT: "reject (409)",
        ENQUEUE: "enqueue behind it",
        INTERRUPT: "interrupt it",
        ROLLBACK: "rollback (interrupt it and drop its messages from the active path: this one "
        "takes their place)",
        STEER: "steer (the running turn takes the message in at its next model call)",
    }
)
BUSY_POLICY_LABELS: Mapping[BusyPolicy, str] = MappingProxyType(
    {
        REJECT: "refuse it",
        ENQUEUE: "queue my message",
        INTERRUPT: "interrupt the turn",
        ROLLBACK: "replace the turn",
        STEER: "add it to the turn",
    }
)


def busy_policies_said(policies: tuple[BusyPolicy, ...] = BUSY_POLICIES) -> str:
    """'while a turn runs: reject (409), ..., or steer (...)': the policies in one sentence."""
    said = [BUSY_POLICY_MEANINGS[policy] for policy in policies]
    return f"while a turn runs: {', '.join(said[:-1])}, or {said[-1]}"


# --- a conversation, its messages and its turns --------------------------------------------------

ConversationStatus = Literal["idle", "processing", "tool_loop", "failed"]
IDLE: Final = "idle"
PROCESSING: Final = "processing"
TOOL_LOOP: Final = "tool_loop"
FAILED: Final = "failed"
STATUSES: tuple[ConversationStatus, ...] = get_args(ConversationStatus)
RUNNING_STATUSES: tuple[ConversationStatus, ...] = (PROCESSING, TOOL_LOOP)

Role = Literal["system", "user", "assistant", "tool"]
SYSTEM: Final = "system"
USER: Final = "user"
ASSISTANT: Final = "assistant"
TOOL: Final = "tool"
ROLES: tuple[Role, ...] = get_args(Role)

ToolChoice = Literal["auto", "none", "required"]
TOOL_CHOICES: tuple[ToolChoice, ...] = get_args(ToolChoice)

TurnStatus = Literal["queued", "running", "requires_action", "completed", "failed", "cancelled"]
QUEUED: Final = "queued"
RUNNING: Final = "running"
# Waiting for the user or their client (an answer, a client tool's output): nothing runs, no
# lease is held, the conversation rests; `actions` says what is asked.
REQUIRES_ACTION: Final = "requires_action"
COMPLETED: Final = "completed"
TURN_FAILED: Final = "failed"
CANCELLED: Final = "cancelled"
TURN_STATUSES: tuple[TurnStatus, ...] = get_args(TurnStatus)
FINISHED_TURN_STATUSES: tuple[TurnStatus, ...] = (COMPLETED, TURN_FAILED, CANCELLED)

TurnKind = Literal["message", "retry", "regenerate", "steer"]
FOR_MESSAGE: Final = "message"  # a user message started it
FOR_RETRY: Final = "retry"  # a failed turn is continued from its transcript
FOR_REGENERATE: Final = "regenerate"  # a new answer to an earlier user message
# A message sent with `on_busy='steer'`: the running turn takes it in at its next model call and
# this turn carries the run on; if the running turn ends first, it simply runs next.
FOR_STEER: Final = "steer"
TURN_KINDS: tuple[TurnKind, ...] = get_args(TurnKind)

# The kinds of a pending action: a question the model asked the user (`agent_clarify`), a call of
# a tool the client executes, a call of a tool the user approves first (deny: the model is told).
ActionKind = Literal["clarification", "client_tool", "approval"]
CLARIFICATION: Final = "clarification"
CLIENT_TOOL: Final = "client_tool"
APPROVAL: Final = "approval"
ACTION_KINDS: tuple[ActionKind, ...] = get_args(ActionKind)
DecisionWord = Literal["approved", "denied"]  # an approval's `decision`
APPROVED: Final = "approved"
DENIED: Final = "denied"
DECISIONS: tuple[DecisionWord, ...] = get_args(DecisionWord)

BudgetPeriod = Literal["total", "day"]
TOTAL: Final = "total"
DAY: Final = "day"
PERIODS: tuple[BudgetPeriod, ...] = get_args(BudgetPeriod)

# --- the event log -------------------------------------------------------------------------------

EventType = Literal[
    "turn.queued",
    "turn.started",
    "turn.resumed",
    "turn.completed",
    "turn.failed",
    "turn.cancelled",
    "turn.cancel_requested",
    "status.changed",
    "message.committed",
    "action.required",
    "context.compacted",
    "branch.switched",
    "model.fallback",
]
TURN_QUEUED: Final = "turn.queued"
TURN_STARTED: Final = "turn.started"
TURN_RESUMED: Final = "turn.resumed"  # a claim not the turn's first: a crash recovered
TURN_COMPLETED: Final = "turn.completed"
TURN_FAILED_EVENT: Final = "turn.failed"
TURN_CANCELLED: Final = "turn.cancelled"
CANCEL_REQUESTED: Final = "turn.cancel_requested"
STATUS_CHANGED: Final = "status.changed"
MESSAGE_COMMITTED: Final = "message.committed"
ACTION_REQUIRED: Final = "action.required"  # the turn waits: see the turn's actions
CONTEXT_COMPACTED: Final = "context.compacted"  # what the model is sent (`data`: how)
# The active path moved (an edit, a regenerate, a switch, a rollback; `data`: the new leaf and
# the message the path now leaves from): a follower reads the path again.
BRANCH_SWITCHED: Final = "branch.switched"
# The turn moved to another model (`data`: from, to, and the error that made it): the model it
# was using failed for good while its provider was down or its transient errors spent their tries.
MODEL_FALLBACK: Final = "model.fallback"
EVENT_TYPES: tuple[EventType, ...] = get_args(EventType)
TERMINAL_EVENTS: tuple[EventType, ...] = (TURN_COMPLETED, TURN_FAILED_EVENT, TURN_CANCELLED)
# News around a turn's answer rather than a step of it (the queue, a cancel on its way, the
# status, what the model is sent, the path, the model): the dialects that show a turn as one
# answer (Responses, the AI SDK) pass these over. Every other type is a step each of them
# handles; a new type is put in one or the other (tests/unit/test_renderer_coverage.py).
NOTICE_EVENTS: tuple[EventType, ...] = (
    TURN_QUEUED,
    CANCEL_REQUESTED,
    STATUS_CHANGED,
    CONTEXT_COMPACTED,
    BRANCH_SWITCHED,
    MODEL_FALLBACK,
)

# What a follower's stream carries beside the committed events: a reply as it forms, a partial
# reply dropped, and (our SSE's last word) the end of the stream.
LiveType = Literal["message.delta", "message.discarded"]
DELTA: Final = "message.delta"
DISCARDED: Final = "message.discarded"
LIVE_TYPES: tuple[LiveType, ...] = get_args(LiveType)
STREAM_END: Final = "stream.end"

# --- webhooks ------------------------------------------------------------------------------------

WebhookEventType = Literal[
    "turn.completed", "turn.failed", "turn.cancelled", "turn.requires_action"
]
WEBHOOK_COMPLETED: Final = "turn.completed"
WEBHOOK_FAILED: Final = "turn.failed"
WEBHOOK_CANCELLED: Final = "turn.cancelled"
WEBHOOK_REQUIRES_ACTION: Final = "turn.requires_action"  # `action.required`
WEBHOOK_EVENT_TYPES: tuple[WebhookEventType, ...] = get_args(WebhookEventType)

DeliveryStatus = Literal["pending", "delivered", "failed"]
PENDING: Final = "pending"
DELIVERED: Final = "delivered"
GAVE_UP: Final = "failed"
DELIVERY_STATUSES: tuple[DeliveryStatus, ...] = get_args(DeliveryStatus)

BodyFormat = Literal["standard", "openai"]
STANDARD_BODY: Final = "standard"
OPENAI_BODY: Final = "openai"
BODY_FORMATS: tuple[BodyFormat, ...] = get_args(BodyFormat)
