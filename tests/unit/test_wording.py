"""The docs, code and tests describe the product, not how its work was scheduled or tracked.

A numbered work item of our own ("stop" or "issue" followed by a number, "this stop", a
pull request named as "PR") is bookkeeping: git's history keeps it, the text says what the
product does. A reference to another project's tracker is fine when it names the project
(`BerriAI/litellm#1234`, `BerriAI/litellm issue 1234`, a github.com address).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("docs", "app", "tests", "bench")
FILES = ("README.md",)
SUFFIXES = {".py", ".md", ".js", ".mjs", ".html", ".toml", ".yml", ".yaml", ".sh"}
SKIPPED_PARTS = {"node_modules", "vendor", "__pycache__", ".venv"}

BOOKKEEPING = re.compile(
    r"""
      \bstops?\ \d+(?:\s*[-,]\s*\d+)*(?:'s)?\b   # the word, a number, a range, a possessive
    | \bissues?\ \#?\d+\b                        # the word, a number with or without #
    | \bthis\ stop\b
    | \b(?:earlier|previous|later|next)\ session\b
    | \bPR\b                                     # "this PR", "PR 12"
    """,
    re.IGNORECASE | re.VERBOSE,
)
# Only "PR" in capitals is the abbreviation; "pr" and "Pr" are other words.
CASE_SENSITIVE = {"pr"}
# An owner/repo before the number: another project's tracker, named.
EXTERNAL = re.compile(r"[\w.-]+/[\w.-]+(?:\s+|#)$|github\.com/\S*$")


def bookkeeping(line: str) -> list[str]:
    """The phrases of `line` that name a work item of ours."""
    found = []
    for match in BOOKKEEPING.finditer(line):
        phrase = match.group(0)
        if phrase.lower() in CASE_SENSITIVE and phrase != "PR":
            continue
        if EXTERNAL.search(line[: match.start()]):
            continue
        found.append(phrase)
    return found


def text_files() -> list[Path]:
    here = Path(__file__).resolve()
    paths = [ROOT / name for name in FILES]
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix not in SUFFIXES or not path.is_file() or path == here:
                continue
            if SKIPPED_PARTS.intersection(path.relative_to(ROOT).parts):
                continue
            paths.append(path)
    return paths


def test_no_text_names_how_the_work_was_organised() -> None:
    offences = []
    for path in text_files():
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        for number, line in enumerate(lines, start=1):
            for phrase in bookkeeping(line):
                offences.append(f"{path.relative_to(ROOT)}:{number}: {phrase!r}")
    assert not offences, "say what the product does instead:\n" + "\n".join(offences)


def test_the_files_searched_include_each_folder() -> None:
    searched = {path.relative_to(ROOT).parts[0] for path in text_files()}
    assert searched == {*FOLDERS, *FILES}


STOP, ISSUE, SESSION, PR = "stop", "issue", "session", "PR"


def test_our_work_items_are_caught() -> None:
    # (each phrase is joined from its words here, so this file does not say what it forbids)
    for words in (
        ("the figures of", STOP, "40"),
        (STOP, "40's figures"),
        (STOP.title(), "39 measured it"),
        (STOP + "s", "37-41 tried it"),
        ("left for", ISSUE, "27"),
        (ISSUE, "27's goals"),
        ("see", ISSUE, "#12"),
        ("Hardening (" + ISSUE, "23) over real HTTP"),
        ("measured in this", STOP),
        ("an earlier", SESSION, "folded the statements"),
        ("this", PR, "moves it"),
    ):
        line = " ".join(words)
        assert bookkeeping(line), line


def test_the_product_s_own_words_and_other_projects_trackers_pass() -> None:
    for line in (
        "the worker issues a request to the model",
        "a stop that cancels the turn",
        "POST /v1/ai-sdk/chat/{id}/stop",
        "stops within 5 s",
        "the database drops a session's locks",
        "The server ends this session if its transaction sits idle",
        "litellm's behaviour (BerriAI/litellm#1234)",
        "see BerriAI/litellm issue 5678",
        "https://github.com/BerriAI/litellm/issues/5678",
        "a pr_number field, Pr. Smith",
    ):
        assert not bookkeeping(line), line
