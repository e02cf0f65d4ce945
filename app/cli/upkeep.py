"""The upkeep commands: `cleanup` (fail conversations stuck without a heartbeat) and `prune`
(delete resting conversations past their retention)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from app.cli.processes import share_metrics
from app.errors import ChatWorkerError


def add_commands(commands: Any) -> None:
    """`cleanup` and `prune`."""
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


def _cleanup(args: argparse.Namespace) -> int:
    from app.config import load_settings

    settings = load_settings()
    if settings.metrics_dir:  # count into the workers' metrics on this machine
        share_metrics(Path(settings.metrics_dir), fresh=False)
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
