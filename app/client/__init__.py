"""The web-app client: `ChatClient` / `AsyncChatClient`, the operator's `AdminClient` /
`AsyncAdminClient`, and the views they return.

It never imports the worker, litellm or MCP: a web process pays only for SQLAlchemy and the queue.
Each name is imported on first use (PEP 562), so importing one module of the package (its views,
its checks) does not load the whole client.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_VIEWS = "app.client.views"
# name -> the module it is defined in
_HOMES = {
    "AdminClient": "app.client.admin",
    "AsyncChatClient": "app.client.asynchronous",
    "AsyncAdminClient": "app.client.asynchronous_admin",
    "ChatClient": "app.client.facade",
    "AsyncFollowing": "app.client.following",
    "Following": "app.client.following",
    "FollowItem": "app.client.following",
    "Cursor": "app.client.merge",
    "ActionView": _VIEWS,
    "ConversationView": _VIEWS,
    "Decision": _VIEWS,
    "EventPage": _VIEWS,
    "EventView": _VIEWS,
    "MessageView": _VIEWS,
    "Submitted": _VIEWS,
    "ToolInfo": _VIEWS,
    "TurnRecord": _VIEWS,
    "TurnView": _VIEWS,
    "Delta": "app.live",
    "Discarded": "app.live",
    "Fragment": "app.live",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    found = getattr(import_module(home), name)
    globals()[name] = found  # asked once
    return found


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


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
