"""The web-app client: `ChatClient` / `AsyncChatClient`, the operator's `AdminClient` /
`AsyncAdminClient`, and the views they return.

It never imports the worker, litellm or MCP: a web process pays only for SQLAlchemy and the queue.
"""

from app.client.admin import AdminClient
from app.client.asynchronous import AsyncChatClient
from app.client.asynchronous_admin import AsyncAdminClient
from app.client.facade import ChatClient
from app.client.following import AsyncFollowing, Following, FollowItem
from app.client.merge import Cursor
from app.client.views import (
    ActionView,
    ConversationView,
    Decision,
    EventPage,
    EventView,
    MessageView,
    Submitted,
    ToolInfo,
    TurnRecord,
    TurnView,
)
from app.live import Delta, Discarded, Fragment

__all__ = [
    "ActionView",
    "AdminClient",
    "AsyncAdminClient",
    "AsyncChatClient",
    "AsyncFollowing",
    "ChatClient",
    "ConversationView",
    "Cursor",
    "Decision",
    "Delta",
    "Discarded",
    "EventPage",
    "EventView",
    "FollowItem",
    "Following",
    "Fragment",
    "MessageView",
    "Submitted",
    "ToolInfo",
    "TurnRecord",
    "TurnView",
]
