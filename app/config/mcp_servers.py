"""MCP server entries in the ecosystem's `{"mcpServers": {...}}` format, read from JSON or a file.

`${VAR}` in `env` and `headers` is expanded from the environment; a bad entry is a ValueError.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

_SERVER_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


ApprovalPolicy = Literal["never", "always", "destructive"]


class McpServerConfig(BaseModel):
    """One `{"mcpServers": {name: {...}}}` entry: stdio (`command`) or remote (`url`)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    # Which calls the user approves first: never, always, or (the default) those of a tool whose
    # annotations say destructiveHint and not readOnlyHint. Per tool (by the server's own name)
    # in `tool_approval`, which wins over the server's.
    approval: ApprovalPolicy = "destructive"
    tool_approval: dict[str, ApprovalPolicy] = Field(default_factory=dict)

    def approval_of(self, tool: str) -> str:
        return self.tool_approval.get(tool, self.approval)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if not _SERVER_NAME.match(self.name):
            raise ValueError(f"server name {self.name!r} must match {_SERVER_NAME.pattern}")
        if (self.command is None) == (self.url is None):
            raise ValueError(f"server {self.name!r} needs exactly one of 'command' or 'url'")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"server {self.name!r}: url must start with http:// or https://")
        return self

    @property
    def is_remote(self) -> bool:
        return self.url is not None


def parse_mcp_servers(
    raw: str, environ: dict[str, str] | None = None
) -> tuple[McpServerConfig, ...]:
    """Parse inline JSON or a path to a JSON file into server configs.

    `${VAR}` in `env` and `headers` values is taken from the worker's environment, so secrets need
    not be written into the file; an undefined variable is an error, never an empty string.
    """
    text = raw.strip()
    if not text:
        return ()
    if not text.startswith("{"):
        path = Path(text).expanduser()
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"cannot read MCP servers file {str(path)!r}: {exc.strerror}") from exc
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON: {exc}") from exc
    servers = document.get("mcpServers") if isinstance(document, dict) else None
    if not isinstance(servers, dict):
        raise ValueError('expected an object of the shape {"mcpServers": {"name": {...}}}')
    environ = dict(os.environ) if environ is None else environ
    configs = []
    for name, entry in servers.items():
        if not isinstance(entry, dict):
            raise ValueError(f"server {name!r} must be an object")
        if entry.get("disabled") is True:
            continue
        fields = {**entry, "name": name}
        for key in ("env", "headers"):
            if isinstance(fields.get(key), dict):
                fields[key] = {k: _expand(str(v), environ, name) for k, v in fields[key].items()}
        configs.append(McpServerConfig.model_validate(fields))
    return tuple(configs)


def _expand(value: str, environ: dict[str, str], server: str) -> str:
    def substitute(match: re.Match[str]) -> str:
        variable = match.group(1)
        if variable not in environ:
            raise ValueError(f"server {server!r} refers to ${{{variable}}}, which is not set")
        return environ[variable]

    return _ENV_REFERENCE.sub(substitute, value)
