"""The deployment files of `deploy/`, checked with what runs here (no container engine, no
cluster, no systemd as PID 1): every Kubernetes manifest against the API's schema
(`kubernetes-validate`, offline), the systemd units by `systemd-analyze verify` (their paths
pointed at this checkout's virtualenv), every `chatworker` command they run by the real command
line's parser, the probes against the routes that answer them, and the shutdown timings against
the worker's own grace. Building the image and starting the compose file need a container engine:
not here (see docs/OPERATIONS.md)."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from app.cli import _parser
from app.config import load_settings

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
KUBERNETES_VERSION = "1.30"
DEFAULT_GRACE = load_settings().shutdown_grace_seconds


def manifests() -> list[dict[str, Any]]:
    found = []
    for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        found += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    return found


def by_kind(kind: str, name: str) -> dict[str, Any]:
    (found,) = [m for m in manifests() if m["kind"] == kind and m["metadata"]["name"] == name]
    return found


def container(manifest: dict[str, Any]) -> dict[str, Any]:
    spec = manifest["spec"]
    if manifest["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    (found,) = spec["template"]["spec"]["containers"]
    return dict(found)


def parses(arguments: list[str]) -> None:
    """The real CLI accepts these arguments (a typo'd flag exits 2)."""
    _parser().parse_args(arguments)


# --- Kubernetes ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "manifest", manifests(), ids=lambda m: f"{m['kind']}/{m['metadata']['name']}"
)
def test_every_kubernetes_manifest_is_valid_for_the_api(manifest: dict[str, Any]) -> None:
    kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)


def test_the_kubernetes_objects_are_all_there_and_run_real_commands() -> None:
    kinds = {(m["kind"], m["metadata"]["name"]) for m in manifests()}
    assert kinds == {
        ("ConfigMap", "chatworker"),
        ("Job", "chatworker-migrate"),
        ("Deployment", "chatworker-api"),
        ("Service", "chatworker-api"),
        ("Deployment", "chatworker-worker"),
        ("CronJob", "chatworker-janitor"),
        ("CronJob", "chatworker-prune"),
    }
    for manifest in manifests():
        if manifest["kind"] in ("Deployment", "Job", "CronJob"):
            parses(container(manifest)["args"])


def test_the_api_probes_ask_the_routes_that_answer_them() -> None:
    from app.api import create_app

    api = container(by_kind("Deployment", "chatworker-api"))
    paths = set(create_app(load_settings(api_auth=("none",))).openapi()["paths"])
    assert api["readinessProbe"]["httpGet"]["path"] == "/v1/ready" in paths
    assert api["livenessProbe"]["httpGet"]["path"] == "/v1/health" in paths


def test_the_worker_s_liveness_is_its_hosts_heartbeat_and_it_may_drain_before_a_kill() -> None:
    config = by_kind("ConfigMap", "chatworker")["data"]
    worker = by_kind("Deployment", "chatworker-worker")
    probe = container(worker)["livenessProbe"]["httpGet"]
    assert probe["path"] == "/healthz"  # app/telemetry/exposition.py
    ports = {p["name"]: p["containerPort"] for p in container(worker)["ports"]}
    assert ports[probe["port"]] == int(config["CHATWORKER_METRICS_PORT"])
    grace = float(config["CHATWORKER_SHUTDOWN_GRACE_SECONDS"])
    # the drain: the grace, then releasing and re-enqueueing what is left (seconds more)
    assert worker["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= grace + 20


# --- systemd ------------------------------------------------------------------------------------


def units() -> list[Path]:
    return sorted((DEPLOY / "systemd").glob("chatworker-*"))


def unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(path.read_text())
    return parser


def test_the_worker_unit_drains_before_it_is_killed() -> None:
    service = unit(DEPLOY / "systemd" / "chatworker-worker.service")["Service"]
    assert service["KillMode"] == "mixed"  # SIGTERM to the main process, SIGKILL to all later
    assert float(service["TimeoutStopSec"]) >= DEFAULT_GRACE + 20
    assert service["Restart"] == "always"


@pytest.mark.parametrize("path", units(), ids=lambda p: p.name)
def test_every_unit_runs_a_real_command_and_systemd_accepts_it(path: Path, tmp_path: Path) -> None:
    parsed = unit(path)
    if "Service" in parsed:
        for key in ("ExecStartPre", "ExecStart"):
            if key in parsed["Service"]:
                program, *arguments = parsed["Service"][key].split()
                assert program == "/opt/chatworker/bin/chatworker"
                parses(arguments)
    analyze = shutil.which("systemd-analyze")
    assert analyze is not None, "systemd-analyze (Debian's systemd package) checks the units"
    # Pointed at this checkout and this user; the settings file is optional here.
    chatworker = str(Path(sys.executable).with_name("chatworker"))
    for each in units():
        text = (
            each.read_text()
            .replace("/opt/chatworker/bin/chatworker", chatworker)
            .replace("User=chatworker", "User=root")
            .replace("Group=chatworker", "Group=root")
            .replace("EnvironmentFile=/etc", "EnvironmentFile=-/etc")
        )
        (tmp_path / each.name).write_text(text)
    checked = subprocess.run(
        [analyze, "verify", str(tmp_path / path.name)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert checked.returncode == 0, checked.stderr


# --- compose and the image ----------------------------------------------------------------------


def test_the_compose_file_runs_every_role_with_real_commands() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {
        "postgres",
        "redis",
        "migrate",
        "api",
        "worker",
        "janitor",
        "pruner",
    }
    for name in ("migrate", "api", "worker"):
        parses(services[name]["command"])
    assert "chatworker cleanup" in " ".join(services["janitor"]["entrypoint"])
    assert "chatworker prune" in " ".join(services["pruner"]["entrypoint"])
    assert services["api"]["depends_on"]["migrate"]["condition"] == (
        "service_completed_successfully"
    )
    worker = services["worker"]
    assert int(worker["stop_grace_period"].rstrip("s")) >= DEFAULT_GRACE + 20
    port = worker["environment"]["CHATWORKER_METRICS_PORT"]
    assert f"127.0.0.1:{port}/healthz" in " ".join(worker["healthcheck"]["test"])
    assert "/v1/ready" in " ".join(services["api"]["healthcheck"]["test"])


def test_the_image_copies_what_the_package_needs() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    copied = [
        part
        for line in dockerfile.splitlines()
        if line.startswith("COPY ") and "--from" not in line
        for part in line.split()[1:-1]
    ]
    assert copied, "the Dockerfile copies the sources"
    for part in copied:
        assert (REPO / part).exists(), part
    assert 'ENTRYPOINT ["chatworker"]' in dockerfile
