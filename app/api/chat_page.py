"""The chat page's HTML as served at `/`: `page/index.html` with the choices it offers written in
from `app.vocabulary` (the busy policies), so the page never restates a closed set."""

from __future__ import annotations

from html import escape
from pathlib import Path

from app.vocabulary import BUSY_POLICIES, BUSY_POLICY_LABELS, ENQUEUE, BusyPolicy

PAGE = Path(__file__).parent / "page"
BUSY_OPTIONS = "<!-- on_busy options -->"  # where index.html takes them
PAGE_BUSY_DEFAULT: BusyPolicy = ENQUEUE  # a message typed while a turn runs waits behind it


def busy_options(default: BusyPolicy = PAGE_BUSY_DEFAULT, indent: str = "") -> str:
    """The `<option>`s of the page's "while a turn runs" choice: its default first, selected."""
    ordered = (default, *(policy for policy in BUSY_POLICIES if policy != default))
    return f"\n{indent}".join(
        f'<option value="{policy}"{" selected" if policy == default else ""}>'
        f"{escape(BUSY_POLICY_LABELS[policy])}</option>"
        for policy in ordered
    )


def page_html() -> str:
    """index.html with its choices written in."""
    template = (PAGE / "index.html").read_text(encoding="utf-8")
    if BUSY_OPTIONS not in template:
        raise RuntimeError(f"page/index.html lost its {BUSY_OPTIONS} mark")
    indent = template[: template.index(BUSY_OPTIONS)].rsplit("\n", 1)[-1]
    return template.replace(BUSY_OPTIONS, busy_options(indent=indent))
