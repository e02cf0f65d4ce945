"""Real worker processes for tests: `app.testing.worker_process`, pointed at the MCP test server
(with its side-effect ledger) and at this checkout."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from app.testing import worker_process
from app.testing.worker_process import FAKE_KEY, FAKE_MODEL, READY_LINE
from app.testing.zygote import launched

REPO = Path(__file__).resolve().parent.parent


def mcp_servers_json(ledger: Path, notes: Path, extra_tools: str = "", *, warm: bool = True) -> str:
    """The MCP test server as the worker's one server; `extra_tools` names opt-in tools. `warm`:
    forked by the test runner's zygote when tests use it (`app/testing/launcher.py`); a test that
    reads the server's process from /proc asks for a new interpreter."""
    env = {"MCP_LEDGER_PATH": str(ledger), "MCP_NOTES_PATH": str(notes)}
    if extra_tools:
        env["MCP_EXTRA_TOOLS"] = extra_tools
    command = [sys.executable, "-m", "tests.servers.mcp_server"]
    if warm:
        command, launcher_env = launched(command)
        env.update(launcher_env)
    return json.dumps(
        {
            "mcpServers": {
                "tools": {"command": command[0], "args": command[1:], "cwd": str(REPO), "env": env}
            }
        }
    )


def worker_environment(
    database_url: str, redis_url: str, api_base: str, ledger: Path, notes: Path, **extra: str
) -> dict[str, str]:
    """The environment of a test worker: the MCP test server, this checkout on PYTHONPATH.
    `MCP_EXTRA_TOOLS` in `extra` names the server's opt-in tools (not a variable of the
    worker's: the server is given it)."""
    servers = mcp_servers_json(ledger, notes, extra.pop("MCP_EXTRA_TOOLS", ""))
    # The suite's webhook receivers listen on loopback (refused by default: `app/egress.py`).
    loopback = {"CHATWORKER_WEBHOOK_ALLOWED_NETWORKS": "127.0.0.0/8,::1/128"}
    return worker_process.worker_environment(
        database_url,
        redis_url,
        api_base,
        servers,
        **{"PYTHONPATH": str(REPO), **loopback, **extra},
    )


class WorkerProcess(worker_process.WorkerProcess):
    """A worker process started from this checkout."""

    def __init__(
        self, env: dict[str, str], log_path: Path, threads: int = 2, processes: int = 1
    ) -> None:
        super().__init__(env, log_path, threads, cwd=REPO, processes=processes)


__all__ = ["FAKE_KEY", "FAKE_MODEL", "READY_LINE", "REPO", "WorkerProcess", "worker_environment"]
