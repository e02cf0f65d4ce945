"""The zygote the suite starts its worker and API processes from (`app/testing/zygote.py`): each
child is a real process with its own session, exactly the environment, directory and arguments
asked for, its own exit code, reachable by `killpg`; an exec of `python -m` inside it starts
clean (no module, logging or signal handler of the first program left over); an environment the
preloaded modules would have read differently is started as a new interpreter instead. A process
someone else spawns (the MCP test server) goes through `app/testing/launcher.py`: forked warm on
the launcher's stdio, with the launcher as its faithful stand-in (exit code, signals, death)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.testing.zygote import LAUNCHER, SOCKET_ENV, Zygote, ZygoteChild, launched, start_process

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


def _launch(argv: list[str], cwd: Path) -> subprocess.Popen[str]:
    """As the MCP SDK spawns a server: pipes for stdio, a session of its own."""
    command, extra = launched(argv)
    assert command[:4] == [sys.executable, "-I", "-S", str(LAUNCHER)]
    return subprocess.Popen(
        command, env={**_env(), **extra}, cwd=cwd, text=True, start_new_session=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip


def _gone(pid: int, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return not Path(f"/proc/{pid}").exists()


def test_a_launched_child_runs_warm_on_the_launchers_stdio_and_exits_with_its_code(
    tmp_path: Path,
) -> None:
    launcher = _launch([*PROBE, "report", "5"], tmp_path)
    out, _ = launcher.communicate(timeout=60)
    assert launcher.returncode == 5
    found = json.loads(out)
    assert found["pid"] != launcher.pid  # forked by the zygote, not exec'd
    cold = subprocess.run(
        [*PROBE, "report", "5"], env=_env(), cwd=tmp_path, capture_output=True, text=True
    )
    # the launcher's, less the socket's entry: what a new interpreter sees (Python's own
    # LC_CTYPE coercion included)
    assert found["env"] == json.loads(cold.stdout)["env"]
    assert found["cwd"] == str(tmp_path)
    assert found["argv"] == ["report", "5"]
    assert (found["litellm_imported"], found["app_config_imported"]) == (True, False)
    echo = _launch([*PROBE, "echo"], tmp_path)
    assert echo.communicate("a line\n", timeout=60) == ("a line\n", None)  # stdin too
    assert echo.returncode == 0


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_launched_child_dies_with_its_launcher_and_gets_its_signals(
    tmp_path: Path, sig: int
) -> None:
    """SIGTERM (how the MCP SDK stops a server) is forwarded, and the launcher dies of it too;
    SIGKILL cannot be: the zygote sees the launcher's connection drop and kills the child."""
    launcher = _launch([*PROBE, "sleep"], tmp_path)
    assert launcher.stdout is not None
    word, pid = launcher.stdout.readline().split()
    assert word == "sleeping" and int(pid) != launcher.pid
    os.kill(launcher.pid, sig)
    assert launcher.wait(timeout=30) == -sig
    assert _gone(int(pid)), f"the launched child {pid} outlived its launcher"
    assert launcher.stdout.read() == ""  # and its end of the pipe is closed


def test_a_launched_child_is_stopped_when_the_launchers_parent_dies(tmp_path: Path) -> None:
    """As when a crash test SIGKILLs the worker that spawned the MCP server: the kernel tells
    the launcher (PR_SET_PDEATHSIG), which stops the program, though its input stays open."""
    command, extra = launched([*PROBE, "sleep"])
    spawner = (
        "import subprocess, sys; child = subprocess.Popen(sys.argv[1:]); "
        "print('launcher', child.pid, flush=True); child.wait()"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", spawner, *command], env={**_env(), **extra}, cwd=tmp_path,
        text=True, start_new_session=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    assert parent.stdout is not None
    word, launcher = parent.stdout.readline().split()
    assert word == "launcher"
    word, pid = parent.stdout.readline().split()
    assert word == "sleeping"
    parent.kill()
    parent.wait(timeout=30)
    assert _gone(int(launcher)), f"the launcher {launcher} outlived its parent"
    assert _gone(int(pid)), f"the launched child {pid} outlived its launcher's parent"


def test_a_launcher_without_the_zygote_execs_a_new_interpreter(tmp_path: Path) -> None:
    command = [sys.executable, "-I", "-S", str(LAUNCHER), "-m", "tests.servers.zygote_probe"]
    env = {key: value for key, value in _env().items() if key != SOCKET_ENV}
    out = subprocess.run(
        [*command, "report", "0"], env=env, cwd=REPO, capture_output=True, text=True, timeout=60
    ).stdout
    found = json.loads(out)
    assert found["litellm_imported"] is False
    assert found["argv"] == ["report", "0"]


def test_a_child_that_starts_a_process_gets_it_from_the_same_zygote(tmp_path: Path) -> None:
    """A benchmark a test starts starts workers in turn: they come warm from the zygote that
    forked it (asked over its socket), not from a second zygote of its own."""
    log, inner = tmp_path / "probe.log", tmp_path / "inner.log"
    env = _env(CHATWORKER_TEST_ZYGOTE="1")  # (as the suite's environment has it)
    child = start_process([*PROBE, "spawn", str(inner)], env, tmp_path, log)
    assert child.wait(timeout=60) == 0, log.read_text()
    spawned = json.loads(log.read_text().splitlines()[-1])
    assert (spawned["code"], spawned["remote"]) == (9, True)
    found = _report(inner)
    assert found["ppid"] == spawned["zygote"]  # a sibling of the process that asked for it
    assert found["litellm_imported"] is True
    assert found["env"] == env
