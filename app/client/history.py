"""A history written elsewhere, checked before it becomes a conversation's path
(`import_history`): a valid transcript for every provider, storable. Pure.

Every message is `user`, `assistant` or `tool`; an assistant's `tool_calls` (`id`, `name`,
`arguments`, the ids unique in the conversation as the transcript's ledger needs them) are
answered, each once, by the tool messages right after it; every text is storable (at most the
message limit). `InvalidMessage` names the message (`history[i]`) and what is wrong.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from app.client.checks import check_text
from app.errors import InvalidMessage

ROLES = ("user", "assistant", "tool")
MAX_ID_CHARS = 200  # (messages.tool_call_id, tool_name)


def check_history(history: Sequence[Mapping[str, Any]], limit: int) -> list[dict[str, Any]]:
    """The rows of `history`'s messages (role, content, tool_calls, tool_call_id, tool_name)."""
    if not isinstance(history, Sequence) or not history:
        raise InvalidMessage("history must be a non-empty list of messages")
    rows: list[dict[str, Any]] = []
    open_calls: dict[str, str] = {}  # call id -> tool name, of the last assistant message
    seen: set[str] = set()
    for index, message in enumerate(history):
        where = f"history[{index}]"
        if not isinstance(message, Mapping) or message.get("role") not in ROLES:
            raise InvalidMessage(f"{where}.role must be one of {', '.join(ROLES)}")
        role, content = message["role"], message.get("content") or ""
        check_text(content, f"{where}.content", limit, allow_empty=role != "user")
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in open_calls:
                raise InvalidMessage(
                    f"{where}: tool_call_id {call_id!r} answers no open call of the assistant "
                    "message before it"
                )
            rows.append(
                {
                    "role": role,
                    "content": content,
                    "tool_call_id": call_id,
                    "tool_name": open_calls.pop(call_id),
                }
            )
            continue
        if open_calls:
            raise InvalidMessage(f"{where}: the calls {', '.join(open_calls)} are not answered")
        calls = _calls(message.get("tool_calls") if role == "assistant" else None, where, seen)
        open_calls = {call["id"]: call["name"] for call in calls}
        rows.append({"role": role, "content": content, "tool_calls": calls or None})
    if open_calls:
        raise InvalidMessage(f"history ends with the calls {', '.join(open_calls)} unanswered")
    return rows


def _calls(value: Any, where: str, seen: set[str]) -> list[dict[str, str]]:
    if value is None:
        return []
    if not isinstance(value, Sequence):
        raise InvalidMessage(f"{where}.tool_calls must be a list")
    calls = []
    for index, call in enumerate(value):
        at = f"{where}.tool_calls[{index}]"
        fields = [call.get(name) if isinstance(call, Mapping) else None for name in ("id", "name")]
        arguments = call.get("arguments", "") if isinstance(call, Mapping) else None
        if not all(isinstance(f, str) and 0 < len(f) <= MAX_ID_CHARS for f in fields):
            raise InvalidMessage(f"{at} needs an id and a name (1 to {MAX_ID_CHARS} characters)")
        if not isinstance(arguments, str):
            raise InvalidMessage(f"{at}.arguments must be a string")
        call_id, name = str(fields[0]), str(fields[1])
        if call_id in seen:
            raise InvalidMessage(f"{at}: call id {call_id!r} is used twice in the history")
        seen.add(call_id)
        calls.append({"id": call_id, "name": name, "arguments": arguments})
    return calls


__all__ = ["check_history"]
