"""API keys: `chatworker keys create | list | revoke`, and what a presented key is worth."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest
from sqlalchemy import text

from app.client import ChatClient
from app.client.keys import KeyRefused
from app.config import load_settings
from app.errors import InvalidRequest, KeyNotFound
from tests.worker_process import REPO


def cli(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", ""), "DATABASE_URL": database_url}
    return subprocess.run(
        [sys.executable, "-m", "app.cli", "keys", *args],
        cwd=REPO,
        env={**env, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def client(any_database_url: str) -> ChatClient:
    return ChatClient(load_settings(database_url=any_database_url), enqueue=lambda _cid: None)


def test_keys_are_made_shown_once_listed_and_revoked_from_the_command_line(
    database_url: str,
) -> None:
    made = cli(database_url, "create", "--owner", "alice", "--name", "billing app")
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    assert key.startswith("cwk_") and "shown this once" in made.stderr
    listed = cli(database_url, "list", "--json")
    (row,) = json.loads(listed.stdout)
    assert (row["owner"], row["name"], row["revoked_at"]) == ("alice", "billing app", None)
    assert key not in listed.stdout  # never the secret again
    client = ChatClient(load_settings(database_url=database_url), enqueue=lambda _cid: None)
    assert client.admin.owner_of_key(key) == "alice"
    revoked = cli(database_url, "revoke", row["id"])
    assert revoked.returncode == 0 and "revoked" in revoked.stdout
    with pytest.raises(KeyRefused) as refused:
        client.admin.owner_of_key(key)
    assert refused.value.code == "api_key_revoked"
    assert "revoked" in cli(database_url, "list").stdout
    # Only the hash is stored.
    with client.engine.connect() as connection:
        stored = connection.execute(text("SELECT secret_sha256 FROM api_keys")).scalar_one()
    assert stored not in key and len(stored) == 64
    client.close()


def test_revoking_an_unknown_key_says_so(database_url: str) -> None:
    for bad in (str(uuid.uuid4()), "not-a-key-id"):
        result = cli(database_url, "revoke", bad)
        assert result.returncode == 2
        assert "no API key" in result.stderr


@pytest.mark.parametrize(
    "presented",
    ["", "cwk_", "cwk_nothex_secret", "sk-123", "cwk_" + "0" * 32 + "_", "cwk_" + "0" * 32 + "_x"],
)
def test_a_malformed_or_unknown_key_is_refused(client: ChatClient, presented: str) -> None:
    with pytest.raises(KeyRefused) as refused:
        client.admin.owner_of_key(presented)
    assert refused.value.code == "invalid_api_key"


def test_a_key_with_the_right_id_and_a_wrong_secret_is_refused(client: ChatClient) -> None:
    view, key = client.admin.create_key("alice")
    with pytest.raises(KeyRefused):
        client.admin.owner_of_key(key[:-2] + ("AA" if not key.endswith("AA") else "BB"))
    assert client.admin.owner_of_key(key) == "alice"
    assert client.admin.revoke_key(view.id).revoked_at is not None
    assert client.admin.revoke_key(view.id).revoked_at is not None  # twice: harmless


@pytest.mark.parametrize("owner", ["", "  ", "x" * 201, "tab\there"])
def test_a_bad_owner_name_is_refused_and_nothing_is_written(client: ChatClient, owner: str) -> None:
    with pytest.raises(InvalidRequest):
        client.admin.create_key(owner)
    assert client.admin.list_keys() == []
    with pytest.raises(KeyNotFound):
        client.admin.revoke_key(uuid.uuid4())


def test_an_operator_key_is_made_from_the_command_line_and_cannot_be_forged(
    database_url: str,
) -> None:
    made = cli(database_url, "create", "--operator", "ana", "--name", "on call")
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip()
    assert key.startswith("cwo_") and "operator 'ana'" in made.stderr
    listed = json.loads(cli(database_url, "list", "--json").stdout)
    assert [(row["owner"], row["operator"]) for row in listed] == [("ana", True)]
    assert "operator ana" in cli(database_url, "list").stdout
    client = ChatClient(load_settings(database_url=database_url), enqueue=lambda _cid: None)
    assert client.admin.owner_of_key(key) == "ana"
    # the prefix says the kind, and the row must agree: neither kind passes as the other
    owner_key = client.admin.create_key("bob")[1]
    for forged in ("cwk_" + key.removeprefix("cwo_"), "cwo_" + owner_key.removeprefix("cwk_")):
        with pytest.raises(KeyRefused) as refused:
            client.admin.owner_of_key(forged)
        assert refused.value.code == "invalid_api_key"
    both = cli(database_url, "create", "--operator", "ana", "--owner", "bob")
    assert both.returncode == 2 and "not allowed with" in both.stderr
    client.close()
