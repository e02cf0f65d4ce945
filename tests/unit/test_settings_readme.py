"""The settings page's tables are the settings: generated from the sections, checked by a test.

A tampered copy of docs/SETTINGS.md fails the check, and writing the tables repairs it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from app.config import SECTIONS, Settings, env_name
from app.config.readme import END, START, _default, main, render, splice

PAGE = Path(__file__).resolve().parents[2] / "docs" / "SETTINGS.md"


def test_the_settings_page_s_tables_are_the_settings(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--check", "--page", str(PAGE)]) == 0, capsys.readouterr().err


def test_every_setting_is_in_exactly_one_section() -> None:
    sectioned = [field for section in SECTIONS for field in section.model_fields]
    assert sorted(sectioned) == sorted(Settings.model_fields)
    assert len(set(sectioned)) == len(sectioned)


def test_every_setting_has_a_row_with_its_variable_and_default() -> None:
    tables = render()
    for field, info in Settings.model_fields.items():
        assert info.description, f"{field} has no description"
        assert f"| `{env_name(field)}` |" in tables
    assert "| `CHATWORKER_LEASE_TTL_SECONDS` | `30` |" in tables
    assert "| `CHATWORKER_LIVE_FLUSH_SECONDS` | `0.05` |" in tables
    assert "| `CHATWORKER_SESSION_CACHE` | `true` |" in tables
    assert "| `REDIS_URL` | unset |" in tables
    assert "| `CHATWORKER_FALLBACK_MODELS` | none |" in tables
    assert "| `CHATWORKER_MODEL_FILE_KINDS` | none |" in tables  # a default_factory's value
    assert "Undefined" not in tables
    assert (
        "| `CHATWORKER_WEBHOOK_RETRY_SCHEDULE` | `5,60,300,1800,7200,18000,28800,28800` |" in tables
    )


def test_one_heading_per_section_in_their_order() -> None:
    tables = render()
    positions = [tables.index(f"\n### {section.title}\n") for section in SECTIONS]
    assert positions == sorted(positions)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("| `CHATWORKER_LEASE_TTL_SECONDS` | `30` |", "| `CHATWORKER_LEASE_TTL_SECONDS` | `45` |"),
        ("timeout of one MCP tool call", "timeout of one tool call"),
        ("| `CHATWORKER_RETENTION_DAYS` |", "| `CHATWORKER_RETENTION` |"),
    ],
)
def test_the_check_fails_on_a_tampered_page_and_writing_repairs_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str
) -> None:
    copy = tmp_path / "SETTINGS.md"
    original = PAGE.read_text(encoding="utf-8")
    assert original.count(old) == 1
    copy.write_text(original.replace(old, new), encoding="utf-8")

    assert main(["--check", "--page", str(copy)]) == 1
    said = capsys.readouterr().err
    diff = said.splitlines()
    assert any(line.startswith("-") and new in line for line in diff)  # the page as it is
    assert any(line.startswith("+") and old in line for line in diff)  # as the settings say
    assert "the settings tables differ" in said
    assert copy.read_text(encoding="utf-8") != original  # --check changes nothing

    assert main(["--page", str(copy)]) == 0
    assert copy.read_text(encoding="utf-8") == original
    assert main(["--check", "--page", str(copy)]) == 0


def test_a_setting_missing_from_the_page_fails_the_check(tmp_path: Path) -> None:
    copy = tmp_path / "SETTINGS.md"
    lines = PAGE.read_text(encoding="utf-8").splitlines(keepends=True)
    kept = [line for line in lines if not line.startswith("| `CHATWORKER_CLARIFY` |")]
    assert len(kept) == len(lines) - 1
    copy.write_text("".join(kept), encoding="utf-8")
    assert main(["--check", "--page", str(copy)]) == 1


def test_a_page_without_the_markers_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "SETTINGS.md"
    copy.write_text(PAGE.read_text(encoding="utf-8").replace(END, ""), encoding="utf-8")
    assert main(["--check", "--page", str(copy)]) == 2
    assert START in capsys.readouterr().err
    with pytest.raises(ValueError, match="once each"):
        splice("no markers here", render())


def test_only_the_text_between_the_markers_is_replaced() -> None:
    page = f"before\n{START}\nold tables\n{END}\nafter\n"
    assert splice(page, "new") == f"before\n{START}\nnew\n{END}\nafter\n"


class _Defaults(BaseModel):
    absent: str | None = None
    empty_tuple: tuple[str, ...] = ()
    empty_mapping: dict[str, list[str]] = Field(default_factory=dict)
    made_mapping: dict[str, list[str]] = Field(default_factory=lambda: {"m": ["image", "pdf"]})
    made_list: list[int] = Field(default_factory=lambda: [5, 60])
    number: float = 0.5
    whole: float = 3.0
    flag: bool = False
    needed: int


@pytest.mark.parametrize(
    ("field", "shown"),
    [
        ("absent", "unset"),
        ("empty_tuple", "none"),
        ("empty_mapping", "none"),
        ("made_mapping", '`{"m":["image","pdf"]}`'),
        ("made_list", "`5,60`"),
        ("number", "`0.5`"),
        ("whole", "`3`"),
        ("flag", "`false`"),
        ("needed", "required"),
    ],
)
def test_a_default_is_shown_as_a_reader_sets_it(field: str, shown: str) -> None:
    assert _default(_Defaults.model_fields[field]) == shown
