"""One run of LangChain's agent with its defaults against this server, in its own environment
(`langchain.txt`): `python langchain_driver.py BASE_URL KEY MODEL MODE QUESTION API` prints one JSON
line, {"final_output": ...}.

API: `chat` is `ChatOpenAI`'s default (Chat Completions), `responses` sets
`use_responses_api=True`. MODE: `tool_loop` (`create_agent(...).invoke`,
one tool), `streamed` (`.stream`, every chunk read, the model streaming) or `structured`
(`ChatOpenAI.with_structured_output`, a pydantic model). Nothing but the base URL, the key, the
model (and, for `responses`, the Responses API) is set."""

import json
import sys

from langchain.agents import create_agent
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from weather import Forecast, get_weather


def main(argv: list[str]) -> None:
    base_url, key, model, mode, question, api = argv
    chosen = {"use_responses_api": True} if api == "responses" else {}
    chat = ChatOpenAI(
        model=model,
        base_url=base_url,
        api_key=key,
        max_retries=0,
        streaming=mode == "streamed",
        **chosen,
    )
    output: object
    if mode == "structured":
        output = chat.with_structured_output(Forecast).invoke(question).model_dump()
    else:
        agent = create_agent(chat, [tool(get_weather)], system_prompt="Answer with the weather.")
        request = {"messages": [{"role": "user", "content": question}]}
        if mode == "streamed":
            state = list(agent.stream(request, stream_mode="values"))[-1]
        else:
            state = agent.invoke(request)
        output = state["messages"][-1].text
    print(json.dumps({"final_output": output}))


if __name__ == "__main__":
    main(sys.argv[1:7])
