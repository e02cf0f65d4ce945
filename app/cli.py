"""The `chatworker` command line.

Subcommands import what they need when they run, so `chatworker migrate` never pays for litellm.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from sqlalchemy.engine import make_url

from app import __version__
from app.errors import ChatWorkerError


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the process exit code."""
    args = _parser().parse_args(argv)
    try:
        return int(args.run(args))
    except ChatWorkerError as exc:
        print(f"chatworker: error: {exc}", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="chatworker", description=__doc__)
    parser.add_argument("--version", action="version", version=f"chatworker {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    migrate = commands.add_parser("migrate", help="bring the database schema up to date")
    migrate.add_argument("--revision", default="head", help="target revision (default: head)")
    migrate.add_argument("--database-url", help="override DATABASE_URL for this run")
    migrate.set_defaults(run=_migrate)
    return parser


def _migrate(args: argparse.Namespace) -> int:
    from app.config import load_settings
    from app.migrate import upgrade

    url = args.database_url or load_settings().database_url
    upgrade(url, args.revision)
    shown = make_url(url).render_as_string(hide_password=True)
    print(f"database at {shown} is at revision {args.revision}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
