"""Real worker processes: `chatworker worker` started with an environment pointing it at a
database, Redis, an OpenAI-compatible server (the fake LLM) and MCP servers, with short leases so
recovery is quick to observe. For tests and benchmarks that kill, pause and restart workers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from app.testing.zygote import ZygoteChild, start_process

FAKE_MODEL = "openai/fake-model"
FAKE_KEY = "sk-test-worker-key-0123456789"
READY_LINE = "Worker process is ready for action"
# A boot takes 3-5 s on a quiet machine; a loaded CI machine took over 60 (only failures wait).
BOOT_TIMEOUT_S = 180.0


def worker_environment(
    database_url: str, redis_url: str, api_base: str, mcp_servers: str, **extra: str
) -> dict[str, str]:
    """A worker's whole environment (nothing inherited but PATH and HOME); `mcp_servers` is the
    `CHATWORKER_MCP_SERVERS` value, `extra` adds or overrides variables."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": os.environ.get("HOME", "/tmp"),
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "CHATWORKER_MODEL": FAKE_MODEL,
        "CHATWORKER_LLM_API_BASE": api_base,
        "CHATWORKER_LLM_API_KEY": FAKE_KEY,
        "CHATWORKER_LLM_TIMEOUT_SECONDS": "20",
        "CHATWORKER_TOOL_TIMEOUT_SECONDS": "10",
        "CHATWORKER_LEASE_TTL_SECONDS": "3",
        "CHATWORKER_HEARTBEAT_SECONDS": "1",
        "CHATWORKER_RECOVERY_INTERVAL_SECONDS": "1",
        "CHATWORKER_MCP_SERVERS": mcp_servers,
    }
    env.update(extra)
    return env


@dataclass
class WorkerProcess:
    """One `dramatiq` worker (a main process and `processes` children) with its own log file;
    ready once every child is."""

    env: dict[str, str]
    log_path: Path
    threads: int = 2
    cwd: Path | None = None
    processes: int = 1
    process: subprocess.Popen[bytes] | ZygoteChild | None = field(default=None, init=False)

    def start(self, ready: bool = True, timeout: float = BOOT_TIMEOUT_S) -> WorkerProcess:
        # `chatworker worker` execs the dramatiq CLI in place, so the pid stays the group leader.
        command = [
            sys.executable, "-m", "app.cli", "worker", "--processes", str(self.processes),
            "--threads", str(self.threads),
        ]  # fmt: skip
        # tests: forked from a warm zygote (see zygote.py); else a new interpreter
        self.process = start_process(command, self.env, self.cwd, self.log_path)
        if ready:
            self.wait_until_ready(timeout)
        return self

    def wait_until_ready(self, timeout: float = BOOT_TIMEOUT_S) -> None:
        """Ready once this process logged that it is ready (its engine has booted: tools listed
        and published). The tool catalogue alone is no proof: another worker may have filled it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"worker exited early:\n{self.log()}")
            if self.log_path.read_text(errors="replace").count(READY_LINE) >= self.processes:
                return
            time.sleep(0.05)
        raise RuntimeError(f"worker not ready after {timeout} s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]

    def pause(self) -> None:
        """SIGSTOP the whole process group (a worker frozen mid-call: a zombie to be)."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGCONT)

    def wait_exit(self, timeout: float) -> int | None:
        """Wait until the worker's main process is gone (a failpoint killed its child and
        dramatiq then stops); its exit code, or None if it is still running."""
        assert self.process is not None
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self) -> None:
        """SIGKILL the whole process group (the dramatiq main process and its children)."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # (it ended since: nothing to kill)
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def terminate(self) -> None:
        """Ask for a graceful stop without waiting: SIGTERM to the main process only, as a
        supervisor does (dramatiq forwards it to its children; a second SIGTERM sent to a child
        directly makes it exit at once, without draining)."""
        if self.process is not None and self.process.poll() is None:
            # (it may end between the poll and the signals: then there is nothing to stop)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGCONT)  # a paused worker cannot stop
                self.process.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = 30) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.terminate()
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
