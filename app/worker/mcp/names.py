"""The names tools are offered under: unique across servers and valid for every provider
(`^[a-zA-Z0-9_-]{1,64}$`), each mapped back to its server and its own name there.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from mcp.types import Tool

from app.worker.ports import ToolDefinition

MAX_NAME_LENGTH = 64
_VALID_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_INVALID_NAME_CHARS = re.compile(r"[^a-zA-Z0-9_-]")


def expose_tools(listings: Sequence[tuple[str, Sequence[Tool]]]) -> dict[str, ToolDefinition]:
    """Name every tool uniquely: a name offered by one server stays, a shared one becomes
    `<server>__<tool>`; anything outside `^[a-zA-Z0-9_-]{1,64}$` is sanitized, then de-duplicated.
    """
    owners = Counter(name for _, tools in listings for name in {tool.name for tool in tools})
    wanted = [
        (server, tool, tool.name if owners[tool.name] == 1 else f"{server}__{tool.name}")
        for server, tools in listings
        for tool in tools
    ]
    chosen: list[str | None] = [None] * len(wanted)
    taken: set[str] = set()
    # Valid names first, so a sanitized name can never take the place of one that needed nothing.
    for index, (_, _, name) in enumerate(wanted):
        if _VALID_NAME.match(name) and name not in taken:
            chosen[index] = name
            taken.add(name)
    for index, (_, _, name) in enumerate(wanted):
        if chosen[index] is None:
            chosen[index] = _unique(_sanitize(name), taken)
            taken.add(chosen[index] or "")
    catalog: dict[str, ToolDefinition] = {}
    for (server, tool, _), exposed in zip(wanted, chosen, strict=True):
        assert exposed is not None
        catalog[exposed] = ToolDefinition(
            name=exposed,
            description=tool.description or tool.title or "",
            input_schema=dict(tool.input_schema),
            server=server,
            original_name=tool.name,
            annotations=annotations_of(tool),
        )
    return catalog


def annotations_of(tool: Tool) -> dict[str, Any]:
    """The tool's annotations as the protocol names them (`readOnlyHint`, ...), the unset ones
    left out (unset is not false: the protocol's defaults are for the client to judge)."""
    if tool.annotations is None:
        return {}
    return dict(tool.annotations.model_dump(by_alias=True, exclude_none=True))


def _sanitize(name: str) -> str:
    return _INVALID_NAME_CHARS.sub("_", name)[:MAX_NAME_LENGTH] or "tool"


def _unique(name: str, taken: set[str]) -> str:
    if name not in taken:
        return name
    for number in itertools.count(2):
        suffix = f"_{number}"
        candidate = name[: MAX_NAME_LENGTH - len(suffix)] + suffix
        if candidate not in taken:
            return candidate
    raise AssertionError("unreachable")  # pragma: no cover
