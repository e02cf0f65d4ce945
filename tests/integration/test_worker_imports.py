"""A worker process loads no module of the web client: what both sides need lives in the shared
rooms (`app.files`, `app.budgets`, `app.model_profile`), and `tests/boundaries.py` reads the
imports; this runs them, in a fresh interpreter, the way a worker process starts: dramatiq's
entry (`app.worker.actors`), the host built from the settings as `current_host` builds it (its
model client, litellm prepared, and its MCP tools), then every module of `app.worker`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PROBE = """
import importlib, json, pkgutil, sys
import app.worker.actors
from app.config import Settings
from app.worker.runtime import build_host

host = build_host(Settings(database_url="sqlite:///unused.db", redis_url="redis://127.0.0.1:1/0"))
import app.worker
for found in pkgutil.walk_packages(app.worker.__path__, "app.worker."):
    importlib.import_module(found.name)
client = [m for m in sys.modules if m == "app.client" or m.startswith("app.client.")]
print(json.dumps(sorted(client)))
"""


def loaded_client_modules(tmp_path: Path) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHATWORKER_")}
    env.pop("DATABASE_URL", None)
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    found: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def test_a_worker_process_imports_no_module_of_the_client(tmp_path: Path) -> None:
    assert loaded_client_modules(tmp_path) == []
