"""The process `chatworker worker` becomes: its logging set up (one JSON object per line with
`CHATWORKER_LOG_FORMAT=json`, before dramatiq's own setup, which then leaves it alone), then
dramatiq's command line, unchanged (`python -m app.worker.command app.worker.actors ...` takes
dramatiq's arguments). Its worker processes, forked from here, point the same setup at the pipe
dramatiq gives them (`actors.ProcessSetup`).
"""

from __future__ import annotations

import logging
import sys

from app.config import get_settings
from app.process_exit import exit_now
from app.telemetry import logs


def main() -> int:
    verbose = any(arg in ("-v", "--verbose") or arg.startswith("-vv") for arg in sys.argv[1:])
    if get_settings().log_format == logs.JSON:
        logs.configure(logs.JSON, logging.DEBUG if verbose else logging.INFO)
    from dramatiq.cli import main as dramatiq_main

    return int(dramatiq_main() or 0)  # type: ignore[no-untyped-call]


if __name__ == "__main__":
    exit_now(main())
