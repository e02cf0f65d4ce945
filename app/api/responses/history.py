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
conversations). An input with no item of ours starts a new conversation, as today: its system
and developer messages are the instructions.
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


def read_history(items: list[Any]) -> History:
    """The anchor and the new items of `items` (a list of input items, already a list)."""
    anchor: Anchor | None = None
    last = -1
    for index, item in enumerate(items):
        found = _ours(item, f"input[{index}]")
        if found is not None:
            anchor, last = found, index
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
    return History(None, given, "\n\n".join(said) if said else None)


def _ours(item: Any, where: str) -> Anchor | None:
    if not isinstance(item, dict):
        return None
    kind = item.get("type", "message" if "role" in item else None)
    if kind == "item_reference":
        reference = item.get("id")
        if not isinstance(reference, str) or not reference:
            raise Unsupported(f"{where}.id must be an item id", param=where)
        return _named(reference, where)
    if kind == "message" and item.get("role") == "assistant":
        reference = item.get("id")
        if not isinstance(reference, str):
            raise Unsupported(
                f"{where} is an assistant message without an id: this server continues a "
                "conversation from the items it returned (their ids), and takes no replies "
                "written elsewhere",
                param=where,
            )
        return _named(reference, where)
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
