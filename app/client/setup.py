"""A conversation's setup, declared once: the `Setup` a caller gives (each key optional) and
`check_setup`, which checks it as a whole and gives the columns it is stored in. A new
per-conversation option is a key here, its check below, its column (`models/conversation.py`),
and where it is read back (`store/reads.py`, `views.py`) and used.

Pure functions: each bad input raises an `InvalidRequest` subclass whose message names the problem.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, TypedDict

from app.client.checks import check_model, check_storable_json, check_text
from app.client.schemas import check_client_tools, check_output_schema
from app.client.tool_choice import read_tool_choice
from app.errors import InvalidRequest, UnknownTool


class Setup(TypedDict, total=False):
    """How a conversation is set up (`create_conversation`'s keywords; each has a default).

    `model`: a litellm model string (None: the settings'). `instructions`: the system prompt.
    `tools`: names from `list_tools()`; `tool_choice`: `auto`, `required` or `none`, or OpenAI's
    object naming the one tool the model must call (`tool_choice.py` reads both dialects'
    shapes; a forced choice binds each turn's first model call).
    `context`: the caller's own JSON, kept untouched. `client_tools`: tools the web app's client
    executes ({"name", "description", "parameters": a JSON Schema}); a call of one pauses the
    turn (`requires_action`) until the client posts its output (`answer_actions`). `clarify`:
    the model may ask the user a question (`agent_clarify`) when it has tools; the next message
    answers it. `approval_tools`: tools (of `tools`) whose every call the user approves first,
    beyond what each MCP server's own policy asks (a caller can ask for more, never less).
    `context_policy`: this conversation's own rules for what the model is sent as it grows
    (`window`, `threshold`, `reply_tokens`, `compaction`, `summary_model`, `prompt_cache`),
    over the settings'. `output_schema`: every final answer must match this JSON Schema
    (`{"name", "schema", "strict"}`; checked before the turn completes, one repair asked for); a
    message may ask for its own. `fallback_models`: the models a call moves to, in order, when
    the one in use is down or its transient errors spent their retries (None: the settings'
    `CHATWORKER_FALLBACK_MODELS`)."""

    model: str | None
    instructions: str | None
    tools: Sequence[str]
    tool_choice: str | Mapping[str, Any]
    context: dict[str, Any] | None
    client_tools: Sequence[dict[str, Any]] | None
    clarify: bool
    approval_tools: Sequence[str] | None
    context_policy: dict[str, Any] | None
    output_schema: Mapping[str, Any] | None
    fallback_models: Sequence[str] | None


#: The columns of the keys stored in other columns than their own name.
_STORED_IN = {"tools": ("allowed_tools",), "tool_choice": ("tool_choice", "forced_tool")}
#: The columns a setup is stored in, in its order (`check_setup`'s keys; a fork copies them).
SETUP_COLUMNS = tuple(
    column for key in Setup.__annotations__ for column in _STORED_IN.get(key, (key,))
)


def check_setup(given: Mapping[str, Any], default_model: str, limit: int) -> dict[str, Any]:
    """The setup checked, as its columns hold it (`tools` in `allowed_tools`); a key that is
    not `Setup`'s is a `TypeError`, as an unknown keyword is."""
    for key in given:
        if key not in Setup.__optional_keys__:
            raise TypeError(f"unexpected keyword argument {key!r} (a conversation's setup)")
    model = given.get("model")
    model = check_model(default_model if model is None else model)
    names = check_tool_names(given.get("tools", ()))
    client_tools = check_client_tools(given.get("client_tools"), names)
    choosable = [*names, *(str(tool["name"]) for tool in client_tools or ())]
    tool_choice = read_tool_choice(given.get("tool_choice", "auto"), choosable)
    approval = check_approval_tools(given.get("approval_tools"), names)
    clarify = given.get("clarify", True)
    if not isinstance(clarify, bool):
        raise InvalidRequest(f"clarify must be true or false, not {clarify!r}")
    instructions = given.get("instructions")
    if instructions is not None:
        check_text(instructions, "instructions", limit, allow_empty=True)
    context = given.get("context")
    check_context(context)
    return {
        "model": model,
        "instructions": instructions,
        "allowed_tools": names,
        **tool_choice.columns,
        "context": context,
        "client_tools": client_tools,
        "clarify": clarify,
        "approval_tools": approval,
        "context_policy": check_context_policy(given.get("context_policy")),
        "output_schema": check_output_schema(given.get("output_schema")),
        "fallback_models": check_fallback_models(given.get("fallback_models"), model),
    }


def check_tool_names(tools: Sequence[str]) -> list[str]:
    """The tool names without duplicates, in order."""
    if isinstance(tools, str) or not all(isinstance(t, str) and t for t in tools):
        raise InvalidRequest("tools must be a list of tool names")
    return list(dict.fromkeys(tools))


def check_approval_tools(approval: Any, tools: Sequence[str]) -> list[str] | None:
    """The tools whose every call the user approves first: names among `tools` (a server's
    tools of the conversation), without duplicates; None or [] for none."""
    if approval is None:
        return None
    if isinstance(approval, str) or not all(isinstance(t, str) and t for t in approval):
        raise InvalidRequest("approval_tools must be a list of tool names")
    names = list(dict.fromkeys(approval))
    unknown = [name for name in names if name not in tools]
    if unknown:
        raise InvalidRequest(
            f"approval_tools: {unknown[0]!r} is not one of the conversation's tools"
        )
    return names or None


#: A conversation's context policy: each key, its type, and its bounds (as the settings').
CONTEXT_POLICY_KEYS: dict[str, tuple[type, float | None, float | None]] = {
    "window": (int, 256, None),
    "threshold": (float, 0.1, 1.0),
    "reply_tokens": (int, 16, None),
    "compaction": (bool, None, None),
    "summary_model": (str, None, None),
    "prompt_cache": (bool, None, None),
}


def check_context_policy(policy: Any) -> dict[str, Any] | None:
    """A conversation's own context rules (`CONTEXT_POLICY_KEYS`); None or {} for none."""
    if policy is None:
        return None
    if not isinstance(policy, dict):
        raise InvalidRequest("context_policy must be an object")
    for key, value in policy.items():
        if key not in CONTEXT_POLICY_KEYS:
            known = ", ".join(CONTEXT_POLICY_KEYS)
            raise InvalidRequest(f"context_policy: unknown key {key!r}; known: {known}")
        kind, low, high = CONTEXT_POLICY_KEYS[key]
        number = kind in (int, float) and not isinstance(value, bool)
        fits = isinstance(value, int | float) if kind is float else isinstance(value, kind)
        if not fits or (kind is int and isinstance(value, bool)):
            raise InvalidRequest(f"context_policy.{key} must be a {kind.__name__}, not {value!r}")
        if number and ((low is not None and value < low) or (high is not None and value > high)):
            bounds = f"at least {low:g}" if high is None else f"from {low:g} to {high:g}"
            raise InvalidRequest(f"context_policy.{key} must be {bounds}, not {value!r}")
        if kind is str and not value.strip():
            raise InvalidRequest(f"context_policy.{key} must not be empty")
    return dict(policy) or None


def check_context(context: Any) -> None:
    """None, or a dict that serializes to JSON."""
    if context is None:
        return
    if not isinstance(context, dict):
        raise InvalidRequest("context must be a JSON object (a dict) or None")
    check_storable_json(context, "context")


def check_tools_offered(names: Sequence[str], offered: Collection[str]) -> None:
    """Every name is in the published catalogue `offered`; the error says what exists."""
    missing = [name for name in names if name not in offered]
    if not missing:
        return
    if not offered:
        raise UnknownTool(
            f"unknown tool(s): {', '.join(missing)}; no worker has published its tools yet "
            "(start one with `chatworker worker`, or run `chatworker tools --refresh`)"
        )
    raise UnknownTool(
        f"unknown tool(s): {', '.join(missing)}; available: {', '.join(sorted(offered))}"
    )


MAX_FALLBACK_MODELS = 5


def check_fallback_models(models: Any, model: str | None = None) -> list[str] | None:
    """The models a call falls back to, in order: None, or up to 5 distinct model strings (not
    the conversation's own `model`)."""
    if models is None:
        return None
    if isinstance(models, str | bytes | dict) or not isinstance(models, Sequence):
        raise InvalidRequest("fallback_models must be a list of model strings")
    if len(models) > MAX_FALLBACK_MODELS:
        raise InvalidRequest(
            f"fallback_models: at most {MAX_FALLBACK_MODELS} models, not {len(models)}"
        )
    checked = [check_model(item) for item in models]
    for name in checked:
        if checked.count(name) > 1:
            raise InvalidRequest(f"fallback_models: {name!r} is named twice")
        if name == model:
            raise InvalidRequest(f"fallback_models: {name!r} is the conversation's own model")
    return checked or None
