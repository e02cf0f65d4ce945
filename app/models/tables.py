"""The models' tables as SQLAlchemy Core `Table`s, each alias written once, for the two stores'
statements (`app/client/store/`, `app/worker/store/`)."""

from __future__ import annotations

from typing import cast

from sqlalchemy import Table

from app.models.api_key import ApiKey
from app.models.audit import AuditEntry
from app.models.budget import Budget
from app.models.compaction import Compaction
from app.models.conversation import Conversation
from app.models.event import Event
from app.models.file import File, FileName, FileUse
from app.models.message import Message
from app.models.tool import CatalogTool
from app.models.tool_output import ToolOutput
from app.models.turn import Turn
from app.models.webhook import Webhook, WebhookDelivery

api_keys = cast(Table, ApiKey.__table__)
audit_log = cast(Table, AuditEntry.__table__)
budgets = cast(Table, Budget.__table__)
catalog = cast(Table, CatalogTool.__table__)
compactions = cast(Table, Compaction.__table__)
conversations = cast(Table, Conversation.__table__)
deliveries = cast(Table, WebhookDelivery.__table__)
events = cast(Table, Event.__table__)
files = cast(Table, File.__table__)
file_names = cast(Table, FileName.__table__)
file_uses = cast(Table, FileUse.__table__)
messages = cast(Table, Message.__table__)
tool_outputs = cast(Table, ToolOutput.__table__)
turns = cast(Table, Turn.__table__)
webhooks = cast(Table, Webhook.__table__)

__all__ = [
    "api_keys",
    "audit_log",
    "budgets",
    "catalog",
    "compactions",
    "conversations",
    "deliveries",
    "events",
    "file_names",
    "file_uses",
    "files",
    "messages",
    "tool_outputs",
    "turns",
    "webhooks",
]
