"""The import boundaries of `app/`, checked by reading every module's imports (lazy ones inside
functions included), so a crossing fails the suite instead of waiting for a reviewer.

    modules                               may import
    ------------------------------------  --------------------------------------------------------
    app.worker.plan, .steps, .transcript, the standard library, jsonschema (a computation: no
    .messages, .entry, .offer, .verdict,  $ref is ever fetched, `client.checks`), re2 (the
    .context, .summary, .structured,      patterns' engine) and each other only: pure
    .safe_schema, .files; app.patterns,
    app.model_profile, app.vocabulary
    app.client.admission                  the standard library, app.client.views and
                                          app.vocabulary only: pure
    app.api.responses .ids, .requests,    the standard library, each other, the dialect's errors,
    .history, .input_items, .params,      the client's checks, schemas, tool choice (and
    .tools_given, .translate, .objects,   app.patterns) and views, the live entries, app.models
    .stream, .output_events;              and app.errors: pure (the routes read)
    app.api.aisdk .requests, .chunks;
    app.api.chat .messages, .history,
    .requests, .completion, .chunks
    app.client, app.api and all they      never app.worker, litellm or mcp (a web process stays
    import                                light and cannot run a turn by accident)
    app.worker                            never app.client (what both sides need has a room of
                                          its own: the shared rooms below)
    app.worker.llm (the model adapter)    never app.demo: the demo's provider is registered where
                                          the worker is assembled (app.worker.runtime)
    the shared rooms app.files,           never app.client nor app.worker: both sides import them
    app.budgets, app.model_profile
    app.api                               no SQLAlchemy at all: the client raises its own
                                          errors (`DatabaseUnavailable` for an outage)
    everything under app/ but the stores  none of SQLAlchemy's query building (select, insert,
    (app.client.store, app.worker.store,  update, text, func, Table...): only its plumbing
    app.files.store, app.budgets.store)   (Connection, Engine, create_engine, event, make_url)
    and app.models
                                          and its errors (sqlalchemy.exc); the SQL of a side is
                                          in its store, the migrations' in migrations/
    everything under app/                 never tests or bench (the wheel ships without them)
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

PURE = (
    "app.worker.plan",
    "app.worker.steps",
    "app.worker.transcript",
    "app.worker.messages",
    "app.worker.entry",
    "app.worker.offer",
    "app.worker.verdict",
    "app.worker.context",
    "app.worker.summary",
    "app.worker.structured",
    "app.worker.safe_schema",
    "app.worker.files",
    "app.patterns",
    "app.model_profile",
    "app.vocabulary",
)
PURE_LIBRARIES = ("__future__", "jsonschema", "re2")  # beside the standard library
DIALECT_PURE = (
    *(
        f"app.api.responses.{name}"
        for name in (
            "ids",
            "requests",
            "history",
            "input_items",
            "params",
            "tools_given",
            "translate",
            "objects",
            "stream",
            "output_events",
        )
    ),
    "app.api.aisdk.requests",
    "app.api.aisdk.chunks",
    *(
        f"app.api.chat.{name}"
        for name in ("messages", "history", "requests", "completion", "chunks")
    ),
)
DIALECT_MAY_IMPORT = (
    *DIALECT_PURE,
    "app.api.responses.errors",
    "app.client.checks",
    "app.client.schemas",
    "app.client.tool_choice",
    "app.patterns",
    "app.client.views",
    "app.live.entries",
    "app.models",
    "app.errors",
    "app.vocabulary",
)
ADMISSION = "app.client.admission"
ADMISSION_MAY_IMPORT = ("app.client.views", "app.vocabulary")
SQL_HOMES = (
    "app.client.store",
    "app.worker.store",
    "app.files.store",
    "app.budgets.store",
    "app.models",
)
SQL_PLUMBING = frozenset(
    {
        "sqlalchemy.Connection",
        "sqlalchemy.Engine",
        "sqlalchemy.create_engine",
        "sqlalchemy.event",
        "sqlalchemy.make_url",
        "sqlalchemy.engine.make_url",
        "sqlalchemy.engine.URL",
    }
)
CLIENT = ("app.client", "app.api")
API = "app.api"
WORKER = "app.worker"
SHARED = (
    "app.files",
    "app.budgets",
    "app.model_profile",
)  # what both sides stand on: imports neither side
CLIENT_FORBIDDEN = ("app.worker", "litellm", "mcp")
MODEL_ADAPTER, DEMO = "app.worker.llm", "app.demo"
APP_FORBIDDEN = ("tests", "bench")


@dataclass(frozen=True)
class Crossing:
    module: str
    imported: str
    rule: str

    def __str__(self) -> str:
        return f"{self.module} imports {self.imported}: {self.rule}"


def check(root: Path, package: str = "app") -> list[Crossing]:
    """Every boundary crossed by the modules of `package` under `root` (its parent directory)."""
    graph = import_graph(root, package)
    found = [
        *_pure(graph),
        *_admission(graph),
        *_dialect(graph),
        *_client(graph),
        *_worker(graph),
        *_app(graph),
        *_api(graph),
        *_sql(root, package),
    ]
    return sorted(found, key=str)


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module name -> the absolute names it imports, for every module of the package."""
    modules = {_name(path, root): path for path in sorted((root / package).rglob("*.py"))}
    return {name: _imports(path, name, set(modules)) for name, path in modules.items()}


