"""MCP servers as the worker's `ToolProvider`: one long-lived client per configured server, shared
by every conversation of the process, restarted on the next call after its server dies.

`provider` is the `ToolProvider`; `server_process` keeps one configured server across its
restarts, `connection` is one start of it, `names` names the tools, `results` renders what calls
return.
"""

from app.worker.mcp.connection import stdio_parameters
from app.worker.mcp.names import MAX_NAME_LENGTH, expose_tools
from app.worker.mcp.provider import McpToolProvider
from app.worker.mcp.server_process import RETRY_FIRST_S, RETRY_MAX_S

__all__ = [
    "MAX_NAME_LENGTH",
    "RETRY_FIRST_S",
    "RETRY_MAX_S",
    "McpToolProvider",
    "expose_tools",
    "stdio_parameters",
]
