"""The demo's MCP server (stdio): search over bundled documents, arithmetic, and the time.

`chatworker demo` runs it as its tool server; the tests' server adds fault tools to the same tools
(`register_tools`). Run it with `python -m app.demo.mcp_server`.
"""

from __future__ import annotations

import ast
import functools
import math
import operator
import re
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import Field

SERVER_NAME = "chatworker-demo-tools"
SERVER_MODULE = "app.demo.mcp_server"
DOCS_DIR = Path(__file__).resolve().parent / "docs"
# Beyond about 4,300 digits Python refuses to turn an int into text: results stay printable.
MAX_EXPRESSION_LENGTH = 500
MAX_INT_BITS = 4096
SNIPPET_LENGTH = 200

# --- document search ----------------------------------------------------------------------------

_STOPWORDS = frozenset(
    {"a", "an", "and", "are", "as", "at", "be", "by", "can", "do", "does", "for", "from", "how"}
    | {"i", "in", "is", "it", "of", "on", "or", "the", "to", "what", "when", "which", "who", "why"}
    | {"with"}
)
_WORD = re.compile(r"[a-z0-9]+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n\s*\n")


@functools.cache
def _load_docs() -> dict[str, str]:
    return {
        path.name: path.read_text(encoding="utf-8")
        for path in sorted(DOCS_DIR.iterdir())
        if path.suffix in {".md", ".txt"}
    }


def _fold(word: str) -> str:
    # Dropping a plural "s" lets "tuples" find "tuple" without a real stemmer.
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def _words(text: str) -> list[str]:
    return [_fold(word) for word in _WORD.findall(text.lower())]


def _query_terms(query: str) -> list[str]:
    words = _WORD.findall(query.lower())
    return list(dict.fromkeys(_fold(word) for word in words if word not in _STOPWORDS))


def _score(name: str, text: str, terms: list[str]) -> int:
    words = _words(text)
    name_words = set(_words(name))
    # A term in the file name is a strong topical signal, worth a few body mentions.
    return sum(words.count(term) + 5 * (term in name_words) for term in terms)


def _snippet(text: str, terms: list[str]) -> str:
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    sentences = [" ".join(s.split()) for s in _SENTENCE_END.split(body) if s.strip()]

    def hits(sentence: str) -> int:
        words = _words(sentence)
        return sum(words.count(term) for term in terms)

    best = max(sentences, key=hits)  # max() keeps the first of equals: deterministic
    return best if len(best) <= SNIPPET_LENGTH else best[: SNIPPET_LENGTH - 1] + "…"


def _title(text: str, fallback: str) -> str:
    first = text.lstrip().splitlines()[0] if text.strip() else ""
    return first.lstrip("#").strip() or fallback


def search_docs(
    query: Annotated[str, Field(description="Keywords to look for, e.g. 'postgres vacuum'.")],
    limit: Annotated[int, Field(ge=1, le=10, description="Maximum number of documents.")] = 3,
) -> str:
    """Search the bundled technical documents (Kubernetes, PostgreSQL, Redis, HTTP caching, MCP,
    TCP, Git, a refund policy) by keyword and return the best matching file names, each with a
    short snippet. Case-insensitive; ordered by relevance, then file name."""
    terms = _query_terms(query)
    if not terms:
        raise ToolError("The query has no searchable keywords.")
    scored = [(_score(name, text, terms), name) for name, text in _load_docs().items()]
    ranked = sorted((item for item in scored if item[0] > 0), key=lambda item: (-item[0], item[1]))
    if not ranked:
        return f"No document matches {query!r}."
    return "\n".join(
        _format_hit(rank, name, score, terms)
        for rank, (score, name) in enumerate(ranked[:limit], start=1)
    )


def _format_hit(rank: int, name: str, score: int, terms: list[str]) -> str:
    text = _load_docs()[name]
    return f"{rank}. {name} ({_title(text, name)}, score {score})\n   {_snippet(text, terms)}"


# --- arithmetic ---------------------------------------------------------------------------------

Number = int | float

_BINARY_OPERATORS: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_UNARY_OPERATORS: dict[type[ast.unaryop], Callable[[Number], Number]] = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


def _power(base: Number, exponent: Number) -> Number:
    # Refuse before computing: 9**9**9 would otherwise pin the server's CPU for hours.
    magnitude = abs(base)
    if magnitude > 1 and exponent > 0 and exponent * math.log2(magnitude) > MAX_INT_BITS:
        raise ToolError("The result is too large.")
    result = base**exponent
    if isinstance(result, complex):
        raise ToolError("The result is not a real number.")
    return result


def _evaluate(node: ast.AST) -> Number:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    constant = node.value if isinstance(node, ast.Constant) else None
    if isinstance(constant, int | float) and not isinstance(constant, bool):
        return constant
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY_OPERATORS:
        return _UNARY_OPERATORS[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
        return _power(_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY_OPERATORS:
        return _BINARY_OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    raise ToolError(f"Unsupported syntax: {ast.unparse(node) or type(node).__name__}")


def _check_result(value: Number) -> Number:
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise ToolError("The result is too large.")
    if isinstance(value, float) and not math.isfinite(value):
        raise ToolError("The result is not a finite number.")
    return value


def calculate(
    expression: Annotated[
        str,
        Field(
            max_length=MAX_EXPRESSION_LENGTH,
            description="An arithmetic expression, e.g. '2*(3+4)' or '-1.5**2 / 3'.",
        ),
    ],
) -> float:
    """Evaluate an arithmetic expression with numbers, + - * / // % ** , unary minus and
    parentheses. Names, function calls and anything else are rejected."""
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ToolError(f"Invalid expression: {exc.msg}") from None
    try:
        return _check_result(_evaluate(tree))
    except ZeroDivisionError:
        raise ToolError("Division by zero.") from None
    except OverflowError:
        raise ToolError("The result is too large.") from None


def add(a: float, b: float) -> float:
    """Add two numbers and return the sum."""
    return a + b


# --- time ---------------------------------------------------------------------------------------


def current_time(
    timezone: Annotated[
        str, Field(description="An IANA time zone name such as 'Europe/Paris' or 'UTC'.")
    ] = "UTC",
) -> str:
    """Return the current date and time in the given IANA time zone as an ISO-8601 string."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ToolError(f"Unknown time zone: {timezone!r}") from None
    return datetime.now(zone).isoformat()


# --- the server ---------------------------------------------------------------------------------

TOOLS: tuple[Callable[..., Any], ...] = (search_docs, calculate, add, current_time)


READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)


def register_tools(
    server: MCPServer, wrap: Callable[[Callable[..., Any]], Callable[..., Any]] = lambda f: f
) -> None:
    """Register the demo's tools on `server`, each through `wrap` (a test's call ledger). They
    only read (documents, arithmetic, the clock), and say so: a call in flight when a worker
    dies may simply run again."""
    for function in TOOLS:
        server.tool(annotations=READ_ONLY)(wrap(function))


def server_config() -> dict[str, Any]:
    """This server as an `mcpServers` entry: run by this interpreter, so it needs no checkout."""
    return {"command": sys.executable, "args": ["-m", SERVER_MODULE]}


def main() -> None:
    server = MCPServer(SERVER_NAME, log_level="WARNING")
    register_tools(server)
    server.run()


if __name__ == "__main__":
    main()
