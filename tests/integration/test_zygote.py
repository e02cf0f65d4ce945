"""The zygote the suite starts its worker and API processes from (`app/testing/zygote.py`): each
child is a real process with its own session, exactly the environment, directory and arguments
asked for, its own exit code, reachable by `killpg`; an exec of `python -m` inside it starts
clean (no module, logging or signal handler of the first program left over); an environment the
preloaded modules would have read differently is started as a new interpreter instead."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.testing.zygote import Zygote, ZygoteChild, start_process

REPO = Path(__file__).resolve().parents[2]
PROBE = [sys.executable, "-m", "tests.servers.zygote_probe"]


@pytest.fixture(autouse=True)
def zygote_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHATWORKER_TEST_ZYGOTE", "1")


def _env(**extra: str) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), "PROBE_MARK": "x", **extra}


def _report(log: Path) -> dict[str, object]:
    lines = [line for line in log.read_text().splitlines() if line.startswith("{")]
    assert len(lines) == 1, log.read_text()
    found: dict[str, object] = json.loads(lines[0])
    return found


def test_a_child_is_its_own_session_with_exactly_its_environment_and_exit_code(
    tmp_path: Path,
) -> None:
    log = tmp_path / "probe.log"
    child = start_process([*PROBE, "report", "3"], _env(), tmp_path, log)
    assert isinstance(child, ZygoteChild)
    assert child.wait(timeout=60) == 3
    found = _report(log)
    assert found["pid"] == child.pid
    assert found["session_leader"] is True
    assert found["env"] == _env()  # nothing inherited from the zygote or the test runner
    assert found["cwd"] == str(tmp_path)
    assert found["argv"] == ["report", "3"]
    assert found["litellm_imported"] is True  # warm: the point of it
    assert found["app_config_imported"] is False  # the project's modules: imported fresh


def test_an_exec_of_python_m_inside_a_child_starts_clean(tmp_path: Path) -> None:
    log = tmp_path / "probe.log"
    child = start_process([*PROBE, "exec", "7"], _env(), tmp_path, log)
    assert child.wait(timeout=60) == 7
    found = _report(log)
    assert found["pid"] == child.pid  # in place, as exec keeps the pid
    assert found["argv"] == ["report", "7"]
    assert found["app_config_imported"] is False
    assert found["root_handlers"] == 0
    assert found["sigusr1_default"] is True


def test_killpg_reaches_a_child_and_its_exit_is_the_signal(tmp_path: Path) -> None:
    log = tmp_path / "probe.log"
    child = start_process([*PROBE, "sleep"], _env(), tmp_path, log)
    deadline = time.monotonic() + 60
    while "sleeping" not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert child.poll() is None
    os.killpg(child.pid, signal.SIGKILL)
    assert child.wait(timeout=30) == -signal.SIGKILL
    assert child.poll() == -signal.SIGKILL


def test_an_environment_litellm_would_read_differently_gets_a_new_interpreter(
    tmp_path: Path,
) -> None:
    log = tmp_path / "probe.log"
    child = start_process([*PROBE, "report", "0"], _env(LITELLM_LOG="DEBUG"), tmp_path, log)
    assert isinstance(child, subprocess.Popen)
    assert child.wait(timeout=60) == 0
    assert _report(log)["litellm_imported"] is False


def test_without_the_setting_every_process_is_a_new_interpreter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CHATWORKER_TEST_ZYGOTE", "0")
    assert Zygote.shared() is None
    child = start_process([*PROBE, "report", "0"], _env(), tmp_path, tmp_path / "probe.log")
    assert isinstance(child, subprocess.Popen)
    assert child.wait(timeout=60) == 0
