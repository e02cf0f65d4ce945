#!/usr/bin/env python3
"""Cron entry point of the janitor: fail conversations stuck without a heartbeat.

    */5 * * * * cd /srv/chatworker && .venv/bin/python scripts/cleanup_stale.py >> cleanup.log 2>&1

Options: --older-than SECONDS (default CHATWORKER_STALE_AFTER_SECONDS, 300), --dry-run.
Safe to run twice, and from several machines at once: a conversation is failed at most once.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Runnable from a checkout whose package is not installed in the interpreter cron uses.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.cli import main
from app.process_exit import exit_now

if __name__ == "__main__":
    exit_now(main(["cleanup", *sys.argv[1:]]))
