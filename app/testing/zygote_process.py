"""The zygote itself (`python -m app.testing.zygote_process`, started by `app/testing/zygote.py`):
it imports `PRELOAD` once, then forks a child for each request, on its stdin from the test runner
or on its Unix socket from a launcher or a process it forked, and reports each child's exit.

A child is a real process, as `subprocess.Popen` would start it: its own session (a group
leader, so `killpg` reaches it and its children), the environment, working directory, argument
list and log file asked for, the module run as `__main__` and the process's exit code its own.
What it does not redo is the interpreter's start and the imports of `PRELOAD`; the project's own
modules (`app.*`) are imported fresh in the child, after its environment is set. A child that
`os.execv`s `python -m OTHER` (as `chatworker worker` does) runs OTHER in place the same way.

Only libraries that read no setting of ours at import are preloaded (not dramatiq: its worker
module reads `dramatiq_worker_timeout`; not prometheus_client: it reads
`PROMETHEUS_MULTIPROC_DIR`); an environment that sets a `LITELLM_` variable other than the
zygote's own is refused, and the caller then starts a plain process. A launcher's child lives
exactly as long as its launcher's connection (the zygote kills it the moment it drops).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import runpy
import select
import signal
import socket
import sys
import threading
import traceback
from dataclasses import dataclass
from typing import Any, NoReturn

from app.process_exit import exit_now


def socket_of(zygote_pid: int) -> str:
    """Where the zygote with this pid listens: a process it forked finds it from its parent pid
    alone, with nothing added to its environment."""
    return f"/tmp/chatworker-zygote-{zygote_pid}.sock"


PRELOAD = (
    "litellm",
    "sqlalchemy",
    "psycopg",
    "pydantic",
    "pydantic_settings",
    "httpx",
    "anyio",
    "tenacity",
    "redis",
    "mcp.client.stdio",
    "mcp.client.session",
    "fastapi",
    "uvicorn",
)
# The environment the preloaded modules were imported under; a child asking for another value of
# one of these (or for any other LITELLM_ variable) is refused.
FIXED_ENV = {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}


def refusal(env: dict[str, str]) -> str | None:
    """Why a child with this environment cannot be forked from the zygote (None: it can)."""
    for name, value in env.items():
        if name.startswith("LITELLM_") and FIXED_ENV.get(name) != value:
            return f"{name} is read when litellm is imported"
    return None


def _run_module_in_place(module: str, args: list[str]) -> NoReturn:
    """What `exec python -m MODULE ARGS` does, without a new interpreter."""
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    raise SystemExit(0)


@dataclass(frozen=True)
class _Pristine:
    """What a new interpreter would hold after importing `PRELOAD`: restored by an in-place exec,
    so nothing the first program set up (its modules, logging, signal handlers) leaks into the
    next one, as with a real exec."""

    modules: frozenset[str]
    loggers: dict[str, tuple[int, list[logging.Handler], bool, bool]]
    signals: dict[int, Any]

    @classmethod
    def now(cls) -> _Pristine:
        loggers = {
            name: (logger.level, list(logger.handlers), logger.propagate, logger.disabled)
            for name, logger in [
                ("", logging.getLogger()),
                *logging.Logger.manager.loggerDict.items(),
            ]
            if isinstance(logger, logging.Logger)
        }
        signals = {int(sig): signal.getsignal(sig) for sig in signal.valid_signals()}
        return cls(frozenset(sys.modules), loggers, signals)

    def restore(self) -> None:
        for name in [name for name in sys.modules if name not in self.modules]:
            del sys.modules[name]
        manager = logging.Logger.manager
        for name in [name for name in manager.loggerDict if name not in self.loggers]:
            del manager.loggerDict[name]
        for name, (level, handlers, propagate, disabled) in self.loggers.items():
            logger = logging.getLogger(name or None)
            logger.setLevel(level)
            logger.handlers[:] = handlers
            logger.propagate, logger.disabled = propagate, disabled  # (setLevel cleared caches)
        for sig, handler in self.signals.items():
            if handler is not None and signal.getsignal(sig) is not handler:
                signal.signal(sig, handler)


_pristine: list[_Pristine] = []  # the zygote's, once its imports are done
_real_execv = os.execv


def _execv_in_place(path: Any, argv: Any) -> NoReturn:
    argv = list(argv)
    alone = threading.active_count() == 1  # a real exec would end the others
    if path == sys.executable and len(argv) >= 3 and argv[1] == "-m" and alone and _pristine:
        sys.stdout.flush()
        sys.stderr.flush()
        _pristine[0].restore()
        _run_module_in_place(argv[2], argv[3:])
    _real_execv(path, argv)


def _become(request: dict[str, Any], stdio: tuple[int, int, int] | None = None) -> NoReturn:
    """In the forked child: become the process the caller asked for, on the launcher's `stdio`
    descriptors or else with no input and its output appended to `request["log"]`."""
    os.setsid()
    if stdio is None:
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        stdio = (os.open(os.devnull, os.O_RDONLY), log, log)
    for target, fd in enumerate(stdio):
        os.dup2(fd, target)
    os.closerange(3, 1024)
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False, buffering=1)  # noqa: SIM115
    sys.stderr = open(2, "w", encoding="utf-8", closefd=False, buffering=1)  # noqa: SIM115
    env: dict[str, str] = request["env"]
    os.environ.clear()
    os.environ.update(env)
    cwd = request.get("cwd") or os.getcwd()
    os.chdir(cwd)
    # `python -m` puts the working directory first, then PYTHONPATH's entries.
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:1] = [cwd, *extra]
    os.execv = _execv_in_place
    argv: list[str] = request["argv"]
    if len(argv) < 3 or argv[1] != "-m":
        raise SystemExit(f"the zygote runs `python -m MODULE ...` only, not {argv!r}")
    _run_module_in_place(argv[2], argv[3:])


def _send(message: dict[str, Any]) -> None:
    os.write(1, (json.dumps(message) + "\n").encode())


def _fork(request: dict[str, Any], stdio: tuple[int, int, int] | None = None) -> int | str:
    """The pid of a child become what `request` asks for, or why it cannot be forked."""
    reason = refusal(request["env"])
    if reason is not None:
        return reason
    pid = os.fork()
    if pid == 0:
        try:
            _become(request, stdio)
        except SystemExit as stop:
            code = stop.code
        except BaseException:
            traceback.print_exc()
            code = 1
        # Without the teardown of the zygote's heap, which a new interpreter would not have
        # either (~2 s of CPU for litellm's objects alone).
        exit_now(_exit_status(code))
    return pid


def _exit_status(code: object) -> int:
    """The status `sys.exit(code)` gives: None is 0, a message is printed and gives 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _serve(line: bytes) -> None:
    """One request of the caller: refuse it, or fork; the child never returns from here."""
    forked = _fork(json.loads(line))
    _send({"error": forked} if isinstance(forked, str) else {"pid": forked})


