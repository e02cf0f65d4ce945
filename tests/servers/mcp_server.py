"""The MCP test server (mcp 2.x `MCPServer`, stdio): the demo's tools (`app.demo.mcp_server`) plus
a tool with a side effect, deliberately faulty ones (raise, hang, exit, huge output) and `slow`,
which records in the ledger when the client cancels it (`notifications/cancelled`).

Tests spawn it through `stdio_params()`; every call can be recorded in a JSON-lines ledger.
"""

from __future__ import annotations

import base64
import functools
import inspect
import json
import os
import sys
import tempfile
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import anyio
from mcp.client.stdio import StdioServerParameters
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

from app.demo.mcp_server import register_tools
from app.testing.zygote import launched

SERVER_NAME = "chatworker-test-tools"
SERVER_MODULE = "tests.servers.mcp_server"
SERVER_FILE = Path(__file__).resolve()
REPO_ROOT = SERVER_FILE.parents[2]
LEDGER_ENV = "MCP_LEDGER_PATH"
NOTES_ENV = "MCP_NOTES_PATH"
# Comma-separated opt-in tools (e.g. "emit_invalid_utf8"), registered only when named here, so
# suites that pin the default tool set stay exact.
EXTRA_TOOLS_ENV = "MCP_EXTRA_TOOLS"
DEFAULT_NOTES_FILE = "chatworker-mcp-notes.txt"

F = TypeVar("F", bound=Callable[..., Any])
# The fault tools change nothing (the ledger is the test's, not a side effect the model asked
# for): after a worker's crash they may simply run again. `write_note` says nothing: it may not.
READ_ONLY = ToolAnnotations(read_only_hint=True)

server: MCPServer = MCPServer(SERVER_NAME, log_level="WARNING")


# --- ledger -------------------------------------------------------------------------------------


def _append_ledger(tool: str, arguments: Mapping[str, Any]) -> None:
    path = os.environ.get(LEDGER_ENV)
    if not path:
        return
    entry = {
        "tool": tool,
        "arguments": dict(arguments),
        "pid": os.getpid(),
        "time": datetime.now(UTC).isoformat(),
    }
    line = (json.dumps(entry, default=str) + "\n").encode()
    # Unbuffered O_APPEND: the whole line goes out in one write(), so concurrent writers and a
    # kill right after the call can never leave half a line; fsync makes it survive os._exit.
    with open(path, "ab", buffering=0) as ledger:
        ledger.write(line)
        os.fsync(ledger.fileno())


