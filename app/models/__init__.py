"""The typed SQLAlchemy models: a conversation and the messages of its transcript."""

from app.models.base import Base
from app.models.conversation import (
    FAILED,
    IDLE,
    PROCESSING,
    RELEASED_LEASE,
    RUNNING_STATUSES,
    STATUSES,
    TOOL_CHOICES,
    TOOL_LOOP,
    Conversation,
)
from app.models.message import ASSISTANT, ROLES, SYSTEM, TOOL, USER, Message
from app.models.tool import CatalogTool

__all__ = [
    "ASSISTANT",
    "FAILED",
    "IDLE",
    "PROCESSING",
    "RELEASED_LEASE",
    "ROLES",
    "RUNNING_STATUSES",
    "STATUSES",
    "SYSTEM",
    "TOOL",
    "TOOL_CHOICES",
    "TOOL_LOOP",
    "USER",
    "Base",
    "CatalogTool",
    "Conversation",
    "Message",
]
