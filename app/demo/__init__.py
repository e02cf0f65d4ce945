"""The built-in demo, shipped in the package so `chatworker demo` works from an installed wheel: an
offline model (`model`), an MCP server with documents, arithmetic and the time (`mcp_server`), and
the command that runs one turn end to end on the embedded defaults (`run`)."""
