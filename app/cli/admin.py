"""The owners' commands: API `keys` (make, list, revoke) and `budgets` (set, remove, list), each
on a client whose embedded SQLite file is brought up to date first."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from app.cli.conversations import as_json
from app.vocabulary import PERIODS, TOTAL


def add_commands(commands: Any) -> None:
    """`keys` and `budgets`."""
    keys = commands.add_parser("keys", help="make, list and revoke API keys")
    key_commands = keys.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    create = key_commands.add_parser(
        "create", help="a new key for an owner, or an operator's (shown once)"
    )
    holder = create.add_mutually_exclusive_group(required=True)
    holder.add_argument("--owner", help="who the key acts as")
    holder.add_argument(
        "--operator",
        metavar="NAME",
        help="an operator's key: every owner's runs through /v1/admin, nothing else; NAME is "
        "who holds it (in the audit log)",
    )
    create.add_argument("--name", default="", help="a note: what the key is for")
    create.set_defaults(run=_keys_create)
    listing = key_commands.add_parser("list", help="every key (never its secret)")
    listing.add_argument("--owner", help="only this owner's")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(run=_keys_list)
    revoke = key_commands.add_parser("revoke", help="revoke a key by its id")
    revoke.add_argument("key_id", help="the key's id (from keys list)")
    revoke.set_defaults(run=_keys_revoke)

    budgets = commands.add_parser("budgets", help="cap what an owner or a conversation spends")
    budget_commands = budgets.add_subparsers(
        dest="budgets_command", required=True, metavar="ACTION"
    )
    for name, text in (("set", "set (or replace) a budget"), ("remove", "remove a budget")):
        action = budget_commands.add_parser(name, help=text)
        subject = action.add_mutually_exclusive_group(required=True)
        subject.add_argument("--owner", help="an owner's (all their conversations)")
        subject.add_argument("--conversation", help="one conversation's")
        action.add_argument("--period", choices=PERIODS, default=TOTAL)
        if name == "set":
            action.add_argument("--tokens", type=int, help="the most tokens (prompt + completion)")
            action.add_argument("--usd", help="the most US dollars (litellm's prices)")
            action.set_defaults(run=_budgets_set)
        else:
            action.set_defaults(run=_budgets_remove)
    shown = budget_commands.add_parser("list", help="every budget (or an owner's)")
    shown.add_argument("--owner", help="only this owner's")
    shown.set_defaults(run=_budgets_list)


def admin_client() -> Any:
    """A client for the key commands; the embedded SQLite file is brought up to date first (as
    `serve` and `demo` do), so keys can be made before the first `serve`."""
    from app.client import ChatClient
    from app.config import get_settings
    from app.migrate import upgrade

    settings = get_settings()
    if settings.is_sqlite:
        upgrade(settings.database_url)
    return ChatClient(settings)


def _keys_create(args: argparse.Namespace) -> int:
    client = admin_client()
    try:
        if args.operator is not None:
            key, text = client.admin.create_key(args.operator, args.name, operator=True)
        else:
            key, text = client.admin.create_key(args.owner, args.name)
    finally:
        client.close()
    holder = "operator" if key.operator else "owner"
    print(
        f"key {key.id} for {holder} {key.owner!r}; its secret is shown this once:", file=sys.stderr
    )
    print(text)
    return 0


def _keys_list(args: argparse.Namespace) -> int:
    client = admin_client()
    try:
        found = client.admin.list_keys(args.owner)
    finally:
        client.close()
    if args.json:
        print(json.dumps([as_json(key) for key in found], indent=2, default=str))
        return 0
    for key in found:
        state = f"revoked {key.revoked_at:%Y-%m-%d %H:%M}" if key.revoked_at else "active"
        holder = f"operator {key.owner}" if key.operator else key.owner
        print(f"{key.id}  {holder}  {state}  created {key.created_at:%Y-%m-%d %H:%M}  {key.name}")
    return 0


def _keys_revoke(args: argparse.Namespace) -> int:
    client = admin_client()
    try:
        key = client.admin.revoke_key(args.key_id)
    finally:
        client.close()
    print(f"key {key.id} of owner {key.owner!r} revoked at {key.revoked_at:%Y-%m-%d %H:%M:%S}")
    return 0


def _budgets_set(args: argparse.Namespace) -> int:
    client = admin_client()
    try:
        client.admin.set_budget(
            owner=args.owner,
            conversation_id=args.conversation,
            period=args.period,
            max_tokens=args.tokens,
            max_cost_usd=args.usd,
        )
    finally:
        client.close()
    print(f"budget set: {args.owner or args.conversation}, {args.period}")
    return 0


def _budgets_remove(args: argparse.Namespace) -> int:
    client = admin_client()
    try:
        removed = client.admin.remove_budget(
            owner=args.owner, conversation_id=args.conversation, period=args.period
        )
    finally:
        client.close()
    print("budget removed" if removed else "no such budget")
    return 0 if removed else 1


def _budgets_list(args: argparse.Namespace) -> int:
    client = admin_client()
    try:
        found = client.admin.list_budgets(args.owner)
    finally:
        client.close()
    for budget in found:
        subject = (
            f"owner {budget.owner}" if budget.owner else f"conversation {budget.conversation_id}"
        )
        tokens = "-" if budget.max_tokens is None else f"{budget.max_tokens:,} tokens"
        usd = "-" if budget.max_cost_usd is None else f"${budget.max_cost_usd:g}"
        print(f"{subject}  {budget.period}  {tokens}  {usd}")
    return 0
