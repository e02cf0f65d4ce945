"""The `chatworker` command line: demo, serve, worker, migrate, submit, status, cancel, cleanup,
prune, keys, budgets, webhooks, tools.

Subcommands import what they need when they run, so `status` or `cleanup` never pay for litellm.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import NoReturn

from app import __version__
from app.cli import admin, conversations, processes, runs, upkeep, webhooks
from app.errors import ChatWorkerError
from app.process_exit import exit_now


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
    processes.add_commands(commands)  # (in the order `chatworker --help` lists them)
    conversations.add_commands(commands)
    upkeep.add_commands(commands)
    processes.add_serve(commands)
    admin.add_commands(commands)
    webhooks.add_commands(commands)
    runs.add_commands(commands)
    return parser


def run() -> NoReturn:
    """The console script: `main`, then a quick exit (`app/process_exit.py`)."""
    exit_now(main())
