"""Agent frameworks, their defaults untouched, against `/v1/responses` and `/v1/chat/completions`
of a real API process and worker: each framework runs in an environment of its own
(`tests/frameworks/`, installed by `scripts/dev test` into `.venv-frameworks/`), its tool loop
sending the whole history on every request, as frameworks do unless told to chain responses."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from app.testing.fake_llm import FakeLLMServer
from tests.api.conftest import Deployment, owner_name
from tests.worker_process import FAKE_MODEL, REPO

pytestmark = pytest.mark.xdist_group("api-frameworks")

FRAMEWORKS = REPO / ".venv-frameworks"
DRIVERS = REPO / "tests" / "frameworks"


#: The AI SDK's OpenAI provider: its folder (npm packages, Node 22 among them) and driver.
AI_SDK = REPO / "tests" / "aisdk_openai"


def interpreter(name: str) -> Path:
    """The framework's Python, or Node 22 for the AI SDK; skipped when set-up did not run."""
    if name == "ai-sdk":
        found = AI_SDK / "node_modules" / ".bin" / "node"
        hint = "npm ci --prefix tests/aisdk_openai"
    else:
        found = FRAMEWORKS / name / "bin" / "python"
        hint = f"tests/frameworks/{name}.txt"
    if not found.exists():
        pytest.skip(f"{found} is missing: scripts/dev test installs it ({hint})")
    return found


def run_framework(name: str, driver: Path, *args: str) -> dict[str, Any]:
    """One run of `driver` in the framework's environment; its last line of output, as JSON."""
    result = subprocess.run(
        [str(interpreter(name)), str(driver), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OPENAI_AGENTS_DISABLE_TRACING": "1"},  # (the Agents SDK exports else)
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


#: Each framework: its environment (tests/frameworks/NAME.txt, or the AI SDK's folder) and its
#: driver.
DRIVEN = {
    "agents-sdk": ("agents", DRIVERS / "agents_sdk.py"),
    "pydantic-ai": ("pydantic_ai", DRIVERS / "pydantic_ai_driver.py"),
    "langchain": ("langchain", DRIVERS / "langchain_driver.py"),
    "ai-sdk": ("ai-sdk", AI_SDK / "provider.mjs"),
}


#: The APIs each framework is driven through: its default first.
APIS = ["responses", "chat"]


def run(framework: str, shared_api: Deployment, mode: str, question: str, api: str) -> Any:
    name, driver = DRIVEN[framework]
    key = shared_api.key(owner_name("frameworks"))
    url = f"{shared_api.apis[0].url}/v1"
    found = run_framework(name, driver, url, key, FAKE_MODEL, mode, question, api)
    return found["final_output"]


@pytest.mark.parametrize("framework", DRIVEN)
@pytest.mark.parametrize("mode", ["tool_loop", "streamed"])
@pytest.mark.parametrize("api", APIS)
def test_a_framework_runs_its_tool_loop_with_its_defaults(
    shared_api: Deployment, fake_llm: FakeLLMServer, mode: str, framework: str, api: str
) -> None:
    """A run with a function tool: the model calls it, the framework runs it and sends the whole
    history back with its output, the model answers."""
    token = uuid.uuid4().hex
    call = {"id": f"c_{token[:8]}", "name": "get_weather", "arguments": {"city": "Oslo"}}
    fake_llm.script(
        [{"tool_calls": [call]}, {"text": "It rains in Oslo all day."}],
        match=token,
        mode="by_iteration",
    )
    assert run(framework, shared_api, mode, f"Weather in Oslo? {token}", api) == (
        "It rains in Oslo all day."
    )
    sent = fake_llm.requests(match=token)[-1]["body"]["messages"]
    assert [m["role"] for m in sent if m["role"] != "system"] == ["user", "assistant", "tool"]
    assert "Rain all day in Oslo." in json.dumps(sent[-1]["content"])


@pytest.mark.parametrize("framework", ["agents-sdk", "langchain", "ai-sdk"])
@pytest.mark.parametrize("api", APIS)
def test_a_framework_gets_structured_output_through_a_json_schema(
    shared_api: Deployment, fake_llm: FakeLLMServer, framework: str, api: str
) -> None:
    """The Agents SDK's `output_type`, LangChain's `with_structured_output` and the AI SDK's
    `Output.object` ask for a JSON Schema (`text.format`, `response_format`); the answer is
    parsed."""
    token = uuid.uuid4().hex
    fake_llm.script([{"text": json.dumps({"city": "Oslo", "rain": True})}], match=token)
    assert run(framework, shared_api, "structured", f"Oslo? {token}", api) == {
        "city": "Oslo",
        "rain": True,
    }


@pytest.mark.parametrize("api", APIS)
def test_pydantic_ai_gets_structured_output_through_a_required_function_tool(
    shared_api: Deployment, fake_llm: FakeLLMServer, api: str
) -> None:
    """`output_type`: pydantic-ai offers one function tool, `final_result`, with `tool_choice:
    required`; the model calls it and pydantic-ai reads its arguments as the output."""
    token = uuid.uuid4().hex
    final = {
        "id": f"f_{token[:8]}",
        "name": "final_result",
        "arguments": {"city": "Oslo", "rain": True},
    }
    fake_llm.script([{"tool_calls": [final]}, {"text": "done"}], match=token, mode="by_iteration")
    assert run("pydantic-ai", shared_api, "structured", f"Oslo? {token}", api) == {
        "city": "Oslo",
        "rain": True,
    }
    (first, *_) = fake_llm.requests(match=token)
    assert first["body"]["tool_choice"] == "required"
