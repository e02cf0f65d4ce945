"""A program for `tests/integration/test_zygote.py`: reports what a process started by the zygote
sees, or sets some state up and execs itself (`python -m tests.servers.zygote_probe ...`).

    report CODE    print one JSON line (session, env, cwd, argv, modules, logging), exit CODE
    exec CODE      configure logging, import app.config, install a SIGUSR1 handler, then exec
                   `report CODE`: the report must show none of it
    sleep          print "sleeping PID", then sleep until killed
    echo           copy a line of stdin to stdout, then exit 0
    spawn LOG      start `report 9` (logging to LOG) as a test would, print how it went
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import time


def report(code: int) -> None:
    print(
        json.dumps(
            {
                "pid": os.getpid(),
                "ppid": os.getppid(),
                "session_leader": os.getsid(0) == os.getpid(),
                "env": dict(os.environ),
                "cwd": os.getcwd(),
                "argv": sys.argv[1:],
                "app_config_imported": "app.config" in sys.modules,
                "litellm_imported": "litellm" in sys.modules,
                "root_handlers": len(logging.getLogger().handlers),
                "sigusr1_default": signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL,
            }
        ),
        flush=True,
    )
    raise SystemExit(code)


def main(argv: list[str]) -> None:
    if argv[0] == "report":
        report(int(argv[1]))
    if argv[0] == "exec":
        logging.basicConfig(level=logging.INFO)
        import app.config  # noqa: F401

        signal.signal(signal.SIGUSR1, lambda *_: None)
        os.execv(sys.executable, [sys.executable, "-m", __spec__.name, "report", argv[1]])
    if argv[0] == "sleep":
        print("sleeping", os.getpid(), flush=True)
        while True:
            time.sleep(1)

    if argv[0] == "spawn":
        from pathlib import Path

        from app.testing.zygote import RemoteChild, start_process

        command = [sys.executable, "-m", __spec__.name, "report", "9"]
        child = start_process(command, dict(os.environ), Path.cwd(), Path(argv[1]))
        code = child.wait(timeout=60)
        remote = isinstance(child, RemoteChild)
        print(json.dumps({"code": code, "remote": remote, "zygote": os.getppid()}), flush=True)
    if argv[0] == "echo":
        sys.stdout.write(sys.stdin.readline())
        sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
