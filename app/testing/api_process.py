"""A real API server for tests and benchmarks: `chatworker serve` in its own process (uvicorn),
with its own environment and log file; ready once `/v1/health` answers."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from app.testing.zygote import ZygoteChild, start_process


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ApiProcess:
    """`chatworker serve --host 127.0.0.1 --port PORT` with `env` (nothing else inherited but
    PATH and HOME unless `env` says so)."""

    env: dict[str, str]
    log_path: Path
    cwd: Path | None = None
    port: int = field(default_factory=free_port)
    workers: int = 1
    process: subprocess.Popen[bytes] | ZygoteChild | None = field(default=None, init=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 120) -> ApiProcess:
        command = [
            sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1",
            "--port", str(self.port), "--workers", str(self.workers),
        ]  # fmt: skip
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/tmp"),
            **self.env,
        }
        self.process = start_process(command, env, self.cwd, self.log_path)
        self.wait_until_ready(timeout)
        return self

    def wait_until_ready(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"API server exited early:\n{self.log()}")
            try:
                if httpx.get(self.url + "/v1/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"API server not ready after {timeout} s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]

    def kill(self) -> None:
        """SIGKILL the server's process group."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # (it ended since: nothing to kill)
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self, timeout: float = 15) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def __enter__(self) -> ApiProcess:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()
