"""JSON Schemas a web app passes in (a turn's output schema, the tools its client executes with
their `parameters`), checked before anything is written, each bound before the work it protects.

In order: its depth (at most `MAX_SCHEMA_DEPTH` levels of objects and arrays, walked without
recursion, before anything else reads it), its size as JSON (`MAX_SCHEMA_CHARS`), every `$ref`
pointing inside it at something there and none leading back to itself without descending into
the value (a loop the check would follow for ever), then the schema against its draft's
metaschema with `regex` meaning "RE2 runs it" (`app/patterns.py`: a `pattern` or a
`patternProperties` name RE2 cannot run, such as `a{4294967296}` or a lookahead, is refused).
Pure: each refusal raises the caller's error class with a sentence saying what and where.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import unquote

from app.client.checks import TOOL_NAME, check_storable_json
from app.errors import InvalidOutputSchema, InvalidRequest
from app.models import BUILTIN_TOOL_NAMES
from app.patterns import PatternError, schema_formats

MAX_SCHEMA_DEPTH = 64  # nested objects and arrays (the worker judges answers as deep)
MAX_SCHEMA_CHARS = 100_000
OUTPUT_SCHEMA_FIELDS = frozenset({"name", "schema", "strict", "description"})
DEFAULT_OUTPUT_NAME = "answer"
MAX_DESCRIPTION_CHARS = 4000  # a tool's, an output schema's
MAX_CLIENT_TOOLS = 64
# Keywords whose subschemas apply to the same value (a `$ref` reached through them alone, back
# to where it started, never ends); the others descend into a property or an item.
IN_PLACE = ("allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas")
_FORMATS = schema_formats()


def check_output_schema(value: Any, where: str = "output_schema") -> dict[str, Any] | None:
    """What an answer must match: None, or {"schema": a JSON Schema of an object, "name":
    1-64 letters, digits, `_` or `-` ("answer" when not given), "strict": whether the provider
    is asked to enforce it exactly (false by default), "description"}. The schema is checked
    as the module's docstring says, by the draft it names (2020-12 when none); nothing is ever
    fetched. `InvalidOutputSchema` says what is wrong and where."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidOutputSchema(
            f'{where} must be an object: {{"name": ..., "schema": {{"type": "object", ...}}}}'
        )
    unknown = set(value) - OUTPUT_SCHEMA_FIELDS
    if unknown:
        raise InvalidOutputSchema(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    name = value.get("name", DEFAULT_OUTPUT_NAME)
    if not isinstance(name, str) or not TOOL_NAME.match(name):
        raise InvalidOutputSchema(f"{where}.name must be 1-64 letters, digits, '_' or '-'")
    strict = value.get("strict", False)
    if not isinstance(strict, bool):
        raise InvalidOutputSchema(f"{where}.strict must be true or false")
    description = value.get("description")
    if description is not None and (
        not isinstance(description, str) or len(description) > MAX_DESCRIPTION_CHARS
    ):
        raise InvalidOutputSchema(
            f"{where}.description must be a string of at most {MAX_DESCRIPTION_CHARS}"
        )
    schema = value.get("schema")
    if not isinstance(schema, Mapping):
        raise InvalidOutputSchema(f"{where}.schema must be a JSON Schema (an object)")
    schema = dict(schema)
    if schema.get("type") != "object":
        raise InvalidOutputSchema(
            f'{where}.schema must describe an object ("type": "object" at its root): the '
            "providers' structured output answers with one"
        )
    check_schema(schema, f"{where}.schema", InvalidOutputSchema)
    checked: dict[str, Any] = {"name": name, "schema": schema, "strict": strict}
    if description is not None:
        checked["description"] = description
    check_storable_json(checked, where)
    return checked


def check_client_tools(tools: Any, mcp_tools: Sequence[str]) -> list[dict[str, Any]] | None:
    """Tools the client executes: None or a list of {"name", "description", "parameters"} with
    unique names (letters, digits, `_`, `-`; not a built-in's, nor one of `mcp_tools`) and a
    JSON Schema of an object for the parameters (`check_schema`)."""
    if tools is None:
        return None
    if isinstance(tools, str | bytes | dict) or not isinstance(tools, Sequence):
        raise InvalidRequest("client_tools must be a list of tools")
    if len(tools) > MAX_CLIENT_TOOLS:
        raise InvalidRequest(f"client_tools: at most {MAX_CLIENT_TOOLS} tools, not {len(tools)}")
    checked = [_client_tool(tool, f"client_tools[{index}]") for index, tool in enumerate(tools)]
    check_storable_json(checked, "client_tools")
    names = [tool["name"] for tool in checked]
    for name in names:
        if names.count(name) > 1:
            raise InvalidRequest(f"client_tools: the name {name!r} is used twice")
        if name in BUILTIN_TOOL_NAMES:
            raise InvalidRequest(f"client_tools: {name!r} is the name of a built-in tool")
        if name in mcp_tools:
            raise InvalidRequest(f"client_tools: {name!r} is also in tools (a server's tool)")
    return checked


def _client_tool(tool: Any, where: str) -> dict[str, Any]:
    if not isinstance(tool, dict):
        raise InvalidRequest(f"{where} must be an object with name, description, parameters")
    unknown = set(tool) - {"name", "description", "parameters"}
    if unknown:
        raise InvalidRequest(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    name, description = tool.get("name"), tool.get("description", "")
    if not isinstance(name, str) or not TOOL_NAME.match(name):
        raise InvalidRequest(f"{where}.name must be 1-64 letters, digits, '_' or '-'")
    if not isinstance(description, str) or len(description) > MAX_DESCRIPTION_CHARS:
        raise InvalidRequest(
            f"{where}.description must be a string of at most {MAX_DESCRIPTION_CHARS}"
        )
    parameters = tool.get("parameters", {"type": "object", "properties": {}})
    if not isinstance(parameters, dict) or parameters.get("type", "object") != "object":
        raise InvalidRequest(f"{where}.parameters must be a JSON Schema of an object")
    check_schema(parameters, f"{where}.parameters")
    return {"name": name, "description": description, "parameters": parameters}


def check_schema(
    schema: Mapping[str, Any], where: str, error: type[InvalidRequest] = InvalidRequest
) -> None:
    """`schema` is a usable JSON Schema within the bounds, or `error` says why not."""
    depth = _depth(schema)
    if depth > MAX_SCHEMA_DEPTH:
        raise error(f"{where} nests objects and arrays over {MAX_SCHEMA_DEPTH} levels deep")
    try:
        text = json.dumps(schema, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise error(f"{where} must be JSON: {exc}") from None
    if len(text) > MAX_SCHEMA_CHARS:
        raise error(f"{where} is {len(text):,} characters long, over {MAX_SCHEMA_CHARS:,}")
    problem = _ref_problem(schema)
    if problem is not None:
        raise error(f"{where}: {problem}")
    from jsonschema import validators  # only for turns and tools that declare a schema

    cls = validators.validator_for(schema, default=validators.Draft202012Validator)
    found = next(iter(cls(cls.META_SCHEMA, format_checker=_FORMATS).iter_errors(schema)), None)
    if found is not None:
        at = "/".join(str(part) for part in found.absolute_path)
        cause = found.cause
        why = str(cause) if isinstance(cause, PatternError) else found.message
        raise error(
            f"{where} is not a valid JSON Schema{f' at {at}' if at else ''}: {why[:300]}"
            + (" (patterns run in RE2: no lookarounds or backreferences)" if cause else "")
        )


def _depth(value: Any) -> int:
    """How deep `value` nests objects and arrays (past `MAX_SCHEMA_DEPTH`: one more), walked
    level by level, without recursion."""
    depth, level = 0, [value]
    while depth <= MAX_SCHEMA_DEPTH:
        containers = [item for item in level if isinstance(item, dict | list)]
        if not containers:
            break
        depth += 1
        level = [
            child
            for item in containers
            for child in (item.values() if isinstance(item, dict) else item)
        ]
    return depth


def _ref_problem(schema: Mapping[str, Any]) -> str | None:
    """Why the schema's `$ref`s cannot be followed (outside it, to nothing, in a loop); None."""
    anchors = {
        str(node[key]): node
        for node in _nodes(schema)
        for key in ("$anchor", "$dynamicAnchor")
        if isinstance(node.get(key), str)
    }
    targets: dict[int, list[dict[str, Any]]] = {}  # each node's in-place successors
    for node in _nodes(schema):
        following = [s for s in _in_place(node) if isinstance(s, dict)]
        for key in ("$ref", "$dynamicRef"):
            ref = node.get(key)
            if ref is None:
                continue
            if not isinstance(ref, str) or not ref.startswith("#"):
                return (
                    f"{key} {str(ref)[:100]!r} points outside the schema; only references "
                    "inside it (#/...) are followed, nothing is fetched"
                )
            target = _resolve(schema, ref, anchors)
            if target is None:
                return f"{key} {ref[:100]!r} points to nothing in the schema"
            if isinstance(target, dict):
                following.append(target)
        targets[id(node)] = following
    return _loop(schema, targets)


def _loop(schema: Mapping[str, Any], targets: dict[int, list[dict[str, Any]]]) -> str | None:
    """A cycle of in-place edges (`$ref`s and the `IN_PLACE` keywords), found without recursion."""
    done: set[int] = set()
    for start in _nodes(schema):
        if id(start) in done:
            continue
        path: set[int] = {id(start)}
        stack = [(start, iter(targets.get(id(start), ())))]
        while stack:
            node, following = stack[-1]
            child = next(following, None)
            if child is None:
                stack.pop()
                path.discard(id(node))
                done.add(id(node))
            elif id(child) in path:
                return (
                    "a $ref leads back to a schema it is inside of without descending into the "
                    "value (a loop no check could finish)"
                )
            elif id(child) not in done:
                path.add(id(child))
                stack.append((child, iter(targets.get(id(child), ()))))
    return None


def _in_place(node: dict[str, Any]) -> Iterator[Any]:
    for key in IN_PLACE:
        value = node.get(key)
        if isinstance(value, list):
            yield from value
        elif key == "dependentSchemas" and isinstance(value, dict):
            yield from value.values()
        elif value is not None:
            yield value


def _nodes(schema: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every object in the schema (subschemas and the rest alike), without recursion."""
    stack: list[Any] = [schema]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            yield item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _resolve(schema: Mapping[str, Any], ref: str, anchors: dict[str, Any]) -> Any:
    """What `#/a/b` (a JSON pointer) or `#name` (an anchor) points at; None: nothing."""
    fragment = unquote(ref[1:])
    if fragment and not fragment.startswith("/"):
        return anchors.get(fragment)
    found: Any = schema
    for part in fragment.split("/")[1:]:
        key = part.replace("~1", "/").replace("~0", "~")
        if isinstance(found, dict) and key in found:
            found = found[key]
        elif isinstance(found, list) and key.isdigit() and int(key) < len(found):
            found = found[int(key)]
        else:
            return None
    return found


__all__ = [
    "DEFAULT_OUTPUT_NAME",
    "MAX_CLIENT_TOOLS",
    "MAX_SCHEMA_CHARS",
    "MAX_SCHEMA_DEPTH",
    "OUTPUT_SCHEMA_FIELDS",
    "check_client_tools",
    "check_output_schema",
    "check_schema",
]
