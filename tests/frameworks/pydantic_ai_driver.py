"""One run of pydantic-ai with its defaults against this server, in its own environment
(`pydantic_ai.txt`): `python pydantic_ai_driver.py BASE_URL KEY MODEL MODE QUESTION API` prints one
JSON line, {"final_output": ...}.

MODE: `tool_loop` (`Agent.run`, one tool), `streamed` (`Agent.run_stream_events`, every event
read) or `structured` (`output_type`: a pydantic model, which pydantic-ai asks for as one function
tool with `tool_choice: required`). API: `responses` (`OpenAIResponsesModel`) or `chat`
(`OpenAIChatModel`, what `openai:` model names use). Nothing but the base URL, the key and the
model is set."""

import asyncio
import json
import sys

from pydantic import BaseModel
from pydantic_ai import Agent, AgentRunResultEvent
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers.openai import OpenAIProvider
from weather import Forecast, get_weather


async def main(argv: list[str]) -> None:
    base_url, key, model, mode, question, api = argv
    provider = OpenAIProvider(base_url=base_url, api_key=key)
    agent = Agent(
        (OpenAIChatModel if api == "chat" else OpenAIResponsesModel)(model, provider=provider),
        instructions="Answer with the weather.",
        tools=[get_weather],
        output_type=Forecast if mode == "structured" else str,
    )
    if mode == "streamed":
        output = None
        async with agent.run_stream_events(question) as events:
            async for event in events:
                if isinstance(event, AgentRunResultEvent):
                    output = event.result.output
    else:
        output = (await agent.run(question)).output
    if isinstance(output, BaseModel):
        output = output.model_dump()
    print(json.dumps({"final_output": output}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:7]))