def read_ledger(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Return the ledger entries written so far (an empty list if nothing was recorded)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _arguments(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """A call's arguments as the client sent them: without an injected `Context`."""
    return {key: value for key, value in kwargs.items() if not isinstance(value, Context)}


def _with_ledger(fn: F) -> F:
    """Wrap a tool so the call is recorded before the tool body runs (even if it then dies)."""
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_wrapper(**kwargs: Any) -> Any:
            _append_ledger(fn.__name__, _arguments(kwargs))
            return await fn(**kwargs)

        return async_wrapper  # type: ignore[return-value]

    @functools.wraps(fn)
    def wrapper(**kwargs: Any) -> Any:
        _append_ledger(fn.__name__, _arguments(kwargs))
        return fn(**kwargs)

    return wrapper  # type: ignore[return-value]


def tool(
    *, structured_output: bool | None = None, annotations: ToolAnnotations | None = None
) -> Callable[[F], F]:
    """Register a function as a ledgered tool; its docstring is the tool description."""

    def register(fn: F) -> F:
        server.tool(structured_output=structured_output, annotations=annotations)(_with_ledger(fn))
        return fn

    return register


# The demo's tools first (search_docs, calculate, add, current_time), each through the ledger.
register_tools(server, wrap=_with_ledger)


# --- notes ---------------------------------------------------------------------------------------


def _notes_file() -> Path:
    """Where `write_note` appends: $MCP_NOTES_PATH, else a file in the system temp dir."""
    configured = os.environ.get(NOTES_ENV)
    return Path(configured) if configured else Path(tempfile.gettempdir()) / DEFAULT_NOTES_FILE


@tool()
def write_note(
    text: Annotated[str, Field(min_length=1, description="The note to save (one line).")],
) -> str:
    """Save a short note by appending it to the notes file (a side effect: every call adds a
    note). Returns a confirmation of what was saved."""
    line = " ".join(text.split())
    with _notes_file().open("a", encoding="utf-8") as notes:
        notes.write(line + "\n")
    # The same answer however many notes exist, so a call re-run after a crash (see the crash
    # matrix) reads the same; the notes file and the ledger still count every real write.
    return f"Note saved: {line}"


@tool(annotations=READ_ONLY)
def env_keys() -> list[str]:
    """Return the sorted names (never the values) of the server process's environment variables."""
    return sorted(os.environ)


# --- fault injection ----------------------------------------------------------------------------


@tool(annotations=READ_ONLY)
def fail(message: str = "boom") -> str:
    """Always fail with the given message, as an anticipated tool error (is_error result)."""
    raise ToolError(message)


@tool(annotations=READ_ONLY)
def raise_unexpected() -> str:
    """Always crash with an unexpected RuntimeError (a bug in the tool, not a planned error)."""
    raise RuntimeError("unexpected failure inside raise_unexpected")


@tool(annotations=READ_ONLY)
async def hang(
    seconds: Annotated[float, Field(ge=0, description="How long to sleep.")] = 3600,
) -> str:
    """Sleep for the given number of seconds without blocking the server, then return."""
    await anyio.sleep(seconds)
    return f"Slept {seconds} seconds."


@tool(structured_output=False, annotations=READ_ONLY)
def exit_process(code: int = 1) -> NoReturn:
    """Terminate the server process immediately with the given exit code (simulates a crash)."""
    os._exit(code)


def huge_text(size: int) -> str:
    """The deterministic text `huge_output(size)` returns, for exact comparison in tests."""
    block = "".join(f"{i:05d}abcdefghijklmnopqrstuvwxyz\n" for i in range(100))
    repeats = size // len(block) + 1
    return (block * repeats)[:size]


@tool(structured_output=False, annotations=READ_ONLY)  # a structured copy would double the payload
def huge_output(
    size: Annotated[int, Field(ge=0, le=50_000_000, description="Exact length in characters.")] = (
        1_000_000
    ),
) -> str:
    """Return a deterministic text of exactly `size` characters (for large-payload tests)."""
    return huge_text(size)


# --- cancellation -------------------------------------------------------------------------------


@tool(annotations=READ_ONLY)
async def slow(
    seconds: Annotated[float, Field(ge=0, description="How long to work.")] = 30,
    label: Annotated[str, Field(description="Tells concurrent calls apart.")] = "",
) -> str:
    """Work (sleep) for the given number of seconds, then return; a call the client cancels
    stops at once and is recorded as `slow:cancelled` in the ledger."""
    # The ledger's "slow" line (written by the wrapper before this body runs) marks the start.
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        # The server cancels the handler when the client sends `notifications/cancelled`.
        _append_ledger("slow:cancelled", {"seconds": seconds, "label": label})
        raise
    return f"Worked {seconds:g} seconds{f' ({label})' if label else ''}."


# --- opt-in tools (see EXTRA_TOOLS_ENV) ---------------------------------------------------------

INVALID_UTF8_LINE = (
    b'{"jsonrpc":"2.0","method":"notifications/message",'
    b'"params":{"level":"info","logger":"emit_invalid_utf8","data":"bad \xff\xfe bytes"}}\n'
)


def _wire_fd() -> int:
    """The descriptor the stdio transport writes its frames to.

    While it serves, mcp's `stdio_server()` points fd 1 at stderr (so stray prints miss the wire)
    and writes through a private duplicate it records in its claim; without a claim it serves the
    process's fd 1 in place.
    """
    from mcp.server import stdio

    claim = stdio._claims.get(1)
    if claim is not None and claim.private_fd is not None:
        return claim.private_fd
    return 1


async def emit_invalid_utf8() -> str:
    """Write one line of bytes that are not UTF-8 (a JSON-RPC log notification holding
    b"\\xff\\xfe") to the transport's stdout, then return "ok"."""
    # One write() of a whole line shorter than PIPE_BUF is atomic on a pipe, and it happens before
    # this call's own response is queued. The SDK flushes each frame as it sends it, so nothing of
    # ours lands inside a frame unless another response is being written at this very moment.
    line = INVALID_UTF8_LINE
    assert len(line) < 512
    os.write(_wire_fd(), line)
    return "ok"


async def echo_meta(ctx: Context) -> dict[str, Any]:
    """Return the `_meta` of this `tools/call` request, as the server received it."""
    return dict(ctx.request_context.meta or {})


IDEMPOTENCY_META_KEY = "chatworker/idempotency_key"  # app.worker.mcp.provider.META_IDEMPOTENCY_KEY


def applied_path() -> Path:
    """Where `apply_once` records what it applied: beside the notes file."""
    return _notes_file().with_suffix(".applied")


def read_applied(path: str | os.PathLike[str]) -> list[tuple[str, str]]:
    """(idempotency key, text) of every side effect `apply_once` applied."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    return [(key, text) for key, _, text in (line.partition("\t") for line in lines)]


async def apply_once(text: str, ctx: Context) -> str:
    """Apply a side effect (append `text` to a file) once per idempotency key: the key the
    client sends in the request's `_meta`. A call run again with the same key (its worker died
    before the result was committed) finds it applied and answers the same; a call without a
    key is applied every time."""
    key = str((ctx.request_context.meta or {}).get(IDEMPOTENCY_META_KEY) or "")
    path = applied_path()
    if not key or key not in {done for done, _ in read_applied(path)}:
        with open(path, "ab", buffering=0) as applied:
            applied.write(f"{key or '-'}\t{' '.join(text.split())}\n".encode())
            os.fsync(applied.fileno())
    return f"Applied: {text}"


def erase_notes() -> str:
    """Erase every saved note (destructive, and says so: its calls need the user's approval
    under the default policy)."""
    _notes_file().write_text("", encoding="utf-8")
    return "All notes erased."


CHART_PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000002000000020800000000577ea4a0000000"
    "0e49444154789c636060606060600000000c0004f2f8a5a10000000049454e44ae426082"
)
REPORT_PDF = b"%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"


def render_chart(label: str = "sales") -> list[Any]:
    """Render a chart of `label` as a PNG image, with its report as a PDF and a link to its
    data (what server-everything's image tools return: content blocks beside the text)."""
    from mcp.server.mcpserver.utilities.types import Image
    from mcp.types import BlobResourceContents, EmbeddedResource, ResourceLink

    report = BlobResourceContents(
        uri=f"report://{label}/report.pdf",
        mime_type="application/pdf",
        blob=base64.b64encode(REPORT_PDF).decode(),
    )
    return [
        f"The {label} chart, its report and its data.",
        Image(data=CHART_PNG, format="png"),
        EmbeddedResource(type="resource", resource=report),
        ResourceLink(type="resource_link", uri=f"data://{label}.csv", name=f"{label}.csv"),
    ]


_OPT_IN_TOOLS: dict[str, Callable[..., Any]] = {
    "render_chart": render_chart,
    "emit_invalid_utf8": emit_invalid_utf8,
    "echo_meta": echo_meta,
    "apply_once": apply_once,
    "erase_notes": erase_notes,
}
_ANNOTATIONS = {
    "erase_notes": ToolAnnotations(destructive_hint=True, idempotent_hint=True),
    "apply_once": ToolAnnotations(idempotent_hint=True),  # keyed on the call's idempotency key
    "echo_meta": READ_ONLY,
    "emit_invalid_utf8": READ_ONLY,
    "render_chart": READ_ONLY,
}


def _register_opt_in_tools(names: str) -> None:
    for name in filter(None, (part.strip() for part in names.split(","))):
        if name not in _OPT_IN_TOOLS:
            raise SystemExit(f"{EXTRA_TOOLS_ENV}: unknown tool {name!r}")
        # (content blocks are the result: no structured copy of them)
        structured = False if name == "render_chart" else None
        tool(structured_output=structured, annotations=_ANNOTATIONS.get(name))(_OPT_IN_TOOLS[name])


_register_opt_in_tools(os.environ.get(EXTRA_TOOLS_ENV, ""))


# --- spawning -----------------------------------------------------------------------------------


def stdio_params(
    ledger_path: str | os.PathLike[str] | None = None,
    notes_path: str | os.PathLike[str] | None = None,
    extra_env: Mapping[str, str] | None = None,
    *,
    as_file: bool = False,
) -> StdioServerParameters:
    """Parameters that spawn this server over stdio with a minimal environment (forked warm by
    the test runner's zygote when tests use it: `app/testing/launcher.py`).

    `as_file=True` runs the file by path instead of `python -m`, as a deployment might.
    """
    env = {"PATH": os.environ.get("PATH", os.defpath)}
    if ledger_path is not None:
        env[LEDGER_ENV] = os.fspath(ledger_path)
    if notes_path is not None:
        env[NOTES_ENV] = os.fspath(notes_path)
    env.update(extra_env or {})
    # `-m` from the repo root puts the root on sys.path, so no PYTHONPATH is needed; the file form
    # imports only installed packages.
    command = (
        [sys.executable, str(SERVER_FILE)] if as_file else [sys.executable, "-m", SERVER_MODULE]
    )
    command, launcher_env = launched(command)
    env.update(launcher_env)
    return StdioServerParameters(command=command[0], args=command[1:], env=env, cwd=str(REPO_ROOT))


def main() -> None:
    server.run()


if __name__ == "__main__":
    main()
