"""The integration commands: `tools` (the catalogue, refreshed from the MCP servers on request)
and `webhooks` (add, list, remove, deliveries, redeliver)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from app.cli.admin import admin_client
from app.vocabulary import BODY_FORMATS, DELIVERY_STATUSES, STANDARD_BODY, WEBHOOK_EVENT_TYPES


def add_commands(commands: Any) -> None:
    """`tools` and `webhooks`."""
    tools = commands.add_parser("tools", help="list the tool catalogue")
    tools.add_argument("--refresh", action="store_true", help="ask the MCP servers and publish")
    tools.set_defaults(run=_tools)

    hooks = commands.add_parser("webhooks", help="be told when turns end: add, list, remove")
    hook_commands = hooks.add_subparsers(dest="webhooks_command", required=True, metavar="ACTION")
    add = hook_commands.add_parser("add", help="a new webhook (its signing secret shown once)")
    add.add_argument("url", help="where to POST (http or https)")
    add_subject = add.add_mutually_exclusive_group()
    add_subject.add_argument("--owner", help="every conversation of this owner")
    add_subject.add_argument("--conversation", help="only this conversation")
    add.add_argument(
        "--events",
        help=f"comma-separated: {', '.join(WEBHOOK_EVENT_TYPES)} (default: all)",
    )
    add.add_argument("--description", help="a note: what it is for")
    add.add_argument(
        "--format",
        choices=BODY_FORMATS,
        default=STANDARD_BODY,
        help="the bodies: ours, or OpenAI's webhook events (for /v1/responses)",
    )
    add.set_defaults(run=_webhooks_add)
    hook_list = hook_commands.add_parser("list", help="every webhook (never its secret)")
    hook_list.add_argument("--owner", help="only this owner's")
    hook_list.set_defaults(run=_webhooks_list)
    hook_remove = hook_commands.add_parser("remove", help="remove a webhook and its deliveries")
    hook_remove.add_argument("webhook_id")
    hook_remove.set_defaults(run=_webhooks_remove)
    sent = hook_commands.add_parser("deliveries", help="a webhook's deliveries, newest first")
    sent.add_argument("webhook_id")
    sent.add_argument("--status", choices=DELIVERY_STATUSES)
    sent.add_argument("--limit", type=int, default=50)
    sent.set_defaults(run=_webhooks_deliveries)
    again = hook_commands.add_parser("redeliver", help="send a given-up delivery again")
    again.add_argument("webhook_id")
    again.add_argument("delivery_id", type=int)
    again.set_defaults(run=_webhooks_redeliver)


def _tools(args: argparse.Namespace) -> int:
    from app.client import ChatClient

    if args.refresh:
        _refresh_catalog()
    client = ChatClient()
    try:
        for tool in client.admin.list_tools():
            summary = tool.description.splitlines()[0] if tool.description else ""
            print(f"{tool.name:24} {tool.server:16} {summary}")
    finally:
        client.close()
    return 0


def _refresh_catalog() -> None:
    import asyncio

    from app.config import load_settings
    from app.db import make_engine
    from app.worker.runtime import tool_provider
    from app.worker.store import Upkeep

    settings = load_settings()
    provider = tool_provider(settings)
    engine = make_engine(settings.database_url)

    async def refresh() -> None:
        try:
            Upkeep(engine).publish_catalog(await provider.definitions())
        finally:
            await provider.close()

    try:
        asyncio.run(refresh())
    finally:
        engine.dispose()


def _webhooks_add(args: argparse.Namespace) -> int:
    client = admin_client()
    events = None if args.events is None else [e.strip() for e in args.events.split(",")]
    try:
        hook = client.admin.add_webhook(
            args.url,
            owner=args.owner,
            conversation_id=args.conversation,
            event_types=events,
            description=args.description,
            body_format=args.format,
        )
    finally:
        client.close()
    print(
        f"webhook {hook.id} -> {hook.url}; its signing secret is shown this once:", file=sys.stderr
    )
    print(hook.secret)
    return 0


def _webhooks_list(args: argparse.Namespace) -> int:
    client = admin_client()
    try:
        found = client.admin.list_webhooks(owner=args.owner)
    finally:
        client.close()
    for hook in found:
        subject = (
            f"conversation {hook.conversation_id}"
            if hook.conversation_id
            else f"owner {hook.owner}"
            if hook.owner
            else "conversations without an owner"
        )
        print(f"{hook.id}  {hook.url}  {subject}  {','.join(hook.event_types)}")
    return 0


def _webhooks_remove(args: argparse.Namespace) -> int:
    client = admin_client()
    try:
        client.admin.remove_webhook(args.webhook_id)
    finally:
        client.close()
    print(f"webhook {args.webhook_id} removed")
    return 0


def _webhooks_deliveries(args: argparse.Namespace) -> int:
    client = admin_client()
    try:
        found = client.admin.list_deliveries(args.webhook_id, status=args.status, limit=args.limit)
    finally:
        client.close()
    for delivery in found:
        last = delivery.last_error or (
            "" if delivery.last_status_code is None else f"HTTP {delivery.last_status_code}"
        )
        print(
            f"{delivery.id}  {delivery.status}  {delivery.type}  turn {delivery.turn_id}  "
            f"attempts {delivery.attempts}  {last}"
        )
    return 0


def _webhooks_redeliver(args: argparse.Namespace) -> int:
    client = admin_client()
    try:
        delivery = client.admin.redeliver(args.webhook_id, args.delivery_id)
    finally:
        client.close()
    print(f"delivery {delivery.id}: {delivery.status}")
    return 0
