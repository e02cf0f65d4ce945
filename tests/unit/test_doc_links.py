"""Every relative link of the README and docs/ leads somewhere: a file of the repository and, when
the link names a heading (`page.md#heading`), a heading of that page.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# [text](target) and ![alt](target); the target ends at a space (a title) or the parenthesis.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def links(page: Path) -> list[tuple[int, str]]:
    """The targets of `page`'s links outside code blocks, with their line numbers."""
    found, in_code = [], False
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
        if FENCE.match(line):
            in_code = not in_code
            continue
        if not in_code:
            found.extend((number, target) for target in LINK.findall(line))
    return found


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    headings = re.findall(r"^#{1,6}\s+(.+?)\s*#*$", page.read_text(encoding="utf-8"), re.M)
    return {slug(heading) for heading in headings}


def broken(page: Path, root: Path = ROOT) -> list[str]:
    """`page`'s links that lead nowhere, as `file:line: target (why)`."""
    wrong = []
    for number, target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        path, _, anchor = target.partition("#")
        where = (page.parent / path).resolve() if path else page
        if not where.exists():
            wrong.append(f"{page.relative_to(root)}:{number}: {target} (no such file)")
        elif anchor and where.suffix == ".md" and anchor not in anchors(where):
            wrong.append(f"{page.relative_to(root)}:{number}: {target} (no such heading)")
    return wrong


def test_every_relative_link_resolves() -> None:
    wrong = [line for page in pages() for line in broken(page)]
    assert not wrong, "\n".join(wrong)


def test_the_readme_links_every_page_of_docs() -> None:
    linked = {target.partition("#")[0] for _, target in links(ROOT / "README.md")}
    unlinked = [
        page.relative_to(ROOT).as_posix()
        for page in sorted((ROOT / "docs").glob("*.md"))
        if page.relative_to(ROOT).as_posix() not in linked
    ]
    assert not unlinked, f"the README's 'Read on' table misses {unlinked}"


def test_a_broken_link_or_heading_is_found(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# A page\n\n## The `fence` rules\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md) [ok](there.md#the-fence-rules) [ok](https://example.com/x.md)\n"
        "[missing](gone.md) [bad heading](there.md#nothing)\n"
        "```\n[in code](nowhere.md)\n```\n",
        encoding="utf-8",
    )
    assert [target for _, target in links(page)] == [
        "there.md",
        "there.md#the-fence-rules",
        "https://example.com/x.md",
        "gone.md",
        "there.md#nothing",
    ]
    assert broken(page, root=tmp_path) == [
        "page.md:2: gone.md (no such file)",
        "page.md:2: there.md#nothing (no such heading)",
    ]
