"""The ids of the OpenAI Responses dialect, and what they name. Pure.

A **response** is a turn, or the part of a turn after the user answered what it waited for: a
turn that pauses for a client tool's output, a question or an approval ends its response there
(`completed`, with `function_call` / `mcp_approval_request` items, as OpenAI does), and the
request that answers (`previous_response_id` + `function_call_output` /
`mcp_approval_response`) continues the same turn as the next response. So a turn's responses
are numbered by the pauses before them:

    resp_<turn id, 32 hex>        the turn from its start to its first pause (or its end)
    resp_<turn id>_<n>            the turn after its n-th pause was answered

Items are named by what they show: `msg_<turn>_<message seq>` (a reply's text, or the user's
message), `fc_<call id>` (a call the client answers), `mcp_<call id>` (a call a worker ran),
`mcpr_<call id>` (an approval asked; its id is what `mcp_approval_response` names), `fco_` and
`mcpa_` for the answers.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from app.api.responses.errors import Unsupported

RESPONSE = "resp_"
APPROVAL_REQUEST = "mcpr_"
_RESPONSE_ID = re.compile(r"resp_([0-9a-f]{32})(?:_([1-9][0-9]{0,5}))?")


class UnknownResponse(Unsupported):
    """A response id that is not one of ours (malformed)."""


@dataclass(frozen=True)
class ResponseId:
    turn_id: uuid.UUID
    segment: int = 0  # how many of the turn's pauses were answered before it

    def __str__(self) -> str:
        base = f"{RESPONSE}{self.turn_id.hex}"
        return base if self.segment == 0 else f"{base}_{self.segment}"

    @classmethod
    def parse(cls, text: str, param: str = "response_id") -> ResponseId:
        found = _RESPONSE_ID.fullmatch(text) if isinstance(text, str) else None
        if found is None:
            raise UnknownResponse(
                f"{param} {text!r} is not a response id (resp_ and 32 hex digits)", param=param
            )
        return cls(uuid.UUID(found.group(1)), int(found.group(2) or 0))


def message_item(turn_id: uuid.UUID, seq: int) -> str:
    return f"msg_{turn_id.hex}_{seq}"


def function_call_item(call_id: str) -> str:
    return f"fc_{call_id}"


_MESSAGE_ITEM = re.compile(r"msg_([0-9a-f]{32})_([0-9]{1,9})")
#: The output items that show a call, by the prefix of their id (`*_item` above).
_CALL_ITEMS = ("fc_", "mcp_", APPROVAL_REQUEST)


def message_of_item(item_id: str) -> tuple[uuid.UUID, int] | None:
    """The turn and message seq a `message_item` id names (None: not one)."""
    found = _MESSAGE_ITEM.fullmatch(item_id)
    return None if found is None else (uuid.UUID(found.group(1)), int(found.group(2)))


def call_of_item(item_id: str) -> str | None:
    """The call id a call's output item id names (`function_call`, `mcp_call`,
    `mcp_approval_request`; None: not one)."""
    for prefix in _CALL_ITEMS:
        if item_id.startswith(prefix) and len(item_id) > len(prefix):
            return item_id[len(prefix) :]
    return None


def call_items(call_id: str) -> set[str]:
    """The ids of every output item that can show call `call_id`."""
    return {f"{prefix}{call_id}" for prefix in _CALL_ITEMS}


def function_output_item(call_id: str) -> str:
    return f"fco_{call_id}"


def mcp_call_item(call_id: str) -> str:
    return f"mcp_{call_id}"


def approval_request_item(call_id: str) -> str:
    return f"{APPROVAL_REQUEST}{call_id}"


def approval_response_item(call_id: str) -> str:
    return f"mcpa_{call_id}"


def call_of_approval_request(item_id: object) -> str:
    """The call id an `mcp_approval_response` answers, from the request's item id."""
    if not isinstance(item_id, str) or not item_id.startswith(APPROVAL_REQUEST):
        raise Unsupported(
            f"approval_request_id {item_id!r} names no approval request (mcpr_...)",
            param="input",
        )
    return item_id[len(APPROVAL_REQUEST) :]
