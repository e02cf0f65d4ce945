"""Every row of the planner's table (the header of `app/worker/plan.py`) has a unit test tagged
with it (`@pytest.mark.row(n)`), read from the sources, so a new row cannot land untested."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from app.worker import plan

UNIT = Path(__file__).parent
# A row starts a line of the header's tables with its number, right-aligned in three columns.
ROW = re.compile(r"^\s?(\d{1,2})  \S", re.MULTILINE)


def header_rows(doc: str) -> set[int]:
    """The row numbers of the tables in the planner's header."""
    return {int(number) for number in ROW.findall(doc)}


def tagged_rows(source: str) -> set[int]:
    """The rows named by `pytest.mark.row(...)` decorators in a test module's source."""
    found: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and _is_row_mark(node.func):
            found.update(int(arg.value) for arg in node.args if isinstance(arg, ast.Constant))
    return found


def _is_row_mark(func: ast.expr) -> bool:
    return (
        isinstance(func, ast.Attribute)
        and func.attr == "row"
        and isinstance(func.value, ast.Attribute)
        and func.value.attr == "mark"
    )


def untagged(doc: str, sources: list[str]) -> list[int]:
    tagged = set().union(*(tagged_rows(source) for source in sources))
    return sorted(header_rows(doc) - tagged)


def test_every_row_of_the_planner_s_table_has_a_tagged_test() -> None:
    assert plan.__doc__ is not None
    rows = header_rows(plan.__doc__)
    assert rows == set(range(1, max(rows) + 1)), "the rows are numbered 1..n without a gap"
    sources = [path.read_text() for path in sorted(UNIT.glob("test_*.py"))]
    missing = untagged(plan.__doc__, sources)
    assert not missing, f"planner rows with no test tagged @pytest.mark.row(n): {missing}"


def test_the_check_names_a_row_no_test_is_tagged_with() -> None:
    doc = " 1  first row          Finish\n      continued\n 2  second row         Fail\n"
    source = "import pytest\n\n@pytest.mark.row(1)\ndef test_one() -> None: ...\n"
    assert header_rows(doc) == {1, 2}
    assert untagged(doc, [source]) == [2]
    assert untagged(doc, [source.replace("row(1)", "row(1, 2)")]) == []
