"""An operator's action as the audit log keeps it: who took it, which action, on what, with what
(`AuditAction`); written by the action's own transaction (`store/audit.py`), so an action and
its entry are committed together or not at all. Reading is not logged.

    action                  target                 written by
    ----------------------  ---------------------  ------------------------------------------
    turn.cancel             the turn's id          `cancel_turn(..., audit=)`
    conversation.retry      the conversation's id  `retry_conversation(..., audit=)`
    bulk.cancel, bulk.retry each selected turn     `bulk.run`: one entry per run acted on, its
                                                   `detail` naming the bulk action's token
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from app.client.keys import check_owner_name

TURN_CANCEL = "turn.cancel"
CONVERSATION_RETRY = "conversation.retry"
BULK_CANCEL = "bulk.cancel"
BULK_RETRY = "bulk.retry"
ACTIONS = (TURN_CANCEL, CONVERSATION_RETRY, BULK_CANCEL, BULK_RETRY)


@dataclass(frozen=True)
class AuditAction:
    operator: str  # the operator key's name, or a token's subject
    action: str  # one of ACTIONS
    target: str
    detail: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_owner_name(self.operator)
        if self.action not in ACTIONS:
            raise ValueError(f"unknown audited action {self.action!r}")


__all__ = [
    "ACTIONS",
    "BULK_CANCEL",
    "BULK_RETRY",
    "CONVERSATION_RETRY",
    "TURN_CANCEL",
    "AuditAction",
]
