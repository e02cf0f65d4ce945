"""chatworker: a durable, crash-recoverable LLM chat worker with MCP tools."""

__version__ = "0.1.0"
