"""`chatworker demo`, the README's first command, runs offline on the embedded defaults."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from app.demo.model import WORD, WORD_DELAY_S

REPO = Path(__file__).resolve().parents[2]


def test_the_demo_runs_a_turn_with_a_tool_to_idle_offline(tmp_path: Path) -> None:
    # Nothing configured: no DATABASE_URL, no REDIS_URL, no API key, no MCP servers.
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
    result = subprocess.run(
        [sys.executable, "-m", "app.cli", "demo"],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "model demo/offline" in out
    assert "assistant -> search_docs(" in out
    assert "tool search_docs: 1. northwind-refund-policy.md" in out
    assert "assistant: [demo model]" in out
    assert out.rstrip().endswith("[idle]")
    # every status change, from the event log, in order (polls used to miss tool_loop)
    statuses = [line for line in out.splitlines() if line.startswith("[")]
    assert statuses == ["[processing]", "[tool_loop]", "[idle]"]
    assert (tmp_path / "chatworker.db").exists()  # the embedded SQLite default


def test_the_demo_fails_clearly_on_a_bad_setting(tmp_path: Path) -> None:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-m", "app.cli", "demo"],
        cwd=tmp_path,
        env={**env, "CHATWORKER_MAX_ITERATIONS": "zero"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "CHATWORKER_MAX_ITERATIONS" in result.stderr


def test_the_demo_prints_the_answer_word_by_word_as_it_streams(tmp_path: Path) -> None:
    """The answer's line arrives in many pieces spread over time, not whole at its commit."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
    process = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "demo"],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert process.stdout is not None
    reads: list[tuple[float, bytes]] = []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        piece = os.read(process.stdout.fileno(), 4096)
        if not piece:
            break
        reads.append((time.monotonic(), piece))
    assert process.wait(timeout=30) == 0
    text = b"".join(piece for _, piece in reads).decode()
    start = text.index("  assistant: [demo model]")
    end = text.index("\n", start)
    offset, during = 0, []
    for moment, piece in reads:
        if offset < end and offset + len(piece) > start:
            during.append(moment)
        offset += len(piece)
    assert len(during) >= 5, f"the answer came in {len(during)} piece(s)"
    # Spread over the time the model took to say it (a word every WORD_DELAY_S; half of it, as
    # the first and the last pieces may each carry a few words): whole at its commit, ~0 s.
    words = len(WORD.findall(text[start:end].removeprefix("  assistant: [demo model]")))
    speaking = words * WORD_DELAY_S
    assert during[-1] - during[0] > speaking / 2, (during[-1] - during[0], speaking)
