"""One run of the OpenAI Agents SDK with its defaults against this server, in the SDK's own
environment (`agents.txt`): `python agents_sdk.py BASE_URL KEY MODEL MODE QUESTION API` prints one
JSON line, {"final_output": ...}.

MODE: `tool_loop` (`Runner.run`, one function tool), `streamed` (`Runner.run_streamed`, every
event read) or `structured` (`output_type`: a pydantic model). API: `responses`
(`OpenAIResponsesModel`, the SDK's default) or `chat` (`OpenAIChatCompletionsModel`). Nothing
but the base URL, the key and the model is set: the SDK sends the whole history on each request,
as it does by default. Its tracing is off (it would export to OpenAI's servers): here, and by
`OPENAI_AGENTS_DISABLE_TRACING=1` in its environment."""

import asyncio
import json
import sys

from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI
from pydantic import BaseModel
from weather import Forecast, get_weather


async def main(argv: list[str]) -> None:
    base_url, key, model, mode, question, api = argv
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=base_url, api_key=key, max_retries=0)
    agent = Agent(
        name="weather",
        instructions="Answer with the weather.",
        model=(OpenAIChatCompletionsModel if api == "chat" else OpenAIResponsesModel)(
            model=model, openai_client=client
        ),
        tools=[function_tool(get_weather)],
        output_type=Forecast if mode == "structured" else None,
    )
    if mode == "streamed":
        result = Runner.run_streamed(agent, question)
        async for _ in result.stream_events():
            pass
    else:
        result = await Runner.run(agent, question)
    output = result.final_output
    if isinstance(output, BaseModel):
        output = output.model_dump()
    print(json.dumps({"final_output": output}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:7]))