class _Launches:
    """The children launchers asked for, each with its launcher's connection."""

    def __init__(self, path: str) -> None:
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a zygote's that had this pid before
        self.listener.bind(path)
        self.listener.listen(128)
        self.connections: dict[int, socket.socket] = {}  # child pid -> its launcher
        # launchers whose request is not whole yet: what came of it, and its descriptors
        self.requests: dict[socket.socket, tuple[bytes, list[int]]] = {}

    def watched(self) -> list[socket.socket]:
        return [self.listener, *self.requests, *self.connections.values()]

    def accept(self) -> None:
        """A launcher connected: its request is read when it arrives, never waited for here (a
        launcher slow to send, on a loaded machine, must not stall every other child)."""
        connection, _ = self.listener.accept()
        connection.setblocking(False)
        self.requests[connection] = (b"", [])

    def receive(self, connection: socket.socket) -> None:
        """Part or all of a launcher's request (its line, its three descriptors); a whole one is
        answered with a fork."""
        received, fds = self.requests[connection]
        try:
            chunk, more, _, _ = socket.recv_fds(connection, 65536, 3)
        except BlockingIOError:
            return
        except OSError:
            chunk, more = b"", []
        received, fds = received + chunk, fds + more
        if chunk and not received.endswith(b"\n"):
            self.requests[connection] = (received, fds)
            return
        del self.requests[connection]
        try:
            if len(fds) != 3:
                raise ConnectionError(f"{len(fds)} descriptors, not stdin, stdout and stderr")
            request: dict[str, Any] = json.loads(received)
        except (OSError, ValueError) as error:
            for fd in fds:
                os.close(fd)
            self._answer(connection, {"error": str(error)}, last=True)
            return
        forked = _fork(request, (fds[0], fds[1], fds[2]))  # (the child never returns)
        for fd in fds:
            os.close(fd)
        if isinstance(forked, str):
            self._answer(connection, {"error": forked}, last=True)
            return
        self._answer(connection, {"pid": forked}, last=False)
        self.connections[forked] = connection

    @staticmethod
    def _answer(connection: socket.socket, message: dict[str, Any], *, last: bool) -> None:
        connection.setblocking(True)  # (a line of a few bytes: the buffer takes it at once)
        with contextlib.suppress(OSError):
            connection.sendall((json.dumps(message) + "\n").encode())
        if last:
            connection.close()

    def dropped(self, connection: socket.socket) -> None:
        """A launcher never writes after its request: readable means it is gone, and so must its
        child be."""
        for pid, known in list(self.connections.items()):
            if known is connection:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)  # (a session leader: its children too)
                connection.close()
                del self.connections[pid]

    def exited(self, pid: int, code: int) -> bool:
        connection = self.connections.pop(pid, None)
        if connection is None:
            return False
        self._answer(connection, {"exited": pid, "code": code}, last=True)
        return True


def _reap(launches: _Launches) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        code = os.waitstatus_to_exitcode(status)
        if not launches.exited(pid, code):
            _send({"exited": pid, "code": code})


def main() -> None:
    for name, value in FIXED_ENV.items():
        os.environ[name] = value
    for module in PRELOAD:
        __import__(module)
    _pristine.append(_Pristine.now())
    launches = _Launches(socket_of(os.getpid()))
    _send({"ready": os.getpid()})
    pending = b""
    while True:
        watched: list[Any] = [0, *launches.watched()]
        readable, _, _ = select.select(watched, [], [], 0.05)
        for ready in readable:
            if ready is launches.listener:
                launches.accept()
            elif ready in launches.requests:
                launches.receive(ready)
            elif isinstance(ready, socket.socket):
                launches.dropped(ready)
        if 0 in readable:
            chunk = os.read(0, 65536)
            if not chunk:  # the caller is gone; its children are its tests' to stop
                with contextlib.suppress(OSError):
                    os.unlink(launches.listener.getsockname())
                return
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                _serve(line)
        _reap(launches)


if __name__ == "__main__":
    main()
