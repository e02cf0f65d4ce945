"""The web-app client: `ChatClient` / `AsyncChatClient` and the views they return.

It never imports the worker, litellm or MCP: a web process pays only for SQLAlchemy and the queue.
"""

from app.client.facade import AsyncChatClient, ChatClient
from app.client.views import (
    ConversationView,
    EventPage,
    EventView,
    MessageView,
    Submitted,
    ToolInfo,
    TurnView,
)

__all__ = [
    "AsyncChatClient",
    "ChatClient",
    "ConversationView",
    "EventPage",
    "EventView",
    "MessageView",
    "Submitted",
    "ToolInfo",
    "TurnView",
]
