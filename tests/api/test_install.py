"""The API mounted in a user's own FastAPI app with `install`: the same routes, error shape and
auth beside the app's own routes."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.api import install
from app.client import ChatClient
from app.config import load_settings


def test_install_mounts_the_routes_and_the_problem_handlers_in_an_existing_app(
    any_database_url: str,
) -> None:
    settings = load_settings(database_url=any_database_url, api_auth="api_key")
    client = ChatClient(settings, enqueue=lambda _cid: None)
    theirs = FastAPI()

    @theirs.get("/their/route")
    def their_route() -> dict[str, str]:
        return {"theirs": "yes"}

    context = install(theirs, settings, client=client)
    key = client.admin.create_key("alice")[1]
    try:
        with TestClient(theirs) as http:
            assert http.get("/their/route").json() == {"theirs": "yes"}
            refused = http.get("/v1/conversations")
            assert refused.status_code == 401
            assert refused.headers["content-type"] == "application/problem+json"
            assert refused.json()["code"] == "unauthenticated"
            auth = {"Authorization": f"Bearer {key}"}
            made = http.post("/v1/conversations", json={}, headers=auth)
            assert made.status_code == 201
            listed = http.get("/v1/conversations", headers=auth).json()["data"]
            assert [c["id"] for c in listed] == [made.json()["id"]]
            assert "/v1/turns/{turn_id}" in http.get("/openapi.json").json()["paths"]
    finally:
        context.close()
        client.close()
