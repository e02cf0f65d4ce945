"""A warm start for test processes: one process per test runner imports the heavy libraries once
(litellm alone costs ~8 s of CPU, a worker boot ~13 s in all) and forks a child for each
`python -m MODULE ...` a test starts, so a suite that boots a hundred real workers does not spend
most of its CPU importing the same modules a hundred times.

This module is the caller's side: a handle on the zygote (`Zygote`, or `RemoteZygote` for the
one that forked this process) and on each child (`ZygoteChild`: `subprocess.Popen`'s interface),
`start_process` and `launched`. The zygote itself, what it preloads and how it forks, is
`app/testing/zygote_process.py`.

A process the tests do not start themselves (the MCP test server, spawned by a worker through
the MCP SDK) is asked for by `app/testing/launcher.py`, a stdlib-only program that starts in
milliseconds: it passes its stdin, stdout and stderr to the zygote over the zygote's Unix socket,
and the forked child uses them as its own. The launcher stays as the child's stand-in: it
forwards the signals it gets, exits with the child's exit code, and the zygote kills the child
the moment the launcher's connection drops (the launcher was killed), so the child lives exactly
as long as the process its spawner knows.

The socket is `/tmp/chatworker-zygote-PID.sock`, so a child finds the zygote that forked it from
its parent pid alone: a child that starts processes itself (a benchmark a test runs) asks for them
there (`RemoteZygote`) instead of starting a second zygote.

Tests turn it on with `CHATWORKER_TEST_ZYGOTE=1` (`tests/conftest.py`); the benchmark's real runs
never use it. Protocol, one JSON object per line: the caller writes
`{"argv": [...], "env": {...}, "cwd": ..., "log": ...}`, the zygote answers `{"pid": N}` (or
`{"error": ...}`) and later `{"exited": N, "code": C}` for every child. A launcher sends
`{"argv": [...], "env": {...}, "cwd": ...}` with its three stdio descriptors on the socket and gets
`{"pid": N}` (or `{"error": ...}`), then `{"exited": N, "code": C}`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from app.testing.zygote_process import FIXED_ENV, socket_of

ENABLE_ENV = "CHATWORKER_TEST_ZYGOTE"
# Where a launcher finds the zygote's socket (set in the launcher's environment, never the child's).
SOCKET_ENV = "CHATWORKER_TEST_ZYGOTE_SOCKET"
LAUNCHER = Path(__file__).with_name("launcher.py")


def read_line(connection: socket.socket, received: bytes) -> dict[str, Any]:
    """The next JSON line the zygote sends on a connection (`received`: what came before)."""
    while not received.endswith(b"\n"):
        chunk = connection.recv(65536)
        if not chunk:
            raise ConnectionError("the connection closed before a whole line")
        received += chunk
    request: dict[str, Any] = json.loads(received)
    return request


class ZygoteChild:
    """A process forked by the zygote, with the part of `subprocess.Popen`'s interface the
    harness uses (`pid`, `poll`, `wait`, `send_signal`, `terminate`, `kill`, `returncode`)."""

    def __init__(self, zygote: Zygote, pid: int) -> None:
        self._zygote = zygote
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._zygote.exit_code(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        code = self._zygote.wait_exit(self.pid, timeout)
        if code is None:
            raise subprocess.TimeoutExpired(f"zygote child {self.pid}", timeout or 0)
        self.returncode = code
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Zygote:
    """The caller's handle on one zygote process (started on first use, one per process)."""

    _instance: Zygote | None = None

    def __init__(self) -> None:

        self._lock = threading.Lock()
        self._changed = threading.Condition()
        self._answers: list[dict[str, Any]] = []
        self._exits: dict[int, int] = {}
        self._process = subprocess.Popen(
            [sys.executable, "-m", "app.testing.zygote_process"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, **FIXED_ENV},
        )
        self.socket_path = socket_of(self._process.pid)
        self._reader = threading.Thread(target=self._read, name="zygote-reader", daemon=True)
        self._reader.start()
        self._answer(timeout=300)  # {"ready": pid}

    @classmethod
    def shared(cls) -> Zygote | RemoteZygote | None:
        """This process's zygote when `CHATWORKER_TEST_ZYGOTE` is set (None: start plainly): the
        one that forked this process if there is one (a benchmark or a soak a test started),
        else its own, started on first use."""
        if os.environ.get(ENABLE_ENV) != "1":
            return None
        parent = socket_of(os.getppid())
        if os.path.exists(parent):
            return RemoteZygote(parent)
        if cls._instance is None or cls._instance._process.poll() is not None:
            cls._instance = cls()
        return cls._instance

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            message = json.loads(line)
            with self._changed:
                if "exited" in message:
                    self._exits[message["exited"]] = message["code"]
                else:
                    self._answers.append(message)
                self._changed.notify_all()

    def _answer(self, timeout: float) -> dict[str, Any]:
        with self._changed:
            if not self._changed.wait_for(lambda: bool(self._answers), timeout):
                raise RuntimeError("the zygote did not answer")
            return self._answers.pop(0)

    def spawn(
        self, argv: list[str], env: dict[str, str], cwd: str | None, log: str
    ) -> ZygoteChild | None:
        """A child running `argv` (`python -m MODULE ...`), or None when the zygote refuses it."""
        if argv[:1] != [sys.executable] or argv[1:2] != ["-m"]:
            return None  # (the zygote judges the environment: `refusal`)
        request = {"argv": argv, "env": env, "cwd": cwd, "log": log}
        with self._lock:
            assert self._process.stdin is not None
            self._process.stdin.write((json.dumps(request) + "\n").encode())
            self._process.stdin.flush()
            answer = self._answer(timeout=60)
        if "pid" not in answer:
            return None
        return ZygoteChild(self, answer["pid"])

    def exit_code(self, pid: int) -> int | None:
        with self._changed:
            return self._exits.get(pid)

    def wait_exit(self, pid: int, timeout: float | None) -> int | None:
        with self._changed:
            self._changed.wait_for(lambda: pid in self._exits, timeout)
            return self._exits.get(pid)


