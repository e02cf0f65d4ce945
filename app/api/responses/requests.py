"""`POST /v1/responses` read into what it asks of us, or refused naming the parameter. Pure.

parameter              taken as
---------------------  -------------------------------------------------------------------
model                  the conversation's model (a new conversation's; an existing one's
                       must be the same)
input                  a string, or items: `message` (role user; text, `input_text`,
                       `input_image` / `input_file` parts holding their bytes as data: URLs:
                       the message's files), `function_call_output`, `mcp_approval_response`;
                       or the whole history, items this server returned included (stateless,
                       as agent frameworks send it: history.py), system and developer
                       messages of a new conversation being its instructions; a history
                       written elsewhere is copied into a new conversation
instructions           a new conversation's instructions (an existing one's: the same)
previous_response_id   continue that response's conversation: answers continue its turn,
                       a message starts the next turn; naming an earlier response, the
                       conversation goes on from it on a new branch (the later ones stay,
                       on theirs)
conversation           our conversation id (a string, or {"id": ...})
tools                  `function` tools: the client executes them (`function_call` items);
                       `mcp` tools: a worker's MCP server by `server_label`, optionally
                       `allowed_tools`; absent: no tools, as OpenAI
tool_choice            auto | none | required, or {"type": "function", "name"} naming one of
                       the request's function tools or allowed MCP tools (checked by
                       `app/client/tool_choice.py` once the MCP tools are known): a new
                       conversation's; a later request's is checked, the conversation's
                       applies
metadata               the turn's (kept with it; at most 16 strings, as OpenAI's)
text                   `format`: `text` (the default), `json_schema` (`name`, `schema`,
                       `strict`, `description`: the turn's output schema, its answer checked
                       against it, one repair), `json_object` (any JSON object); `verbosity`
                       is ignored
user, ...              see UNSUPPORTED / IGNORED
background             answer at once with the queued response
stream                 server-sent events (the stream of the turn)
store                  true or false, shown back on the response; the turn is stored and
                       durable either way (that is what makes it resumable)
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from app.api.responses.errors import Unsupported
from app.api.responses.history import Anchor, History
from app.api.responses.ids import ResponseId
from app.api.responses.input_items import read_input
from app.api.responses.params import read_flag, read_metadata, read_model, screen
from app.api.responses.tools_given import McpTool, read_tools
from app.client.schemas import check_output_schema
from app.client.views import Decision
from app.errors import InvalidRequest

#: Accepted and without effect here (said in the docs).
IGNORED = frozenset(
    {"user", "safety_identifier", "prompt_cache_key", "service_tier", "include", "truncation"}
)
#: Refused with a clear 400 when given a value that is not the default.
UNSUPPORTED = {
    "temperature": None,
    "top_p": None,
    "max_output_tokens": None,
    "max_tool_calls": None,
    "reasoning": None,
    "prompt": None,
    "top_logprobs": None,
    "context_management": None,
    "stream_options": None,
    "parallel_tool_calls": True,
}
KNOWN = frozenset(
    {
        "model",
        "input",
        "instructions",
        "previous_response_id",
        "conversation",
        "tools",
        "tool_choice",
        "metadata",
        "text",
        "background",
        "stream",
        "store",
    }
)


@dataclass(frozen=True)
class CreateResponse:
    model: str
    text: str | None = None  # the user's message
    outputs: dict[str, str] = field(default_factory=dict)  # function_call_output by call id
    approvals: dict[str, Decision] = field(default_factory=dict)  # by call id
    instructions: str | None = None
    previous: ResponseId | None = None
    conversation: uuid.UUID | None = None
    client_tools: tuple[dict[str, Any], ...] = ()
    mcp: tuple[McpTool, ...] = ()
    tools_given: bool = False
    tool_choice: str | dict[str, Any] | None = None  # as given (None: not given, auto)
    background: bool = False
    stream: bool = False
    store: bool = True  # shown back: the turn is stored either way
    metadata: dict[str, str] | None = None  # (checked by the client: check_metadata)
    output_schema: dict[str, Any] | None = None  # `text.format` json_schema / json_object
    files: tuple[dict[str, Any], ...] = ()  # input_image / input_file parts, in order
    anchor: Anchor | None = None  # a stateless input's last item of ours (history.py)
    earlier: tuple[tuple[int, Any], ...] = ()  # a history written elsewhere, copied (history.py)

    @property
    def answers(self) -> bool:
        return bool(self.outputs or self.approvals)


def parse_create(given_body: Any) -> CreateResponse:
    body = screen(given_body, KNOWN | IGNORED, UNSUPPORTED)
    model = read_model(body)
    previous = body.get("previous_response_id")
    conversation = body.get("conversation")
    if previous is not None and conversation is not None:
        raise Unsupported(
            "previous_response_id and conversation cannot both be given", param="conversation"
        )
    given = read_input(body.get("input"), chained=previous is not None, given=conversation)
    history = given.history
    client_tools, mcp = read_tools(body.get("tools"))
    return CreateResponse(
        model=model,
        text=given.text,
        outputs=given.outputs,
        approvals=given.approvals,
        instructions=_instructions(body, history),
        anchor=None if history is None else history.anchor,
        earlier=() if history is None else history.earlier,
        previous=None if previous is None else ResponseId.parse(previous, "previous_response_id"),
        conversation=None if conversation is None else _conversation(conversation),
        client_tools=client_tools,
        mcp=mcp,
        tools_given=body.get("tools") is not None,
        tool_choice=_tool_choice(body.get("tool_choice")),
        background=read_flag(body, "background"),
        stream=read_flag(body, "stream"),
        store=read_flag(body, "store", default=True),
        metadata=read_metadata(body.get("metadata")),
        output_schema=_text_format(body.get("text")),
        files=tuple(given.files),
    )


JSON_OBJECT = {"name": "json_object", "schema": {"type": "object"}, "strict": False}


def _text_format(text: Any) -> dict[str, Any] | None:
    """`text.format` as the turn's output schema (None: plain text); refusals name it."""
    if text is None:
        return None
    if not isinstance(text, dict):
        raise Unsupported('text must be an object: {"format": {...}}', param="text")
    unknown = set(text) - {"format", "verbosity"}
    if unknown:
        raise Unsupported(f"text: unknown field(s) {', '.join(sorted(unknown))}", param="text")
    found = text.get("format")
    if found is None:
        return None
    kind = found.get("type") if isinstance(found, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return JSON_OBJECT
    if kind != "json_schema":
        raise Unsupported(
            "text.format.type must be text, json_schema or json_object", param="text.format"
        )
    schema = {name: value for name, value in found.items() if name != "type"}
    try:
        return check_output_schema(schema, "text.format")
    except InvalidRequest as exc:
        raise Unsupported(str(exc), param="text.format") from None


def _optional_text(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise Unsupported(f"{name} must be a string", param=name)
    return value


def _conversation(value: Any) -> uuid.UUID:
    if isinstance(value, dict):
        value = value.get("id")
    try:
        return uuid.UUID(str(value)) if isinstance(value, str) else _bad_conversation(value)
    except ValueError:
        return _bad_conversation(value)


def _bad_conversation(value: Any) -> uuid.UUID:
    raise Unsupported(
        f"conversation {value!r} is not a conversation id (a UUID)", param="conversation"
    )


def _tool_choice(value: Any) -> str | dict[str, Any] | None:
    """A word or an object; what it says is read against the tools (`create.py`)."""
    if value is None or isinstance(value, str | dict):
        return value
    raise Unsupported(
        'tool_choice must be auto, none, required or {"type": "function", "name": ...}',
        param="tool_choice",
    )


def _instructions(body: dict[str, Any], history: History | None) -> str | None:
    """`instructions`, then a new conversation's system and developer messages."""
    given = _optional_text(body, "instructions")
    said = None if history is None else history.instructions
    if said is None:
        return given
    return said if given is None else f"{given}\n\n{said}"
