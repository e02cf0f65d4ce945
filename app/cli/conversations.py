"""The commands on a conversation: `submit` a message, show its `status` (or follow it), `cancel`
its turn."""

from __future__ import annotations

import argparse
import json
import sys
import uuid
from typing import Any

from app.errors import ChatWorkerError
from app.vocabulary import BUSY_POLICIES, REJECT, TOOL_CHOICES, busy_policies_said


def add_commands(commands: Any) -> None:
    """`submit`, `status` and `cancel`."""
    submit = commands.add_parser("submit", help="send a user message (to a new conversation)")
    submit.add_argument("text", help="the message")
    submit.add_argument("--conversation", help="an existing conversation id (default: a new one)")
    submit.add_argument("--model", help="model of a new conversation")
    submit.add_argument("--instructions", help="system instructions of a new conversation")
    submit.add_argument("--tools", default="", help="comma-separated tool names allowed")
    submit.add_argument("--tool-choice", default="auto", choices=TOOL_CHOICES)
    submit.add_argument(
        "--on-busy",
        default=REJECT,
        choices=BUSY_POLICIES,
        help=f"{busy_policies_said()} (default: {REJECT})",
    )
    submit.add_argument("--idempotency-key", help="a retried submit with this key runs once")
    submit.set_defaults(run=_submit)

    status = commands.add_parser("status", help="show a conversation's status and transcript")
    status.add_argument("conversation", help="conversation id")
    status.add_argument("--follow", action="store_true", help="keep printing until it rests")
    status.add_argument(
        "--after",
        default="0",
        help=(
            "with --follow: start after this cursor, an event seq or the cursor a stopped follow "
            "printed (resume where it stopped)"
        ),
    )
    status.add_argument("--json", action="store_true", help="print JSON instead of text")
    status.set_defaults(run=_status)

    cancel = commands.add_parser("cancel", help="stop a conversation's turn (or one turn)")
    cancel.add_argument("conversation", nargs="?", help="conversation id (its current turn)")
    cancel.add_argument("--turn", help="a turn id instead (the running one, or a waiting one)")
    cancel.set_defaults(run=_cancel)


def _submit(args: argparse.Namespace) -> int:
    from app.client import ChatClient

    client = ChatClient()
    try:
        if args.conversation:
            conversation_id = uuid.UUID(args.conversation)
        else:
            tools = [name.strip() for name in args.tools.split(",") if name.strip()]
            conversation_id = client.create_conversation(
                model=args.model,
                instructions=args.instructions,
                tools=tools,
                tool_choice=args.tool_choice,
            )
        submitted = client.submit_message(
            conversation_id,
            args.text,
            on_busy=args.on_busy,
            idempotency_key=args.idempotency_key,
        )
    finally:
        client.close()
    waiting = " (waits behind the running turn)" if submitted.seq is None else ""
    print(
        f"conversation {submitted.conversation_id} turn {submitted.turn_id} "
        f"message {submitted.seq}{waiting}"
    )
    if not submitted.enqueued:
        print(f"warning: {submitted.detail}", file=sys.stderr)
    return 0


def _status(args: argparse.Namespace) -> int:
    from app.client import ChatClient
    from app.printing import follow, render_message

    client = ChatClient()
    try:
        if args.follow:
            view = follow(
                client, args.conversation, sys.stdout, after=args.after, resume_hint=sys.stderr
            )
        else:
            view = client.get_conversation(args.conversation)
            if args.json:
                print(json.dumps(as_json(view), indent=2, default=str))
                return 0
            print(f"[{view.status}]" + (f": {view.error}" if view.error else ""))
            for message in view.messages:
                print(render_message(message))
            print(f"iterations {view.iterations}, tokens {view.total_tokens}")
    finally:
        client.close()
    return 0 if view.status != "failed" else 1


def _cancel(args: argparse.Namespace) -> int:
    from app.client import ChatClient

    if (args.conversation is None) == (args.turn is None):
        raise ChatWorkerError("give a conversation id, or --turn TURN_ID (one of the two)")
    client = ChatClient()
    try:
        if args.turn is not None:
            turn = client.cancel_turn(args.turn)
        else:
            found = client.cancel(args.conversation)
            if found is None:
                print("the conversation has no turn: nothing to cancel")
                return 0
            turn = found
    finally:
        client.close()
    if turn.status == "cancelled":
        print(f"turn {turn.id} cancelled")
    elif turn.is_finished:
        print(f"turn {turn.id} had already ended: {turn.status}")
    else:
        print(f"turn {turn.id}: cancel requested; its worker is stopping it")
    return 0


def as_json(view: object) -> object:
    from dataclasses import asdict, is_dataclass

    return asdict(view) if is_dataclass(view) and not isinstance(view, type) else view