class RemoteZygote:
    """The zygote that forked this process, asked over its socket as a launcher asks it: each
    child's stdio handed over, its exit code read from the connection, and the child killed (its
    process group) if this process dies first."""

    def __init__(self, path: str) -> None:
        self.socket_path = path

    def spawn(
        self, argv: list[str], env: dict[str, str], cwd: str | None, log: str
    ) -> RemoteChild | None:
        if argv[:1] != [sys.executable] or argv[1:2] != ["-m"]:
            return None
        request = {"argv": argv, "env": env, "cwd": cwd or os.getcwd()}
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        null = os.open(os.devnull, os.O_RDONLY)
        output = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            connection.connect(self.socket_path)
            message = (json.dumps(request) + "\n").encode()
            socket.send_fds(connection, [message], [null, output, output])
            answer = read_line(connection, b"")
        except (OSError, ValueError):
            connection.close()
            return None
        finally:
            os.close(null)
            os.close(output)
        if "pid" not in answer:
            connection.close()
            return None
        return RemoteChild(answer["pid"], connection)


class RemoteChild(ZygoteChild):
    """A child of the parent's zygote; its exit code comes on its own connection."""

    def __init__(self, pid: int, connection: socket.socket) -> None:
        self.pid = pid
        self.returncode = None
        self._connection = connection
        self._exited = threading.Event()
        self._code: int | None = None
        threading.Thread(target=self._await_exit, daemon=True, name=f"child-{pid}").start()

    def _await_exit(self) -> None:
        try:
            self._code = int(read_line(self._connection, b"")["code"])
        except (OSError, ValueError, KeyError):
            self._code = -signal.SIGKILL  # the zygote is gone, and killed it as it went
        finally:
            self._connection.close()
            self._exited.set()

    def poll(self) -> int | None:
        if self.returncode is None and self._exited.is_set():
            self.returncode = self._code
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._exited.wait(timeout):
            raise subprocess.TimeoutExpired(f"zygote child {self.pid}", timeout or 0)
        code = self.poll()
        assert code is not None
        return code


def start_process(
    command: list[str], env: dict[str, str], cwd: Path | None, log_path: Path
) -> subprocess.Popen[bytes] | ZygoteChild:
    """`command` (`python -m ...`) as its own session's leader, its output appended to
    `log_path`: forked by this process's zygote when tests turn it on, else a new interpreter."""
    log_path.touch()  # a forked child opens it a moment later
    zygote = Zygote.shared()
    where = None if cwd is None else str(cwd)
    child = None if zygote is None else zygote.spawn(command, env, where, str(log_path))
    if child is not None:
        return child
    with log_path.open("ab") as log:
        return subprocess.Popen(
            command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip


def launched(argv: list[str]) -> tuple[list[str], dict[str, str]]:
    """`python -m MODULE ...` for a process someone else spawns (the MCP test server, spawned by a
    worker): the command that asks this process's zygote for it through `launcher.py`, and the
    environment entry the launcher needs; `argv` unchanged and no entry while the zygote is off."""
    zygote = Zygote.shared()
    if zygote is None or argv[1:2] != ["-m"]:
        return argv, {}
    return [argv[0], "-I", "-S", str(LAUNCHER), *argv[1:]], {SOCKET_ENV: zygote.socket_path}
