"""Structured output: what a turn that asks for a JSON Schema answer sends, and how its final
answer is judged (rows 27-29 of `plan`'s table). Pure, no I/O, like the planner.

A turn's schema (`Snapshot.output_schema`: the message's own, else the conversation's) is
`{"name", "schema", "strict", "description"?}`, checked when it was given (`client.checks`). A
model litellm says takes a response schema is sent it as OpenAI's `response_format` (litellm
turns it into each provider's form: Anthropic's `output_format`, Gemini's `response_schema`);
any other model is told the schema in a system message. Either way the final answer is checked
here, against the schema, before the turn completes:

    answer = structured.judge("{\"kind\": \"bug\"}", schema)   # -> Matched({"kind": "bug"})
    answer = structured.judge("a bug", schema)                 # -> Mismatch("not JSON: ...")

A mismatch is kept (an assistant message with `is_error` and `output_error`), and the model is
asked once to repair it (`repair_prompt`, sent right after it); a second mismatch fails the turn
(`FAILED_ERROR`). The check is bounded (`safe_schema`: RE2 patterns, hashed `uniqueItems`,
asserted formats; an answer of at most `MAX_ANSWER_CHARS`, nested at most `MAX_DEPTH` levels);
the worker runs it in a checker process with a deadline and a memory cap (`checker.py`), and an
answer that cannot be checked within them is `Unjudged`: the turn fails saying why.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, NamedTuple

from jsonschema.exceptions import best_match
from jsonschema.protocols import Validator

from app.worker.safe_schema import MAX_DEPTH, deeper_than, validator_for

REPAIRS = 1  # a mismatched answer is sent back this many times before the turn fails
MAX_ERROR_CHARS = 500
MAX_ANSWER_CHARS = 1_000_000  # a structured answer's text (a model's longest answers are shorter)
UNJUDGED_ERROR = "The model's answer could not be checked against the output schema: {why}"
FAILED_ERROR = (
    "The model's answer did not match the output schema after {repairs} repair attempt(s): {error}"
)
REPAIR_PROMPT = (
    "Your answer does not match the required JSON Schema: {error}\n"
    "Answer again with only a JSON value that matches the schema, and no other text."
)
INSTRUCTION = (
    "When you give your final answer (not a tool call), answer with only a JSON value that "
    "matches this JSON Schema, and no other text (no code fence):\n{schema}"
)
# A model that wraps its JSON in a Markdown code fence anyway: the fence is taken off.
_FENCED = re.compile(r"^\s*```[A-Za-z0-9_-]*\s*\n(.*?)\n?\s*```\s*$", re.DOTALL)


class Matched(NamedTuple):
    """The answer is JSON that matches the schema: its parsed value."""

    output: Any


class Mismatch(NamedTuple):
    """The answer is not JSON, or does not match: why, in a sentence the model can act on."""

    error: str


class Unjudged(NamedTuple):
    """The answer could not be checked within the bounds (`error`: the turn's, saying why)."""

    error: str


Judgement = Matched | Mismatch | Unjudged


def response_format(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The schema as OpenAI's `response_format` (litellm maps it for other providers)."""
    found: dict[str, Any] = {
        "name": schema.get("name", "answer"),
        "schema": schema["schema"],
        "strict": bool(schema.get("strict", False)),
    }
    if schema.get("description"):
        found["description"] = schema["description"]
    return {"type": "json_schema", "json_schema": found}


def instruction(schema: Mapping[str, Any]) -> str:
    """What a model without a structured-output mode is told (a system message)."""
    return INSTRUCTION.format(schema=json.dumps(schema["schema"], ensure_ascii=False))


def judge(content: str | None, schema: Mapping[str, Any], key: str | None = None) -> Judgement:
    """Whether the answer `content` matches `schema`: its parsed value, or why not; `Unjudged`
    when the check itself failed (a schema that refers to itself without end). Under a
    `safe_schema.deadline`, `TooCostly` past it. `key`: `schema_key(schema)`, if known."""
    text = answer_text(content)
    if len(text) > MAX_ANSWER_CHARS:
        return Mismatch(
            f"the answer is {len(text):,} characters long, over the {MAX_ANSWER_CHARS:,} a "
            "structured answer may be"
        )
    try:
        value = json.loads(text)
        # (a text with fewer brackets than the bound cannot nest past it: no walk)
        deep = text.count("{") + text.count("[") > MAX_DEPTH and deeper_than(value)
    except ValueError as exc:
        return Mismatch(f"the answer is not JSON ({exc})")
    except RecursionError:  # (nested past the parser's own limit, far past MAX_DEPTH)
        deep = True
    if deep:
        return Mismatch(f"the answer nests objects and arrays deeper than {MAX_DEPTH} levels")
    try:
        error = best_match(_validator(key or schema_key(schema)).iter_errors(value))
    except RecursionError:
        return Unjudged(UNJUDGED_ERROR.format(why="the schema refers to itself without end"))
    if error is None:
        return Matched(value)
    where = "/".join(str(part) for part in error.absolute_path)
    message = error.message
    if len(message) > MAX_ERROR_CHARS:
        message = message[:MAX_ERROR_CHARS] + "..."
    return Mismatch(f"at {where or 'the root'}: {message}")


def schema_key(schema: Mapping[str, Any]) -> str:
    """The turn's schema as the text its compiled validator is kept under."""
    return json.dumps(schema["schema"], sort_keys=True)


def answer_text(content: str | None) -> str:
    """The answer's JSON text: stripped, and out of a Markdown code fence if it is in one."""
    text = (content or "").strip()
    fenced = _FENCED.match(text)
    return fenced.group(1).strip() if fenced is not None else text


def repair_prompt(error: str) -> str:
    """The message sent right after a mismatched answer: what was wrong, answer again."""
    return REPAIR_PROMPT.format(error=error)


def refusal_error(error: str) -> str:
    """The turn's error once its repairs are spent."""
    return FAILED_ERROR.format(repairs=REPAIRS, error=error)


@lru_cache(maxsize=256)
def _validator(schema_json: str) -> Validator:
    """One compiled validator per distinct schema (checked when it was given)."""
    return validator_for(json.loads(schema_json))


__all__ = [
    "FAILED_ERROR",
    "MAX_ANSWER_CHARS",
    "REPAIRS",
    "UNJUDGED_ERROR",
    "Judgement",
    "Matched",
    "Mismatch",
    "Unjudged",
    "answer_text",
    "instruction",
    "judge",
    "refusal_error",
    "repair_prompt",
    "response_format",
    "schema_key",
]
