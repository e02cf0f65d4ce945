"""The tools a turn offers and may call (rows 15-18 of `plan`'s table, and the checks of row 5
that a call names a tool offered with a JSON object), and which of them the model must call
(rows 31-32): pure, no I/O; the step loop picks the definitions of the names decided here.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

from app.worker.entry import Entry, ToolCall

ASK, ERROR = "ask", "error"  # what becomes of a call in flight at a crash (`IN_FLIGHT_RECOVERY`)
REQUIRED = "required"  # the tool choice that forces a call (of any tool, or of the one named)

CUT_OFF_RESULT = (
    "Error: your reply was cut off by the output length limit before this tool call was "
    "complete, so it was not run. Make a shorter call."
)


class Toolbox(NamedTuple):
    """The tool names a turn may call (`offered`), every name the worker has (`known`, to word a
    refusal), the check of a call's arguments against its tool's schema (`check`: None when
    they pass, else the error result; `arguments.ArgumentCheck`), and the tools the worker never
    runs because the user or their client answers them (`action_kinds`: name -> action kind)."""

    offered: frozenset[str] = frozenset()
    known: frozenset[str] = frozenset()
    check: Callable[[str, dict[str, Any]], str | None] | None = None
    action_kinds: Mapping[str, str] = MappingProxyType({})
    approval: frozenset[str] = frozenset()  # tools whose every call the user approves first
    approved: frozenset[str] = frozenset()  # call ids the user approved
    guarded: frozenset[str] = frozenset()  # tools that may not simply run again
    in_flight: str | None = None  # the call a stopped worker was running (of a guarded tool)
    in_flight_policy: str = ASK  # ask (approval) or error (the model is told)
    own: frozenset[str] = frozenset()  # the worker's own tools it answers itself (RunOwnTool)
    served: frozenset[str] = frozenset()  # the servers' tools offered (they run on their server)


NO_TOOLS = Toolbox()


def uses_tools(allowed: Collection[str], tool_choice: str) -> bool:
    """Row 15: whether the turn offers tools at all; if not, one model call answers (the simple
    path)."""
    return bool(allowed) and tool_choice != "none"


def toolbox(
    allowed: Collection[str],
    available: Iterable[str],
    check: Callable[[str, dict[str, Any]], str | None] | None = None,
    action_kinds: Mapping[str, str] | None = None,
    *,
    own: Iterable[str] = (),
    cache: Iterable[str] = (),
    session_cache: bool = True,
    reserved: Iterable[str] = (),
    approval: Iterable[str] = (),
    approved: Iterable[str] = (),
    guarded: Iterable[str] = (),
    in_flight: str | None = None,
    in_flight_policy: str = ASK,
) -> Toolbox:
    """Least privilege (rows 16-18): only the allowed tools of the servers (`available`) are
    offered, and only they run (with arguments `check` accepts), unless one of the worker's own
    takes their name (`reserved`, and `action_kinds`); the tools the user or their client
    answers (`action_kinds`) are offered too, and never run; so are the worker's `own`, which it
    answers itself, and the session cache's readers (`cache`), offered only beside a server's
    tool and while the cache is on (`session_cache`)."""
    action_kinds = MappingProxyType(dict(action_kinds or {}))
    servers = frozenset(available) - frozenset(reserved) - action_kinds.keys()
    served = servers & frozenset(allowed)
    readers = frozenset(cache) if served and session_cache else frozenset()
    runs_itself = frozenset(own) | readers
    own = runs_itself | frozenset(action_kinds)
    return Toolbox(
        offered=served | own,
        known=servers | own,
        check=check,
        action_kinds=action_kinds,
        approval=frozenset(approval),
        approved=frozenset(approved),
        guarded=frozenset(guarded),
        in_flight=in_flight,
        in_flight_policy=in_flight_policy,
        own=runs_itself,
        served=served,
    )


def tool_choice(
    choice: str, forced: str | None, offered: Collection[str], transcript: Sequence[Entry]
) -> str | dict[str, Any]:
    """Rows 31-32: the `tool_choice` of the next model call, in OpenAI's Chat Completions shape.

    A forced choice (`required`, or `forced`: the one tool named) binds the turn's first model
    call only, until a tool result follows the turn's user message; from then on the model is
    free (`auto`) to answer with what the tools returned. Forced again, it would have to call a
    tool on every call: a server's tool runs and comes back, and the turn would loop until its
    iteration limit (the OpenAI Agents SDK resets a forced choice after a tool call by default,
    `reset_tool_choice`, for the same reason). One rule for both forms, and for every tool:
    a client tool's output, or an approval's, is a tool result too. A forced tool this call
    does not offer (its server dropped it) forces nothing: `auto`."""
    if choice != REQUIRED:
        return choice
    if _answered_since_user(transcript) or (forced is not None and forced not in offered):
        return "auto"
    return REQUIRED if forced is None else {"type": "function", "function": {"name": forced}}


def _answered_since_user(transcript: Sequence[Entry]) -> bool:
    """A tool result is committed after the last user message (reads back to it only)."""
    for entry in reversed(transcript):
        if entry.role == "tool":
            return True
        if entry.role == "user":
            return False
    return False


def check_call(
    call: ToolCall, offered: Collection[str], known: Collection[str], cut_off: bool = False
) -> dict[str, Any] | str:
    """The call's arguments as a JSON object, or the error result to feed back instead.

    A tool that is not offered to this conversation never runs, even when the model names it;
    nor does a call from a reply the length limit cut off (`cut_off`), whose arguments may be
    incomplete even when they parse.
    """
    if cut_off:
        return CUT_OFF_RESULT
    if call.name not in offered:
        if call.name in known:
            return f"Tool {call.name} is not allowed in this conversation."
        return f"Unknown tool: {call.name}. Use one of the tools you were given."
    text = call.arguments.strip() or "{}"  # some models send "" for a tool without parameters
    try:
        arguments = json.loads(text)
    except (ValueError, RecursionError) as exc:  # (RecursionError: nested past the parser)
        why = "nested too deeply" if isinstance(exc, RecursionError) else f"not valid JSON ({exc})"
        return f"Invalid arguments for {call.name}: {why}. Send a JSON object."
    if not isinstance(arguments, dict):
        kind = type(arguments).__name__
        return f"Invalid arguments for {call.name}: expected a JSON object, got {kind}."
    return arguments


__all__ = [
    "ASK",
    "CUT_OFF_RESULT",
    "ERROR",
    "NO_TOOLS",
    "Toolbox",
    "check_call",
    "tool_choice",
    "toolbox",
    "uses_tools",
]
