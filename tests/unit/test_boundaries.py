"""The import boundaries of `app/` hold (`tests/boundaries.py` has the rules), and the check
catches each kind of crossing, lazy imports and imports through another module included."""

from __future__ import annotations

from pathlib import Path

from tests.boundaries import Crossing, check, import_graph

REPO = Path(__file__).resolve().parents[2]


def test_the_package_crosses_no_boundary() -> None:
    assert [str(crossing) for crossing in check(REPO)] == []


def test_the_check_reads_the_real_package() -> None:
    graph = import_graph(REPO, "app")
    assert "app.worker.plan" in graph and "app.client" in graph
    assert "app.worker.plan" in graph["app.worker.transcript"]
    assert "app.models" in graph["app.worker.store.fence"]


def write(root: Path, module: str, source: str) -> None:
    path = root.joinpath(*module.split(".")).with_suffix(".py")
    path.parent.mkdir(parents=True, exist_ok=True)
    for parent in [path.parent, *path.parent.parents]:
        if parent == root:
            break
        (parent / "__init__.py").touch()
    path.write_text(source)


def test_each_kind_of_crossing_is_caught(tmp_path: Path) -> None:
    write(tmp_path, "app.worker.plan", "import json\nimport sqlalchemy\n")
    write(tmp_path, "app.worker.transcript", "from app.worker.plan import Entry\n")
    # The client reaches litellm through a helper, lazily, inside a function.
    write(tmp_path, "app.client.facade", "from app import helper\n")
    write(tmp_path, "app.helper", "def go():\n    import litellm\n")
    write(tmp_path, "app.client.views", "from ..worker import plan\n")  # relative
    write(tmp_path, "app.demo.run", "from tests.servers import mcp_server\n")
    write(tmp_path, "app.worker.llm", "import litellm\n")  # fine: nothing light reaches it

    assert check(tmp_path) == [
        Crossing(
            "app.client.views",
            "app.worker.plan",
            "reached from app.client or app.api, which must stay light",
        ),
        Crossing(
            "app.client.views",
            "app.worker",
            "reached from app.client or app.api, which must stay light",
        ),
        Crossing("app.demo.run", "tests.servers", "the package never imports tests or bench"),
        Crossing(
            "app.helper", "litellm", "reached from app.client or app.api, which must stay light"
        ),
        Crossing("app.worker.plan", "sqlalchemy", "SQL is built only in the stores and app.models"),
        Crossing("app.worker.plan", "sqlalchemy", "the planner and the transcript are pure"),
    ]


def test_the_worker_never_imports_the_client_nor_a_shared_room_either_side(
    tmp_path: Path,
) -> None:
    write(tmp_path, "app.worker.store.files", "from app.client.attachments import sniff\n")
    # No waiver: a lazy import inside a function is a crossing too.
    write(
        tmp_path, "app.worker.store.turns", "def go():\n    from app.client.store import budgets\n"
    )
    write(tmp_path, "app.files.media", "from app.worker import files\n")
    write(tmp_path, "app.files.store", "import app.client.views\n")
    write(tmp_path, "app.budgets.store", "from app.worker.store import fence\n")
    write(tmp_path, "app.worker.llm.client", "from app.demo.model import demo_handler\n")
    write(tmp_path, "app.worker.runtime", "from app.demo import model\n")  # fine: assembly
    write(tmp_path, "app.client.attachments", "from app.files.media import sniff\n")
    write(tmp_path, "app.client.store.budgets", "")
    write(tmp_path, "app.client.views", "")

    found = {c for c in check(tmp_path) if "light" not in c.rule}
    assert found == {
        Crossing(
            "app.budgets.store",
            "app.worker.store",
            "app.budgets is imported by both sides, never theirs",
        ),
        Crossing(
            "app.worker.llm.client",
            "app.demo.model",
            "the demo is registered where the worker is assembled",
        ),
        Crossing(
            "app.worker.store.turns",
            "app.client.store.budgets",
            "the worker never imports the client",
        ),
        Crossing(
            "app.worker.store.turns",
            "app.client.store",
            "the worker never imports the client",
        ),
        Crossing(
            "app.files.media", "app.worker", "app.files is imported by both sides, never theirs"
        ),
        Crossing(
            "app.files.store",
            "app.client.views",
            "app.files is imported by both sides, never theirs",
        ),
        Crossing(
            "app.worker.store.files",
            "app.client.attachments",
            "the worker never imports the client",
        ),
    }


