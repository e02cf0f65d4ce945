"""The chat page's files as a browser and an installer get them: every module and vendored file
ships in the wheel, each script is served as JavaScript, every import stays on this host, and the
page's policy allows no inline script and nothing from elsewhere."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

from fastapi.testclient import TestClient

from app.api import create_app
from app.config import load_settings
from tests.integration.test_wheel import REPO, build_wheel

PAGE = REPO / "app" / "api" / "page"
SCRIPTS = sorted(PAGE.rglob("*.js"))
IMPORT = re.compile(r"""^\s*(?:import|export)\b[^;]*?\bfrom\s+["']([^"']+)["']""", re.M)


def test_the_wheel_ships_every_file_of_the_page_with_the_vendored_licenses(
    tmp_path: Path,
) -> None:
    shipped = set(zipfile.ZipFile(build_wheel(tmp_path)).namelist())
    page = {path.relative_to(REPO).as_posix() for path in PAGE.rglob("*") if path.is_file()}
    assert {"app/api/page/vendor/marked.LICENSE", "app/api/page/vendor/dompurify.LICENSE"} <= page
    assert sorted(page - shipped) == []


def test_every_module_is_served_as_javascript_and_imports_only_from_this_host() -> None:
    with TestClient(create_app(load_settings(database_url="sqlite:///:memory:"))) as http:
        for script in SCRIPTS:
            response = http.get(f"/static/{script.relative_to(PAGE).as_posix()}")
            assert response.status_code == 200, script
            kind = response.headers["content-type"].split(";")[0]
            assert kind in {"text/javascript", "application/javascript"}, (script, kind)
        page = http.get("/").text
    for script in SCRIPTS:
        for target in IMPORT.findall(script.read_text()):
            assert target.startswith("./"), (script.name, target)  # no other host, no bare name
            assert (script.parent / target).resolve().is_file(), (script.name, target)
    policy = re.search(r'http-equiv="Content-Security-Policy"\s+content="([^"]+)"', page)
    assert policy is not None
    assert "default-src 'self'" in policy[1]
    assert "unsafe-inline" not in policy[1] and "unsafe-eval" not in policy[1]
    assert "http" not in policy[1]  # no other host
    assert '<script type="module" src="/static/chat.js"></script>' in page
