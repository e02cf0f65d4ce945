"""The `chatworker` command line: demo, serve, worker, migrate, submit, status, cancel, cleanup,
prune, keys, budgets, webhooks, tools.

Subcommands import what they need when they run, so `status` or `cleanup` never pay for litellm.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from app import __version__
from app.errors import ChatWorkerError
from app.process_exit import exit_now
from app.vocabulary import (
    BODY_FORMATS,
    BUSY_POLICIES,
    DELIVERY_STATUSES,
    PERIODS,
    REJECT,
    STANDARD_BODY,
    TOOL_CHOICES,
    TOTAL,
    WEBHOOK_EVENT_TYPES,
    busy_policies_said,
)

DEMO_QUESTION = "What does the Northwind refund policy say about used tents?"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code."""
    args = _parser().parse_args(argv)
    from app.telemetry import logs

    logs.configure(_log_format(), logging.DEBUG if args.verbose else logging.WARNING)
    try:
        return int(args.run(args))
    except ChatWorkerError as exc:
        print(f"chatworker: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _log_format() -> str:
    """`CHATWORKER_LOG_FORMAT`, or text while the settings cannot be read (the command then
    says why)."""
    from app.config import load_settings

    try:
        return load_settings().log_format
    except Exception:
        return "text"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chatworker", description=__doc__)
    parser.add_argument("--version", action="version", version=f"chatworker {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug details")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = commands.add_parser("demo", help="run one chat turn with tools end to end, offline")
    demo.add_argument("message", nargs="?", default=DEMO_QUESTION, help="what the user asks")
    demo.add_argument("--model", help="a litellm model string (default: CHATWORKER_MODEL)")
    demo.add_argument("--timeout", type=float, default=120, help="seconds to wait for the answer")
    demo.set_defaults(run=_demo)

    worker = commands.add_parser("worker", help="run queue worker processes (needs REDIS_URL)")
    worker.add_argument("--processes", type=int, default=1, help="worker processes (default 1)")
    worker.add_argument("--threads", type=int, default=2, help="consumer threads per process")
    worker.set_defaults(run=_worker)

    migrate = commands.add_parser("migrate", help="bring the database schema up to date")
    migrate.add_argument("--revision", default="head", help="target revision (default: head)")
    migrate.add_argument("--database-url", help="override DATABASE_URL for this run")
    migrate.set_defaults(run=_migrate)

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

    cleanup = commands.add_parser("cleanup", help="fail conversations stuck without a heartbeat")
    cleanup.add_argument("--older-than", type=float, help="seconds (default: the stale setting)")
    cleanup.add_argument("--dry-run", action="store_true", help="list what would change")
    cleanup.set_defaults(run=_cleanup)

    prune = commands.add_parser(
        "prune", help="delete resting conversations untouched for a while (retention)"
    )
    prune.add_argument(
        "--older-than", help="an age: 90d, 12h, 30m or 45s (default: CHATWORKER_RETENTION_DAYS)"
    )
    prune.add_argument("--dry-run", action="store_true", help="count what would be deleted")
    prune.add_argument("--batch", type=int, default=1000, help="conversations per transaction")
    prune.set_defaults(run=_prune)

    _add_api_commands(commands)
    _add_webhook_commands(commands)
    return parser


def _add_api_commands(commands: Any) -> None:
    """`serve` and `keys`."""
    serve = commands.add_parser("serve", help="serve the HTTP API and the chat page")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    serve.add_argument("--workers", type=int, default=1, help="API processes (needs REDIS_URL)")
    serve.set_defaults(run=_serve)

    keys = commands.add_parser("keys", help="make, list and revoke API keys")
    key_commands = keys.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    create = key_commands.add_parser("create", help="a new key for an owner (shown once)")
    create.add_argument("--owner", required=True, help="who the key acts as")
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


def _add_webhook_commands(commands: Any) -> None:
    """`webhooks` and `tools`."""
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


# --- commands -----------------------------------------------------------------------------------


def _migrate(args: argparse.Namespace) -> int:
    from app.config import load_settings
    from app.db import shown
    from app.migrate import upgrade

    url = args.database_url or load_settings().database_url
    upgrade(url, args.revision)
    print(f"database at {shown(url)} is at revision {args.revision}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    from app.serve import ServeOptions, serve

    if args.workers < 1:
        raise ChatWorkerError(f"--workers must be at least 1, not {args.workers}")
    level = "debug" if args.verbose else "info"
    return serve(ServeOptions(args.host, args.port, args.workers, level))


def _keys_client() -> Any:
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
    client = _keys_client()
    try:
        key, text = client.admin.create_key(args.owner, args.name)
    finally:
        client.close()
    print(f"key {key.id} for owner {key.owner!r}; its secret is shown this once:", file=sys.stderr)
    print(text)
    return 0


def _budgets_set(args: argparse.Namespace) -> int:
    client = _keys_client()
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
    client = _keys_client()
    try:
        removed = client.admin.remove_budget(
            owner=args.owner, conversation_id=args.conversation, period=args.period
        )
    finally:
        client.close()
    print("budget removed" if removed else "no such budget")
    return 0 if removed else 1


def _budgets_list(args: argparse.Namespace) -> int:
    client = _keys_client()
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


def _webhooks_add(args: argparse.Namespace) -> int:
    client = _keys_client()
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
    client = _keys_client()
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
    client = _keys_client()
    try:
        client.admin.remove_webhook(args.webhook_id)
    finally:
        client.close()
    print(f"webhook {args.webhook_id} removed")
    return 0


def _webhooks_deliveries(args: argparse.Namespace) -> int:
    client = _keys_client()
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
    client = _keys_client()
    try:
        delivery = client.admin.redeliver(args.webhook_id, args.delivery_id)
    finally:
        client.close()
    print(f"delivery {delivery.id}: {delivery.status}")
    return 0


def _keys_list(args: argparse.Namespace) -> int:
    client = _keys_client()
    try:
        found = client.admin.list_keys(args.owner)
    finally:
        client.close()
    if args.json:
        print(json.dumps([_as_json(key) for key in found], indent=2, default=str))
        return 0
    for key in found:
        state = f"revoked {key.revoked_at:%Y-%m-%d %H:%M}" if key.revoked_at else "active"
        print(
            f"{key.id}  {key.owner}  {state}  created {key.created_at:%Y-%m-%d %H:%M}  {key.name}"
        )
    return 0


def _keys_revoke(args: argparse.Namespace) -> int:
    client = _keys_client()
    try:
        key = client.admin.revoke_key(args.key_id)
    finally:
        client.close()
    print(f"key {key.id} of owner {key.owner!r} revoked at {key.revoked_at:%Y-%m-%d %H:%M:%S}")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from app.demo.run import run_demo

    return run_demo(args.message, args.model, args.timeout)


def _worker(args: argparse.Namespace) -> int:
    from app.config import load_settings

    settings = load_settings()
    if not settings.redis_url:
        raise ChatWorkerError(
            "REDIS_URL is not set: worker processes share work through Redis. Set REDIS_URL, or "
            "run `chatworker demo` to see a turn with an in-process worker."
        )
    # An idle consumer polls Redis with a back-off capped at this many ms (dramatiq: 1,000), and
    # pickup waits ~0.4x the cap. Measured (python -m bench --only pickup,footprint): 100 ms gave
    # a 40-70 ms median pickup at 2.2 % of a core idle; 50 ms gives ~15-30 ms at ~3.4 %.
    os.environ.setdefault("dramatiq_worker_timeout", "50")
    if settings.metrics_port is not None:
        _share_metrics(_metrics_dir(settings.metrics_dir, settings.metrics_port), fresh=True)
    command = [
        sys.executable,
        "-m",
        "app.worker.command",
        "app.worker.actors",
        "--queues",
        "chat",
        "--processes",
        str(args.processes),
        "--threads",
        str(args.threads),
        *(["--verbose"] if args.verbose else []),
    ]
    os.execv(sys.executable, command)
    return 0  # not reached


def _metrics_dir(configured: str | None, port: int | None) -> Path:
    if configured:
        return Path(configured)
    return Path(tempfile.gettempdir()) / f"chatworker-metrics-{port or 'shared'}"


def _share_metrics(directory: Path, *, fresh: bool) -> None:
    """Processes started from here write their metric values to `directory` (prometheus_client's
    multiprocess mode, dramatiq's queue metrics included); `fresh` empties it first (a new
    worker's counters start at zero, as a restarted process's would)."""
    from app.telemetry import MULTIPROC_ENV  # (not .metrics: it must see the variable set)

    directory.mkdir(parents=True, exist_ok=True)
    if fresh:
        for leftover in directory.glob("*.db"):
            leftover.unlink()
    os.environ[MULTIPROC_ENV] = str(directory)
    os.environ["dramatiq_prom_db"] = str(directory)  # noqa: SIM112 - dramatiq reads this name


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
                print(json.dumps(_as_json(view), indent=2, default=str))
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


def _cleanup(args: argparse.Namespace) -> int:
    from app.config import load_settings

    settings = load_settings()
    if settings.metrics_dir:  # count into the workers' metrics on this machine
        _share_metrics(Path(settings.metrics_dir), fresh=False)
    from app.db import make_engine
    from app.worker.janitor import clean_up
    from app.worker.store import Upkeep

    older_than = args.older_than if args.older_than is not None else settings.stale_after_seconds
    engine = make_engine(settings.database_url)
    try:
        report = clean_up(Upkeep(engine), older_than, dry_run=args.dry_run)
    finally:
        engine.dispose()
    verb = "would fail" if report.dry_run else "failed"
    for stale in report.conversations:
        print(f"{verb} {stale.id} (was {stale.status}, last heartbeat {stale.heartbeat_at})")
    print(f"{len(report.conversations)} conversation(s) {verb}; threshold {older_than:g} s")
    return 0


AGE_UNITS = {"d": 86400.0, "h": 3600.0, "m": 60.0, "s": 1.0}


def parse_age(text: str) -> float:
    """Seconds in an age such as `90d`, `12h`, `30m` or `45s`; a `ChatWorkerError` naming the
    value otherwise (a bare number, a zero or negative age, another unit)."""
    value, unit = text.strip()[:-1], text.strip()[-1:].lower()
    try:
        seconds = float(value) * AGE_UNITS[unit]
    except (KeyError, ValueError):
        raise ChatWorkerError(
            f"--older-than must be an age such as 90d, 12h, 30m or 45s, not {text!r}"
        ) from None
    if not seconds > 0 or seconds == float("inf"):
        raise ChatWorkerError(f"--older-than must be a positive age, not {text!r}")
    return seconds


def _prune(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime, timedelta

    from app.config import load_settings
    from app.db import make_engine
    from app.worker.store import Upkeep

    settings = load_settings()
    if args.older_than is not None:
        seconds = parse_age(args.older_than)
    elif settings.retention_days is not None:
        seconds = settings.retention_days * 86400
    else:
        raise ChatWorkerError("say how old: --older-than 90d, or set CHATWORKER_RETENTION_DAYS")
    if args.batch < 1:
        raise ChatWorkerError(f"--batch must be at least 1, not {args.batch}")
    before = datetime.now(UTC) - timedelta(seconds=seconds)
    engine = make_engine(settings.database_url)
    try:
        pruned = Upkeep(engine).prune(before, batch=args.batch, dry_run=args.dry_run)
    finally:
        engine.dispose()
    if args.dry_run:
        print(
            f"would delete {pruned.conversations} conversation(s) untouched since "
            f"{before:%Y-%m-%d %H:%M} UTC, and {pruned.deliveries} finished webhook "
            "deliveries made before then"
        )
    else:
        print(
            f"deleted {pruned.conversations} conversation(s) untouched since "
            f"{before:%Y-%m-%d %H:%M} UTC in {pruned.batches} batch(es); the longest took "
            f"{pruned.longest_batch_s * 1000:.0f} ms; and {pruned.deliveries} finished webhook "
            "deliveries"
        )
    return 0


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


def _as_json(view: object) -> object:
    from dataclasses import asdict, is_dataclass

    return asdict(view) if is_dataclass(view) and not isinstance(view, type) else view


def run() -> NoReturn:
    """The console script: `main`, then a quick exit (`app/process_exit.py`)."""
    exit_now(main())


if __name__ == "__main__":
    run()
