"""The API is a skin over the client layer: importing it (and building the app) never loads the
worker, litellm or the MCP SDK's client side."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PROBE = """
import sys
from app.api import create_app
from app.config import load_settings
create_app(load_settings(database_url="sqlite:///:memory:"))
loaded = sorted(m for m in sys.modules if m.startswith(("app.worker", "litellm", "app.demo")))
print(",".join(loaded))
"""


def test_the_api_never_imports_the_worker() -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""
