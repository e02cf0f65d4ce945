"""`chatworker demo`: one chat turn with tools, end to end, on the embedded defaults (an SQLite
file, an in-process queue and worker, the demo's MCP server, the offline demo model), as it runs.
"""

from __future__ import annotations

import json
import os
import sys

DEMO_QUESTION = "What does the Northwind refund policy say about used tents?"
DEMO_TOOLS = ("search_docs", "calculate", "current_time")


def run_demo(message: str, model: str | None, timeout: float) -> int:
    """Migrate, start an in-process worker, run one turn, print it as it happens; the exit code."""
    use_demo_tools_by_default()
    import dramatiq

    from app.client import ChatClient
    from app.config import get_settings
    from app.db import shown
    from app.migrate import upgrade
    from app.printing import follow
    from app.queue import ring

    settings = get_settings()
    upgrade(settings.database_url)
    from app.worker import actors

    worker = dramatiq.Worker(actors.broker, worker_threads=2, worker_timeout=100)
    worker.start()
    # The doorbell goes to this process's own worker: with REDIS_URL unset nobody else reads it.
    client = ChatClient(settings, enqueue=lambda cid: ring(cid, actors.broker))
    try:
        offered = {tool.name for tool in client.admin.list_tools()}
        tools = [name for name in DEMO_TOOLS if name in offered] or sorted(offered)
        chosen = model or settings.model
        print(f"model {chosen}; tools {', '.join(tools) or '(none)'}")
        print(f"database {shown(settings.database_url)}")
        conversation_id = client.create_conversation(model=chosen, tools=tools)
        client.submit_message(conversation_id, message)
        print(f"conversation {conversation_id}")
        view = follow(client, conversation_id, sys.stdout, timeout=timeout)
    finally:
        worker.stop()
        actors.stop_host()
        client.close()
    return 0 if view.status == "idle" else 1


def use_demo_tools_by_default() -> None:
    """The demo's embedded default: its own MCP server, unless CHATWORKER_MCP_SERVERS is set."""
    if os.environ.get("CHATWORKER_MCP_SERVERS"):
        return
    from app.demo.mcp_server import server_config

    config = {"mcpServers": {"demo-tools": server_config()}}
    os.environ["CHATWORKER_MCP_SERVERS"] = json.dumps(config)
