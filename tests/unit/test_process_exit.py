"""`exit_now` (app/process_exit.py) ends a process as `sys.exit` would, from the outside: the
same code, the atexit handlers run, buffered output flushed; a process with a non-daemon thread
still running waits for it (the interpreter's own exit)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _run(program: str) -> subprocess.CompletedProcess[str]:
    code = "import atexit, sys, threading, time\nfrom app.process_exit import exit_now\n" + program
    return subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )


def test_the_code_the_atexit_handlers_and_the_buffered_output_are_kept() -> None:
    done = _run(
        "atexit.register(print, 'handler ran')\n"
        "sys.stdout.write('buffered, no newline; ')\n"
        "sys.stderr.write('to stderr')\n"
        "exit_now(3)\n"
    )
    assert done.returncode == 3
    assert done.stdout == "buffered, no newline; handler ran\n"
    assert done.stderr == "to stderr"


def test_a_running_non_daemon_thread_is_waited_for() -> None:
    done = _run(
        "def late():\n"
        "    time.sleep(0.3)\n"
        "    print('thread finished', flush=True)\n"
        "threading.Thread(target=late).start()\n"
        "exit_now(4)\n"
    )
    assert (done.returncode, done.stdout) == (4, "thread finished\n")
