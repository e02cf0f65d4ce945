// One run of the AI SDK's OpenAI provider with its defaults against this server (`ai` 7 and
// `@ai-sdk/openai` 4 from the npm registry, on the Node 22 of its `node` package), driven by
// tests/api/test_frameworks.py:
//
//   node provider.mjs <base url> <key> <model> <mode> <question> <api>
//
// prints one JSON line, {"final_output": ...}. API: `responses` (`openai.responses(model)`, the
// provider's default) or `chat` (`openai.chat(model)`). MODE: `tool_loop` (generateText with one
// tool the SDK executes, `stopWhen: stepCountIs(5)`), `streamed` (streamText, the same, every
// part read) or `structured` (generateText with `output: Output.object`). Nothing but the base
// URL, the key and the model is set: the SDK sends the whole history on each step, as it does
// by default.
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, Output, stepCountIs, streamText, tool } from "ai";
import { z } from "zod";

const [baseURL, apiKey, modelName, mode, question, api] = process.argv.slice(2);
const openai = createOpenAI({ baseURL, apiKey });
const model = api === "chat" ? openai.chat(modelName) : openai.responses(modelName);

// The tool every framework driver gives its agent (tests/frameworks/weather.py).
const getWeather = tool({
  description: "The weather in a city.",
  inputSchema: z.object({ city: z.string() }),
  execute: async ({ city }) => `Rain all day in ${city}.`,
});
const forecast = z.object({ city: z.string(), rain: z.boolean() });

const setup = {
  model,
  system: "Answer with the weather.",
  prompt: question,
  maxRetries: 0,
};
let output;
if (mode === "structured") {
  const result = await generateText({ ...setup, output: Output.object({ schema: forecast }) });
  output = result.output;
} else if (mode === "streamed") {
  const result = streamText({
    ...setup,
    tools: { get_weather: getWeather },
    stopWhen: stepCountIs(5),
    onError: ({ error }) => {
      throw error;
    },
  });
  for await (const _part of result.fullStream) {
    // every part read, as a page streaming it would
  }
  output = await result.text;
} else {
  const result = await generateText({
    ...setup,
    tools: { get_weather: getWeather },
    stopWhen: stepCountIs(5),
  });
  output = result.text;
}
process.stdout.write(JSON.stringify({ final_output: output }) + "\n");
