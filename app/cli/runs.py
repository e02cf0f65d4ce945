"""The operator's commands on the runs across owners (and `workers`, the fleet): `runs list`
(filtered, newest first, as `GET /v1/admin/turns` gives them), `runs show` (a turn's timeline,
as `GET /v1/admin/turns/{id}/timeline`) and `runs cancel` (audited as the operator named by
`--as`)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

from app.cli.admin import admin_client
from app.cli.conversations import as_json
from app.vocabulary import TURN_STATUSES

STATUSES = (*TURN_STATUSES, "stuck")  # (app.client.runs's, without importing the client)
_AGO = re.compile(r"(\d+)([smhd])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def add_commands(commands: Any) -> None:
    """`runs`."""
    runs = commands.add_parser("runs", help="the runs across owners: list, cancel (operators)")
    run_commands = runs.add_subparsers(dest="runs_command", required=True, metavar="ACTION")
    listing = run_commands.add_parser("list", help="turns of every owner, newest first")
    listing.add_argument("--status", choices=STATUSES, help="stuck: running, no heartbeat")
    listing.add_argument("--owner", help="one owner's")
    listing.add_argument("--model", help="run on this model")
    listing.add_argument("--since", type=_moment, help="created since: 30m, 1h, 2d or ISO 8601")
    listing.add_argument("--stuck-seconds", type=float, default=60.0)
    listing.add_argument("--limit", type=int, default=50)
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(run=_runs_list)
    show = run_commands.add_parser("show", help="a turn's timeline: its steps and their times")
    show.add_argument("turn_id")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(run=_runs_show)
    workers = commands.add_parser("workers", help="the fleet: live workers, the queue (operators)")
    workers.add_argument("--json", action="store_true", help="print JSON")
    workers.set_defaults(run=_workers)
    retry = run_commands.add_parser(
        "retry", help="retry every failed run a filter selects: --dry-run, then --confirm"
    )
    retry.add_argument("--status", choices=["failed"], help="(what a retry selects anyway)")
    retry.add_argument("--owner", help="one owner's")
    retry.add_argument("--model", help="run on this model")
    retry.add_argument("--since", type=_moment, help="created since: 30m, 1h, 2d or ISO 8601")
    step = retry.add_mutually_exclusive_group(required=True)
    step.add_argument("--dry-run", action="store_true", help="count them; print the token")
    step.add_argument("--confirm", metavar="TOKEN", help="the dry run's token: retry them")
    retry.add_argument("--as", dest="operator", help="who acts (the audit log; with --confirm)")
    retry.add_argument("--batch", type=int, default=200, help="runs per round (1 to 1000)")
    retry.set_defaults(run=_runs_retry)
    cancel = run_commands.add_parser("cancel", help="cancel any owner's turn (audited)")
    cancel.add_argument("turn_id")
    cancel.add_argument("--as", dest="operator", required=True, help="who acts (the audit log)")
    cancel.set_defaults(run=_runs_cancel)


def _moment(text: str) -> datetime:
    """`30m`, `1h`, `2d` ago, or an ISO 8601 time with its zone."""
    found = _AGO.fullmatch(text.strip())
    if found is not None:
        amount = timedelta(**{_UNITS[found.group(2)]: int(found.group(1))})
        return datetime.now(UTC) - amount
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give 30m, 1h, 2d or an ISO time") from None
    if moment.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r}: an ISO time needs its zone (Z, +01:00)")
    return moment


def _runs_list(args: argparse.Namespace) -> int:
    from app.client.runs import RunFilter

    client = admin_client()
    try:
        wanted = RunFilter(
            status=args.status,
            owner=args.owner,
            model=args.model,
            since=args.since,
            stuck_seconds=args.stuck_seconds,
            limit=args.limit,
        )
        found = client.admin.list_runs(wanted)
    finally:
        client.close()
    if args.json:
        print(json.dumps([as_json(run) for run in found], indent=2, default=str))
        return 0
    for run in found:
        beat = (
            "" if run.heartbeat_age_s is None else f"  on {run.worker}, {run.heartbeat_age_s:.0f}s"
        )
        error = f"  {run.error.splitlines()[0][:80]}" if run.error else ""
        print(
            f"{run.turn_id}  {run.status:<15} {run.created_at:%Y-%m-%d %H:%M:%S}  "
            f"{run.owner or '-'}  {run.model or '-'}{beat}{error}"
        )
    return 0


def _runs_show(args: argparse.Namespace) -> int:
    from app.client.timeline import as_json as steps_as_json
    from app.client.timeline import timeline

    client = admin_client()
    try:
        record = client.turn_record(args.turn_id)
    finally:
        client.close()
    steps = timeline(record.turn, record.events)
    if args.json:
        print(json.dumps(steps_as_json(steps), indent=2, default=str))
        return 0
    turn, conversation = record.turn, record.conversation
    print(f"turn {turn.id} of {conversation.owner or '-'} ({conversation.id}): {turn.status}")
    start = steps[0].started_at if steps else None
    for step in steps:
        offset = (step.started_at - start).total_seconds() if start is not None else 0.0
        detail = ", ".join(f"{k}={v}" for k, v in step.detail.items() if v not in (None, [], {}))
        print(f"  +{offset:8.3f}s  {step.kind:<10} {step.duration_ms:>7} ms  {detail}")
    return 0


def _workers(args: argparse.Namespace) -> int:
    client = admin_client()
    try:
        fleet = client.admin.fleet()
    finally:
        client.close()
    if args.json:
        print(json.dumps(as_json(fleet), indent=2, default=str))
        return 0
    for worker in fleet.workers:
        beat = (
            ""
            if worker.last_heartbeat is None
            else f", last heartbeat {worker.last_heartbeat:%H:%M:%S}"
        )
        since = f"{worker.since:%Y-%m-%d %H:%M}"
        print(f"{worker.name}  {worker.in_flight} in flight{beat}  (since {since})")
    oldest = (
        ""
        if fleet.oldest_queued_s is None
        else f", the oldest waiting {fleet.oldest_queued_s:.0f}s"
    )
    print(f"{len(fleet.workers)} workers, {fleet.running} running, {fleet.queued} queued{oldest}")
    outcomes = ", ".join(
        f"{status} {count}" for status, count in sorted(fleet.outcomes_last_hour.items())
    )
    print(f"last hour: {outcomes or 'nothing'}")
    for kind, count in fleet.failures_last_day[:10]:
        print(f"  failed {count:>6}  {kind}")
    return 0


def _runs_retry(args: argparse.Namespace) -> int:
    """The dry run (a count and its token), or the confirmed retry, batch after batch until
    none is left: a run cut off midway is finished by running the same command again."""
    import asyncio

    from app.client import AsyncChatClient, bulk
    from app.client.runs import RunFilter

    if args.confirm is not None and not args.operator:
        print("chatworker runs retry: --confirm needs --as NAME (the audit log)", file=sys.stderr)
        return 2
    client = admin_client()

    async def act() -> int:
        chat = AsyncChatClient(client)
        if args.dry_run:
            wanted = RunFilter(owner=args.owner, model=args.model, since=args.since)
            chosen = bulk.plan(bulk.RETRY, wanted, datetime.now(UTC))
            print(f"{await bulk.count(chat, chosen)} runs to retry; confirm with:", file=sys.stderr)
            print(chosen.token)
            return 0
        chosen = bulk.parse_token(args.confirm)
        while True:
            done = await bulk.run(chat, chosen, args.operator, args.batch)
            print(f"retried {done.done}, passed over {done.skipped}, left {done.remaining}")
            if done.remaining == 0:
                return 0

    try:
        return asyncio.run(act())
    finally:
        client.close()


def _runs_cancel(args: argparse.Namespace) -> int:
    from app.client.audit import TURN_CANCEL, AuditAction

    client = admin_client()
    try:
        action = AuditAction(args.operator, TURN_CANCEL, args.turn_id, {"via": "cli"})
        turn = client.cancel_turn(args.turn_id, audit=action)
    finally:
        client.close()
    print(f"turn {turn.id}: {turn.status}", file=sys.stderr)
    return 0
