"""`python -I -S launcher.py -m MODULE ARGS...`: `python -m MODULE ARGS...`, forked warm by the
test runner's zygote (`app/testing/zygote_process.py`) when `CHATWORKER_TEST_ZYGOTE_SOCKET`
names its socket, else exec'd as a new interpreter.

For a process that a test does not start itself (the MCP test server, which a worker spawns
through the MCP SDK), so it costs milliseconds instead of seconds of imports. Standard library
only, so that `-I -S` starts it fast. It passes its stdin, stdout and stderr to the zygote, which
forks the program onto them with exactly this environment (less the socket's entry) and working
directory, and it stays the program's stand-in for whoever spawned it: the signals it gets
(TERM, INT, HUP) go to the program, it exits as the program exited (the same code, or killed by
the same signal), and when it is killed itself the zygote sees its connection drop and kills the
program at once. When whoever spawned it dies (a worker SIGKILLed by a crash test), the kernel
sends it a SIGTERM (`PR_SET_PDEATHSIG`), which it forwards: the program does not wait to read
the end of its input on a loaded machine, and no orphan outlives the test.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
from typing import Any, BinaryIO

SOCKET_ENV = "CHATWORKER_TEST_ZYGOTE_SOCKET"
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _line(reader: BinaryIO) -> dict[str, Any] | None:
    """The zygote's next message, a JSON line; None when it hung up. (Buffered: its two
    messages, the pid and the exit code, may come in one read when a program exits at once.)"""
    received = reader.readline()
    if not received.endswith(b"\n"):
        return None
    message: dict[str, Any] = json.loads(received)
    return message


def _term_when_parent_dies(parent: int) -> None:
    """SIGTERM to this process when its parent dies (Linux); at once if it already has."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)


def _exec(argv: list[str]) -> None:
    os.execv(sys.executable, argv)


def main(args: list[str]) -> None:
    parent = os.getppid()
    argv = [sys.executable, *args]
    path = os.environ.pop(SOCKET_ENV, "")
    if args[:1] != ["-m"] or not path:
        _exec(argv)
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    reader = connection.makefile("rb")
    try:
        connection.connect(path)
        request = {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}
        socket.send_fds(connection, [(json.dumps(request) + "\n").encode()], [0, 1, 2])
        answer = _line(reader)
    except OSError:
        answer = None
    if answer is None or not isinstance(answer.get("pid"), int):
        connection.close()
        _exec(argv)  # the zygote is gone or refused: a new interpreter, as without it
        return
    pid: int = answer["pid"]
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # the program's alone now: its end of a pipe closes when it exits
        os.dup2(null, fd)

    def forward(received: int, _: object) -> None:
        with contextlib.suppress(ProcessLookupError):  # (it has exited: its code is on its way)
            os.kill(pid, received)

    for sig in FORWARDED:
        signal.signal(sig, forward)
    _term_when_parent_dies(parent)
    try:
        exited = _line(reader)
    except OSError:
        exited = None
    if exited is None:  # the zygote died (it outlives every test): take the program down with it
        os.kill(pid, signal.SIGKILL)
        raise SystemExit(1)
    code: int = exited["code"]
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    raise SystemExit(code)


if __name__ == "__main__":
    main(sys.argv[1:])
