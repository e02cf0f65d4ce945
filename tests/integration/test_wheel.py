"""The built wheel carries everything `chatworker demo` needs (the demo model, its MCP server and
documents, the migrations): installed into a fresh virtual environment and run from a directory
with no source tree beside it, the demo takes a turn with a tool to idle."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# The uv that `scripts/dev setup` installs next to this interpreter (pip when there is none).
UV = shutil.which("uv", path=str(Path(sys.executable).parent))


def run(
    command: list[str], cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
    return result


def build_wheel(out: Path) -> Path:
    if UV:
        run([UV, "build", "--wheel", "--out-dir", str(out), str(REPO)])
    else:
        run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(out), str(REPO)])
    [wheel] = out.glob("chatworker-*.whl")
    return wheel


def fresh_venv(path: Path, wheel: Path) -> Path:
    """A new virtual environment (from the base interpreter, not this one) with the wheel."""
    base = getattr(sys, "_base_executable", sys.executable)
    python = path / "bin" / "python"
    if UV:
        run([UV, "venv", "--quiet", "--python", base, str(path)])
        run([UV, "pip", "install", "--quiet", "--python", str(python), str(wheel)])
    else:
        run([base, "-m", "venv", str(path)])
        run([str(python), "-m", "pip", "install", "--quiet", str(wheel)])
    return python


def test_the_installed_wheel_runs_the_demo_with_a_tool_to_idle(tmp_path: Path) -> None:
    python = fresh_venv(tmp_path / "venv", build_wheel(tmp_path / "dist"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"PATH": "/usr/bin:/bin", "HOME": str(elsewhere)}  # no PYTHONPATH, no settings

    where = run([str(python), "-c", "import app; print(app.__file__)"], cwd=elsewhere, env=env)
    assert where.stdout.startswith(str(tmp_path / "venv")), where.stdout  # not this checkout

    demo = run([str(python.parent / "chatworker"), "demo"], cwd=elsewhere, env=env)
    out = demo.stdout
    assert "model demo/offline; tools search_docs, calculate, current_time" in out
    assert "assistant -> search_docs(" in out
    assert "tool search_docs: 1. northwind-refund-policy.md" in out
    assert out.rstrip().endswith("[idle]")
    assert (elsewhere / "chatworker.db").exists()
