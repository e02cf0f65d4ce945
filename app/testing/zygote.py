"""A warm start for test processes: one process per test runner imports the heavy libraries once
(litellm alone costs ~8 s of CPU, a worker boot ~13 s in all) and forks a child for each
`python -m MODULE ...` a test starts, so a suite that boots a hundred real workers does not spend
most of its CPU importing the same modules a hundred times.

A child is a real process, as `subprocess.Popen` would start it: its own session (a group
leader, so `killpg` reaches it and its children), the environment, working directory, argument
list and log file asked for, the module run as `__main__` and the process's exit code its own.
What it does not redo is the interpreter's start and the imports of `PRELOAD`; the project's own
modules (`app.*`) are imported fresh in the child, after its environment is set. A child that
`os.execv`s `python -m OTHER` (as `chatworker worker` does) runs OTHER in place the same way.

Only libraries that read no setting of ours at import are preloaded (not dramatiq: its worker
module reads `dramatiq_worker_timeout`; not prometheus_client: it reads
`PROMETHEUS_MULTIPROC_DIR`); an environment that sets a `LITELLM_` variable other than the
zygote's own is refused, and the caller then starts a plain process.

Tests turn it on with `CHATWORKER_TEST_ZYGOTE=1` (`tests/conftest.py`); the benchmark's real runs
never use it. Protocol, one JSON object per line: the caller writes
`{"argv": [...], "env": {...}, "cwd": ..., "log": ...}`, the zygote answers `{"pid": N}` (or
`{"error": ...}`) and later `{"exited": N, "code": C}` for every child.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import runpy
import select
import signal
import subprocess
import sys
import threading
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

ENABLE_ENV = "CHATWORKER_TEST_ZYGOTE"
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


def _become(request: dict[str, Any]) -> NoReturn:
    """In the forked child: become the process the caller asked for."""
    os.setsid()
    log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
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


def _serve(line: bytes) -> None:
    """One request: refuse it, or fork; the child never returns from here."""
    request = json.loads(line)
    reason = refusal(request["env"])
    if reason is not None:
        _send({"error": reason})
        return
    pid = os.fork()
    if pid == 0:
        try:
            _become(request)
        except SystemExit:
            raise
        except BaseException:
            traceback.print_exc()
            raise SystemExit(1) from None
    _send({"pid": pid})


def _reap() -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _send({"exited": pid, "code": os.waitstatus_to_exitcode(status)})


def main() -> None:
    for name, value in FIXED_ENV.items():
        os.environ[name] = value
    for module in PRELOAD:
        __import__(module)
    _pristine.append(_Pristine.now())
    _send({"ready": os.getpid()})
    pending = b""
    while True:
        readable, _, _ = select.select([0], [], [], 0.05)
        if readable:
            chunk = os.read(0, 65536)
            if not chunk:
                return  # the caller is gone; its children are its tests' to stop
            pending += chunk
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                _serve(line)
        _reap()


if __name__ == "__main__":
    main()


# --- the caller's side -----------------------------------------------------------------------


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
            [sys.executable, "-m", "app.testing.zygote"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env={**os.environ, **FIXED_ENV},
        )
        self._reader = threading.Thread(target=self._read, name="zygote-reader", daemon=True)
        self._reader.start()
        self._answer(timeout=300)  # {"ready": pid}

    @classmethod
    def shared(cls) -> Zygote | None:
        """This process's zygote when `CHATWORKER_TEST_ZYGOTE` is set (None: start plainly)."""
        if os.environ.get(ENABLE_ENV) != "1":
            return None
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
