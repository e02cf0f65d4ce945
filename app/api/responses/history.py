"""A stateless request's input read against what this server returned: the last item of ours it
holds (the anchor), and the new items after it. Pure.

OpenAI's Responses API is used two ways. Chained: `previous_response_id`, and the input holds only
what is new. Stateless: the input holds the whole history every time (the client's messages, the
items the responses returned, the client's answers), which is what every agent framework's tool
loop sends by default. Our items carry ids that say where they come from, and a client sends them
back as it got them, or as `item_reference`s to them:

    item in the input                                 read as
    ------------------------------------------------  --------------------------------------------
    an assistant `message` with id msg_<turn>_<seq>   ours: that turn's reply
    an assistant `message` with no id of ours         written elsewhere: the history is copied
    `function_call` (id fc_<call id>, or only its     ours: a call of a response, found by its
    call_id), `mcp_call`, `mcp_approval_request`      call id among the caller's turns that wait
    `item_reference` to any of the above              the same
    `reasoning`, `mcp_list_tools`                     kept by the client, carried by no turn here:
                                                      passed over
    a user/system/developer `message`,                the client's: new after the last item of
    `function_call_output`, `mcp_approval_response`   ours; before it, what we already hold

So a stateless request is the chained request it stands for: the response that holds the anchor
is its `previous_response_id`, and the items after the anchor are its input. Items before the
anchor are what that conversation already holds; they are not compared with it (the anchor is
looked up among the caller's own turns only, so a history can only continue the caller's own
conversations). An input with no item of ours starts a new conversation: its system and
developer messages are the instructions.

A history written elsewhere (an assistant message without an id of ours, with no item of ours
after it) is copied: the items before its last user messages (`earlier`: user and assistant
messages, `function_call` and `function_call_output` pairs) become the start of a new
conversation's path (`imported` makes them its messages), and the user messages its first turn.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from app.api.responses.errors import Unsupported
from app.api.responses.ids import RESPONSE, call_of_item, message_of_item

#: Items a response returns (ours when sent back), and those passed over wherever they are.
OUTPUT_KINDS = frozenset({"function_call", "mcp_call", "mcp_approval_request"})
PASSED_OVER = frozenset({"reasoning", "mcp_list_tools"})
INSTRUCTION_ROLES = frozenset({"system", "developer"})


@dataclass(frozen=True)
class Anchor:
    """The last item of ours: a reply (`turn_id` and `seq`) or a call (`call_id`)."""

    where: str  # e.g. "input[3]", for errors
    turn_id: uuid.UUID | None = None
    seq: int | None = None
    call_id: str | None = None


@dataclass(frozen=True)
class History:
    anchor: Anchor | None
    new: list[tuple[int, Any]]  # the items after the anchor (all without one), by index
    instructions: str | None = None  # a new conversation's system/developer messages
    earlier: tuple[tuple[int, Any], ...] = ()  # a history written elsewhere, to be copied


def read_history(items: list[Any]) -> History:
    """The anchor and the new items of `items` (a list of input items, already a list)."""
    anchor: Anchor | None = None
    last = -1
    for index, item in enumerate(items):
        found = _ours(item, f"input[{index}]")
        if found is not None:
            anchor, last = found, index
    if any(_written_elsewhere(item) for item in items[last + 1 :]):
        anchor, last = None, -1  # (all of it is the client's: copied)
    rest = [
        (index, item)
        for index, item in enumerate(items)
        if index > last and not (isinstance(item, dict) and item.get("type") in PASSED_OVER)
    ]
    if anchor is not None:
        return History(anchor, rest)
    instructions = [_instruction(item, f"input[{index}]") for index, item in rest]
    given = [
        (index, item)
        for (index, item), said in zip(rest, instructions, strict=True)
        if said is None
    ]
    said = [text for text in instructions if text is not None]
    start = len(given)
    while start > 0 and _is_user_message(given[start - 1][1]):
        start -= 1
    earlier = tuple(given[:start]) if any(_written_elsewhere(i) for _, i in given) else ()
    new = given[start:] if earlier else given
    if earlier and not new:
        where = f"input[{earlier[-1][0]}]"
        raise Unsupported(
            f"{where}: a history written elsewhere must end with a user message (it is copied "
            "into a new conversation, whose first turn that message is)",
            param=where,
        )
    return History(None, new, "\n\n".join(said) if said else None, earlier)


def imported(earlier: tuple[tuple[int, Any], ...]) -> list[dict[str, Any]]:
    """A history written elsewhere as messages (`import_history`'s): user and assistant
    messages' text, each `function_call` a call of the assistant message it follows (or of a
    new one), each `function_call_output` a tool message."""
    rows: list[dict[str, Any]] = []
    for index, item in earlier:
        where = f"input[{index}]"
        kind = item.get("type", "message") if isinstance(item, dict) else None
        if kind == "message" and item.get("role") in ("user", "assistant"):
            rows.append({"role": item["role"], "content": _text_of(item, where)})
        elif kind == "function_call":
            call = {
                "id": item.get("call_id"),
                "name": item.get("name"),
                "arguments": item.get("arguments", ""),
            }
            if not rows or rows[-1]["role"] != "assistant" or rows[-1].get("answered"):
                rows.append({"role": "assistant", "content": "", "tool_calls": []})
            rows[-1].setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output" and isinstance(item.get("output"), str):
            if rows and rows[-1]["role"] == "assistant":
                rows[-1]["answered"] = True
            rows.append(
                {"role": "tool", "tool_call_id": item.get("call_id"), "content": item["output"]}
            )
        else:
            raise Unsupported(
                f"{where} ({kind}) cannot be copied: a history written elsewhere holds user and "
                "assistant messages, function_call and function_call_output items (text outputs)",
                param=where,
            )
    return [{key: value for key, value in row.items() if key != "answered"} for row in rows]


def _written_elsewhere(item: Any) -> bool:
    """An assistant message without an id of ours (none, or another provider's): a reply this
    server did not give."""
    if not (
        isinstance(item, dict)
        and item.get("type", "message") == "message"
        and item.get("role") == "assistant"
    ):
        return False
    reference = item.get("id")
    return not isinstance(reference, str) or message_of_item(reference) is None


def _is_user_message(item: Any) -> bool:
    return (
        isinstance(item, dict)
        and item.get("type", "message") == "message"
        and item.get("role") == "user"
    )


def _text_of(item: dict[str, Any], where: str) -> str:
    """A copied message's text (`input_text` / `output_text` parts, or a string); its files are
    not taken (send them with the new message)."""
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(part, dict)
        and part.get("type") in ("input_text", "output_text")
        and isinstance(part.get("text"), str)
        for part in content
    ):
        return "".join(part["text"] for part in content)
    raise Unsupported(
        f"{where}.content: a copied message takes text only (input_text, output_text): send "
        "files with the new message",
        param=where,
    )


def _ours(item: Any, where: str) -> Anchor | None:
    if not isinstance(item, dict):
        return None
    kind = item.get("type", "message" if "role" in item else None)
    if kind == "item_reference":
        reference = item.get("id")
        if not isinstance(reference, str) or not reference:
            raise Unsupported(f"{where}.id must be an item id", param=where)
        return _named(reference, where)
    if kind == "message" and item.get("role") == "assistant" and not _written_elsewhere(item):
        return _named(item["id"], where)
    if kind in OUTPUT_KINDS:
        call_id = item.get("call_id") if kind == "function_call" else None
        if isinstance(call_id, str) and call_id:
            return Anchor(where, call_id=call_id)
        reference = item.get("id")
        if not isinstance(reference, str):
            raise Unsupported(f"{where} ({kind}) needs its id or call_id", param=where)
        return _named(reference, where)
    return None


def _named(reference: str, where: str) -> Anchor:
    """The anchor an item id of ours names; any other id is refused, naming it."""
    message = message_of_item(reference)
    if message is not None:
        return Anchor(where, turn_id=message[0], seq=message[1])
    call_id = call_of_item(reference)
    if call_id is not None:
        return Anchor(where, call_id=call_id)
    if reference.startswith(RESPONSE):
        raise Unsupported(
            f"{where} names a response ({reference}): give it as previous_response_id",
            param=where,
        )
    raise Unsupported(
        f"{where} names item {reference!r}, which this server did not return", param=where
    )


def _instruction(item: Any, where: str) -> str | None:
    """A system or developer message's text (None for any other item)."""
    if not isinstance(item, dict) or item.get("role") not in INSTRUCTION_ROLES:
        return None
    if item.get("type", "message") != "message":
        return None
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(part, dict)
        and part.get("type") == "input_text"
        and isinstance(part.get("text"), str)
        for part in content
    ):
        return "".join(part["text"] for part in content)
    raise Unsupported(f"{where}.content must be a string or input_text parts", param=where)