def _pure(graph: dict[str, set[str]]) -> Iterable[Crossing]:
    for module in PURE:
        for imported in graph.get(module, ()):
            top = imported.split(".")[0]
            if (
                top not in sys.stdlib_module_names
                and top not in PURE_LIBRARIES
                and imported not in PURE
            ):
                yield Crossing(module, imported, "the planner and the transcript are pure")


def _admission(graph: dict[str, set[str]]) -> Iterable[Crossing]:
    for imported in graph.get(ADMISSION, ()):
        top = imported.split(".")[0]
        if top in sys.stdlib_module_names or top == "__future__":
            continue
        if not any(_within(imported, allowed) for allowed in ADMISSION_MAY_IMPORT):
            yield Crossing(ADMISSION, imported, "admission is pure: the standard library and views")


def _dialect(graph: dict[str, set[str]]) -> Iterable[Crossing]:
    for module in DIALECT_PURE:
        for imported in graph.get(module, ()):
            top = imported.split(".")[0]
            if top in sys.stdlib_module_names or top == "__future__":
                continue
            if not any(_within(imported, allowed) for allowed in DIALECT_MAY_IMPORT):
                yield Crossing(module, imported, "the dialect's translation is pure")


def _sql(root: Path, package: str) -> Iterable[Crossing]:
    for path in sorted((root / package).rglob("*.py")):
        module = _name(path, root)
        if any(_within(module, home) for home in SQL_HOMES):
            continue
        for name in sorted(_sqlalchemy_names(path)):
            if name not in SQL_PLUMBING and not _within(name, "sqlalchemy.exc"):
                yield Crossing(module, name, "SQL is built only in the stores and app.models")


def _sqlalchemy_names(path: Path) -> set[str]:
    """What a module takes from SQLAlchemy: `sqlalchemy.select` for `from sqlalchemy import
    select`, the module itself for `import sqlalchemy...` (all of it is then within reach)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names if _within(a.name, "sqlalchemy"))
        elif (
            isinstance(node, ast.ImportFrom)
            and not node.level
            and _within(node.module or "", "sqlalchemy")
        ):
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def _api(graph: dict[str, set[str]]) -> Iterable[Crossing]:
    for module, imported_names in graph.items():
        if _within(module, API):
            for imported in imported_names:
                if _within(imported, "sqlalchemy"):
                    yield Crossing(module, imported, "the API speaks the client's errors, no SQL")


def _client(graph: dict[str, set[str]]) -> Iterable[Crossing]:
    light = [m for m in graph if any(_within(m, side) for side in CLIENT)]
    for module in _reachable(graph, light):
        for imported in graph[module]:
            if any(_within(imported, forbidden) for forbidden in CLIENT_FORBIDDEN):
                yield Crossing(
                    module, imported, "reached from app.client or app.api, which must stay light"
                )


def _worker(graph: dict[str, set[str]]) -> Iterable[Crossing]:
    for module, imported_names in graph.items():
        for imported in imported_names:
            shared = next((room for room in SHARED if _within(module, room)), None)
            if shared is not None and (
                _within(imported, "app.client") or _within(imported, WORKER)
            ):
                yield Crossing(
                    module, imported, f"{shared} is imported by both sides, never theirs"
                )
            elif _within(module, WORKER) and _within(imported, "app.client"):
                yield Crossing(module, imported, "the worker never imports the client")
            elif _within(module, MODEL_ADAPTER) and _within(imported, DEMO):
                yield Crossing(
                    module, imported, "the demo is registered where the worker is assembled"
                )


def _app(graph: dict[str, set[str]]) -> Iterable[Crossing]:
    for module, imported_names in graph.items():
        for imported in imported_names:
            if any(_within(imported, forbidden) for forbidden in APP_FORBIDDEN):
                yield Crossing(module, imported, "the package never imports tests or bench")


def _reachable(graph: dict[str, set[str]], start: list[str]) -> set[str]:
    seen, todo = set(start), list(start)
    while todo:
        for imported in graph[todo.pop()]:
            for module in _with_parents(imported):
                if module in graph and module not in seen:
                    seen.add(module)
                    todo.append(module)
    return seen


def _imports(path: Path, module: str, known: set[str]) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node, package)
            names.add(base)
            # `from app.worker import plan` imports the module app.worker.plan
            names.update(f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known)
    return names


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    parts = package.split(".")
    base = ".".join(parts[: len(parts) - node.level + 1])
    return f"{base}.{node.module}" if node.module else base


def _name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def _with_parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]
