"""`POST /v1/chat/completions` read into what it asks of us, or refused naming the parameter.
Pure.

parameter              taken as
---------------------  -------------------------------------------------------------------
model                  the conversation's model
messages               the whole conversation (`history.py` places it)
tools                  `function` tools: the client executes them (`tool_calls` come back);
                       `mcp` tools (this server's extension, as on /v1/responses): a
                       worker's MCP server by `server_label`, run inside the turn
tool_choice            auto | none | required | {"type": "function", "function": {"name"}}
response_format        text | json_object | json_schema (`name`, `schema`, `strict`): the
                       turn's output schema, its answer checked against it
stream                 chunks as server-sent events, then `data: [DONE]`
stream_options         `include_usage`: a last chunk with the usage
n                      1 (one choice)
metadata               the turn's (at most 16 strings)
store, user, ...       see IGNORED: accepted, without effect (every turn is stored)
temperature, ...       see SAMPLING: accepted, not applied (the conversation's model runs
                       with its provider's defaults), said in the docs
logprobs, audio, ...   see UNSUPPORTED: refused unless the default
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.api.chat.history import ChatHistory, read_history
from app.api.responses.errors import Unsupported
from app.api.responses.params import read_flag, read_metadata, read_model, screen
from app.api.responses.requests import JSON_OBJECT
from app.api.responses.tools_given import McpTool, read_tools
from app.client.schemas import check_output_schema
from app.client.tool_choice import read_tool_choice
from app.errors import InvalidRequest

KNOWN = frozenset(
    {
        "model",
        "messages",
        "tools",
        "tool_choice",
        "response_format",
        "stream",
        "stream_options",
        "n",
        "metadata",
    }
)
IGNORED = frozenset(
    {
        "store",
        "user",
        "safety_identifier",
        "prompt_cache_key",
        "service_tier",
        "parallel_tool_calls",
    }
)
SAMPLING = frozenset(
    {
        "temperature",
        "top_p",
        "max_tokens",
        "max_completion_tokens",
        "seed",
        "stop",
        "presence_penalty",
        "frequency_penalty",
        "reasoning_effort",
        "verbosity",
    }
)
#: Refused with a clear 400 when given a value that is not the default.
UNSUPPORTED: dict[str, Any] = {
    "logprobs": False,
    "top_logprobs": None,
    "logit_bias": None,
    "audio": None,
    "modalities": None,
    "prediction": None,
    "web_search_options": None,
    "functions": None,
    "function_call": None,
}


@dataclass(frozen=True)
class ChatRequest:
    model: str
    history: ChatHistory
    client_tools: tuple[dict[str, Any], ...] = ()
    mcp: tuple[McpTool, ...] = ()
    tool_choice: Any = "auto"  # as given (app/client/tool_choice.py reads it)
    output_schema: dict[str, Any] | None = None
    stream: bool = False
    include_usage: bool = False
    metadata: dict[str, str] | None = None

    def setup(self) -> dict[str, Any]:
        """What a conversation is set up with, as the history's digests name it."""
        return {
            "model": self.model,
            "instructions": self.history.instructions,
            "functions": sorted(
                (tool["name"], tool["description"], tool["parameters"])
                for tool in self.client_tools
            ),
            "mcp": sorted(repr(server) for server in self.mcp),
            "tool_choice": self.tool_choice,
        }


def parse_chat(given_body: Any) -> ChatRequest:
    body = screen(given_body, KNOWN | IGNORED | SAMPLING, UNSUPPORTED)
    model = read_model(body)
    if body.get("n") not in (None, 1):
        raise Unsupported("n must be 1: this server gives one choice", param="n")
    client_tools, mcp = read_tools(_tools(body.get("tools")))
    choice = body.get("tool_choice")
    if not mcp:  # (a server's tools are known once its catalogue is read: create.py checks)
        read_tool_choice(choice, [str(tool["name"]) for tool in client_tools])
    stream = read_flag(body, "stream")
    return ChatRequest(
        model=model,
        history=read_history(body.get("messages")),
        client_tools=client_tools,
        mcp=mcp,
        tool_choice="auto" if choice is None else choice,
        output_schema=_response_format(body.get("response_format")),
        stream=stream,
        include_usage=_include_usage(body.get("stream_options"), stream),
        metadata=read_metadata(body.get("metadata")),
    )


def _tools(value: Any) -> Any:
    """Chat's function tools (`{"type": "function", "function": {...}}`) in the Responses
    shape `read_tools` takes; other entries as they are."""
    if not isinstance(value, list):
        return value
    shaped = []
    for index, tool in enumerate(value):
        if isinstance(tool, dict) and tool.get("type") == "function":
            function = tool.get("function")
            if not isinstance(function, dict):
                raise Unsupported(
                    f'tools[{index}] must be {{"type": "function", "function": {{"name", '
                    '"description", "parameters"}}',
                    param=f"tools[{index}]",
                )
            shaped.append({"type": "function", **function})
        else:
            shaped.append(tool)
    return shaped


def _response_format(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return JSON_OBJECT
    if kind != "json_schema":
        raise Unsupported(
            "response_format.type must be text, json_object or json_schema",
            param="response_format",
        )
    given = value.get("json_schema")
    try:
        return check_output_schema(given, "response_format.json_schema")
    except InvalidRequest as exc:
        raise Unsupported(str(exc), param="response_format") from None


def _include_usage(value: Any, stream: bool) -> bool:
    if value is None:
        return False
    if not stream:
        raise Unsupported("stream_options is only taken with stream: true", param="stream_options")
    if not isinstance(value, dict) or set(value) - {"include_usage", "include_obfuscation"}:
        raise Unsupported(
            "stream_options takes include_usage (and include_obfuscation, ignored)",
            param="stream_options",
        )
    usage = value.get("include_usage", False)
    if not isinstance(usage, bool):
        raise Unsupported(
            "stream_options.include_usage must be true or false", param="stream_options"
        )
    return usage


__all__ = ["ChatRequest", "parse_chat"]