def test_admission_may_import_only_the_standard_library_and_the_views(tmp_path: Path) -> None:
    write(
        tmp_path,
        "app.client.admission",
        "import uuid\nfrom app.client.views import TurnView\nfrom app.models import IDLE\n",
    )
    write(tmp_path, "app.client.views", "import uuid\n")
    write(tmp_path, "app.models", "")

    assert check(tmp_path) == [
        Crossing(
            "app.client.admission",
            "app.models",
            "admission is pure: the standard library and views",
        )
    ]


def test_the_dialect_s_translation_reads_nothing_itself(tmp_path: Path) -> None:
    write(
        tmp_path,
        "app.api.responses.stream",
        "from app.api.responses.translate import Cutter\nfrom app.live.entries import Delta\n"
        "from app.client.store import reads\n",
    )
    write(tmp_path, "app.api.responses.translate", "from app.client.views import TurnView\n")
    write(tmp_path, "app.client.views", "import uuid\n")
    write(tmp_path, "app.client.store.reads", "")
    write(tmp_path, "app.live.entries", "")

    pure = "the dialect's translation is pure"
    assert check(tmp_path) == [
        Crossing("app.api.responses.stream", "app.client.store.reads", pure),
        Crossing("app.api.responses.stream", "app.client.store", pure),
    ]


def test_sql_is_built_only_in_the_stores_and_the_models(tmp_path: Path) -> None:
    write(tmp_path, "app.client.facade", "from sqlalchemy import Engine, select\n")
    write(tmp_path, "app.budgets", "import sqlalchemy as sa\n")
    write(tmp_path, "app.live.channel", "def go():\n    from sqlalchemy.sql import text\n")
    # Its plumbing and its errors are no query building; the stores and the models build.
    write(tmp_path, "app.db", "from sqlalchemy import Connection, create_engine, event\n")
    write(tmp_path, "app.cli", "from sqlalchemy.exc import OperationalError\n")
    write(tmp_path, "app.client.store.reads", "from sqlalchemy import select, func\n")
    write(tmp_path, "app.worker.store.fence", "from sqlalchemy import update\n")
    write(tmp_path, "app.models.tables", "from sqlalchemy import Table\n")

    rule = "SQL is built only in the stores and app.models"
    assert check(tmp_path) == [
        Crossing("app.budgets", "sqlalchemy", rule),
        Crossing("app.client.facade", "sqlalchemy.select", rule),
        Crossing("app.live.channel", "sqlalchemy.sql.text", rule),
    ]


def test_the_api_imports_no_sqlalchemy(tmp_path: Path) -> None:
    write(tmp_path, "app.api.problems", "from sqlalchemy.exc import OperationalError\n")
    write(tmp_path, "app.api.streaming", "from sqlalchemy import Engine\n")
    # The client translates its outages: its store may name SQLAlchemy's errors.
    write(tmp_path, "app.client.store.outage", "from sqlalchemy import exc\n")

    rule = "the API speaks the client's errors, no SQL"
    assert check(tmp_path) == [
        Crossing("app.api.problems", "sqlalchemy.exc", rule),
        Crossing("app.api.streaming", "sqlalchemy", rule),  # (even its plumbing)
    ]


def test_a_clean_tree_passes(tmp_path: Path) -> None:
    write(tmp_path, "app.worker.plan", "import json\nfrom dataclasses import dataclass\n")
    write(tmp_path, "app.client.facade", "from sqlalchemy import Engine\nfrom app import queue\n")
    write(tmp_path, "app.queue", "import dramatiq\n")
    assert check(tmp_path) == []
