// One chat of the AI SDK as a web page holds it (`AbstractChat` with `DefaultChatTransport`, the
// classes `useChat` is made of, from the `ai` package of the npm registry), driven by a test over
// stdin/stdout, one JSON object per line.
//
//   node driver.mjs <api base url> <api key> <chat id> [<JSON body: the chat's setup>]
//
// Commands (each may carry an `id`, echoed in its reply):
//   {"op": "send", "text": "..."}            sendMessage; replies "done" when the stream ends
//   {"op": "send", ..., "files": [...]}      with FileUIParts ({type, mediaType, filename, url})
//   {"op": "send", ..., "wait": false}        replies "started" at once, "done" later
//   {"op": "send", ..., "dropAfter": "text-delta"}  the connection breaks (a TypeError
//                                            "network error", as a browser's fetch gives) right
//                                            after the first chunk of that type
//   {"op": "edit", "messageId", "text"}      sendMessage({text, messageId}): an edit, "done"
//   {"op": "regenerate", "messageId"?}       regenerate(): a new answer, "done"
//   {"op": "resume"}                         resumeStream (GET .../stream): "done"
//   {"op": "approve", "approvalId", "approved", "reason"}  addToolApprovalResponse, then
//                                            sendMessage(): "done"
//   {"op": "output", "toolCallId", "tool", "output"}  addToolOutput, then sendMessage(): "done"
//   {"op": "stop"}                           stop() (drops the connection) and POST .../stop
//                                            (the real cancel): "stopped" with its body
//   {"op": "exit"}
// Reports: every chunk read ({"op": "chunk", "chunk"}), every HTTP answer ({"op": "http"}), and
// with "done": the chat's status, error and messages, and onFinish's last call.
import { AbstractChat, DefaultChatTransport } from "ai";
import readline from "node:readline";

const [base, key, chatId, setup] = process.argv.slice(2);
const api = `${base}/v1/ai-sdk/chat`;
const headers = { Authorization: `Bearer ${key}` };

function report(object) {
  process.stdout.write(JSON.stringify(object) + "\n");
}

class State {
  constructor() {
    this.status = "ready";
    this.error = undefined;
    this.messages = [];
  }
  pushMessage(message) {
    this.messages = [...this.messages, message];
  }
  popMessage() {
    this.messages = this.messages.slice(0, -1);
  }
  replaceMessage(index, message) {
    this.messages = this.messages.map((m, i) => (i === index ? message : m));
  }
  snapshot(thing) {
    return structuredClone(thing);
  }
}

let dropAfter = null; // the chunk type after which the next connection breaks

// fetch, with every chunk of a stream reported as it passes, and the drop armed by a command.
async function tracedFetch(url, init) {
  const response = await fetch(url, init);
  report({ op: "http", method: init?.method ?? "GET", url: String(url), status: response.status });
  if (!response.body || response.status !== 200) return response;
  const drop = dropAfter;
  dropAfter = null;
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  const encoder = new TextEncoder();
  let pending = "";
  let broken = false;
  const body = new ReadableStream({
    async pull(controller) {
      if (broken) {
        await reader.cancel().catch(() => {});
        controller.error(new TypeError("network error"));
        return;
      }
      const { value, done } = await reader.read();
      if (done) {
        controller.close();
        return;
      }
      pending += decoder.decode(value, { stream: true });
      let passed = "";
      let cut;
      while ((cut = pending.search(/\r?\n\r?\n/)) !== -1) {
        const event = pending.slice(0, cut);
        pending = pending.slice(cut).replace(/^\r?\n\r?\n/, "");
        passed += event + "\n\n";
        for (const line of event.split(/\r?\n/)) {
          if (!line.startsWith("data:")) continue;
          const data = line.slice(5).trim();
          if (data === "[DONE]") {
            report({ op: "chunk", chunk: "[DONE]" });
            continue;
          }
          const chunk = JSON.parse(data);
          report({ op: "chunk", chunk });
          if (drop && chunk.type === drop) broken = true;
        }
        if (broken) break;
      }
      controller.enqueue(encoder.encode(passed));
    },
    cancel(reason) {
      return reader.cancel(reason);
    },
  });
  return new Response(body, { status: response.status, headers: response.headers });
}

let finished = null;
class Chat extends AbstractChat {
  constructor() {
    super({
      id: chatId,
      state: new State(),
      transport: new DefaultChatTransport({
        api,
        headers,
        body: setup ? JSON.parse(setup) : {},
        fetch: tracedFetch,
      }),
      onFinish: ({ isAbort, isDisconnect, isError, finishReason }) => {
        finished = { isAbort, isDisconnect, isError, finishReason: finishReason ?? null };
      },
      onError: () => {},
    });
  }
}

const chat = new Chat();

function done(id, extra = {}) {
  report({
    op: "done",
    id,
    status: chat.status,
    error: chat.error ? String(chat.error.message ?? chat.error) : null,
    messages: chat.messages,
    finished,
    ...extra,
  });
}

async function run(command) {
  const { id, op } = command;
  finished = null;
  switch (op) {
    case "send": {
      dropAfter = command.dropAfter ?? null;
      const message = command.files
        ? { text: command.text, files: command.files }
        : { text: command.text };
      const sent = chat.sendMessage(message);
      if (command.wait === false) {
        report({ op: "started", id });
        sent.then(() => done(id));
        return;
      }
      await sent;
      return done(id);
    }
    case "edit":
      await chat.sendMessage({ text: command.text, messageId: command.messageId });
      return done(id);
    case "regenerate":
      await chat.regenerate(command.messageId ? { messageId: command.messageId } : {});
      return done(id);
    case "resume":
      await chat.resumeStream();
      return done(id);
    case "approve":
      await chat.addToolApprovalResponse({
        id: command.approvalId,
        approved: command.approved,
        reason: command.reason,
      });
      await chat.sendMessage();
      return done(id);
    case "output":
      await chat.addToolOutput({
        tool: command.tool,
        toolCallId: command.toolCallId,
        output: command.output,
      });
      await chat.sendMessage();
      return done(id);
    case "stop": {
      await chat.stop();
      const response = await fetch(`${api}/${encodeURIComponent(chatId)}/stop`, {
        method: "POST",
        headers,
      });
      return report({ op: "stopped", id, status: response.status, body: await response.json() });
    }
    case "exit":
      process.exit(0);
    default:
      report({ op: "error", id, error: `unknown op ${op}` });
  }
}

const lines = readline.createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  const command = JSON.parse(line);
  const running = run(command).catch((error) =>
    report({ op: "error", id: command.id, error: String(error?.stack ?? error) }),
  );
  if (command.op !== "send" || command.wait !== false) await running;
}
