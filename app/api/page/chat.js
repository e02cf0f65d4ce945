// The chat page: conversations over the /v1 API, each shown from its event stream.
//
// Rendering is a pure function of the stream's events and idempotent: committed events apply once
// by their `seq`, committed messages are keyed by message seq, a partial reply is keyed by its
// message seq (replaced by its `message.committed`, dropped by `message.discarded`, its deltas
// applied once by `index` and placed by `offset`). So a reload replays from the start and shows
// the same page, and a dropped connection resumes from the last SSE id with nothing twice.

import { ResumableStream, readProblem } from "./sse.js";

const $ = (id) => document.getElementById(id);
const els = {
  toggleList: $("toggle-list"),
  sidebar: $("sidebar"),
  auth: $("auth"),
  authForm: $("auth-form"),
  token: $("token"),
  tokenForget: $("token-forget"),
  newConversation: $("new-conversation"),
  list: $("conversation-list"),
  more: $("more-conversations"),
  listEmpty: $("list-empty"),
  title: $("chat-title"),
  meta: $("chat-meta"),
  status: $("status"),
  connection: $("connection"),
  retry: $("retry"),
  cancel: $("cancel"),
  error: $("error"),
  errorText: $("error-text"),
  errorClose: $("error-close"),
  newChat: $("new-chat"),
  tools: $("tools"),
  instructions: $("instructions"),
  log: $("log"),
  transcript: $("transcript"),
  live: $("live"),
  composer: $("composer"),
  input: $("message-input"),
  onBusy: $("on-busy"),
  send: $("send"),
};

const TOKEN_KEY = "chatworker.token";
const BUSY = new Set(["processing", "tool_loop"]);
const NO_MESSAGES = 2147483647; // ?after_seq= that returns the conversation without its transcript

const state = {
  token: sessionStorage.getItem(TOKEN_KEY) || "",
  tools: null, // GET /v1/tools, once loaded
  list: [],
  listNext: null,
  view: null, // the open conversation (a View), or null: a new one
  sending: false,
};

// --- the API ------------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(problem) {
    super(problem.detail);
    this.status = problem.status;
    this.code = problem.code;
    this.problem = problem;
  }
}

function authHeaders() {
  return state.token ? { Authorization: `Bearer ${state.token}` } : {};
}

/** A JSON request; refusals throw `ApiError` with the problem's `detail`. Network failures and
 * 503s are retried `retries` times (only for requests safe to repeat: idempotent ones). */
async function api(method, path, { body, headers = {}, retries = 0 } = {}) {
  const init = { method, headers: { Accept: "application/json", ...authHeaders(), ...headers } };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  for (let attempt = 0; ; attempt++) {
    let response;
    try {
      response = await fetch(path, init);
    } catch {
      if (attempt < retries) {
        await new Promise((resolve) => setTimeout(resolve, 500 * (attempt + 1)));
        continue;
      }
      throw new ApiError({
        status: 0,
        code: "network",
        detail: "The server did not answer. Check the connection and try again.",
      });
    }
    if (response.status === 503 && attempt < retries) {
      const wait = Number(response.headers.get("Retry-After")) || 1;
      await new Promise((resolve) => setTimeout(resolve, wait * 1000));
      continue;
    }
    if (!response.ok) throw new ApiError(await readProblem(response));
    if (response.status === 204) return null;
    return response.json();
  }
}

function newId() {
  if (crypto.randomUUID) return crypto.randomUUID(); // secure contexts only (https, localhost)
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  bytes[6] = (bytes[6] & 0x0f) | 0x40;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  const hex = [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
  const parts = [hex.slice(0, 8), hex.slice(8, 12), hex.slice(12, 16), hex.slice(16, 20)];
  return [...parts, hex.slice(20)].join("-");
}

// --- errors -------------------------------------------------------------------------------------

function showError(text) {
  els.errorText.textContent = text;
  els.error.hidden = false;
}

function clearError() {
  els.error.hidden = true;
  els.errorText.textContent = "";
}

function handleError(error) {
  const detail = error instanceof ApiError ? error.message : String(error);
  showError(detail);
  if (error instanceof ApiError && error.status === 401) askForToken();
}

function askForToken() {
  els.auth.open = true;
  els.token.focus();
}

// --- the open conversation ----------------------------------------------------------------------

class View {
  constructor(id) {
    this.id = id;
    this.conversation = null; // GET /v1/conversations/{id}, without its transcript
    this.lastSeq = 0; // the last committed event applied
    this.messages = new Map(); // message seq -> element
    this.partials = new Map(); // message seq -> {stream, next, text, calls, element}
    this.turns = new Map(); // the turns queued or running: id -> {number, cancelling}
    this.begun = new Set(); // the turns that started or ended (their message is in the log)
    this.waiting = new Map(); // turn id -> the element of a message queued behind a turn
    this.actions = new Map(); // call id -> the element of what a turn waits for
    this.status = "idle";
    this.outcome = null; // how the last turn ended, when not completed
    this.error = null;
    this.stream = null;
    this.connection = "connecting";
  }
}

function openConversation(id, { focus = true } = {}) {
  if (state.view && state.view.id === id) return;
  closeView();
  clearError();
  const view = new View(id);
  state.view = view;
  els.newChat.hidden = true;
  els.log.hidden = false;
  els.title.textContent = titleFromList(id) || "Conversation";
  els.meta.textContent = "";
  document.title = `${els.title.textContent} – chatworker`;
  renderList();
  render(view);
  if (focus) els.input.focus();
  view.stream = new ResumableStream({
    url: `/v1/conversations/${encodeURIComponent(id)}/stream?until=never`,
    headers: authHeaders,
    onEvent: (event) => onStreamEvent(view, event),
    onState: (connection) => {
      view.connection = connection;
      if (state.view === view) render(view);
    },
    onProblem: (problem) => onStreamProblem(view, problem),
  }).start();
  api("GET", `/v1/conversations/${encodeURIComponent(id)}?after_seq=${NO_MESSAGES}`, { retries: 2 })
    .then((conversation) => {
      view.conversation = conversation;
      if (state.view === view) showHeader(view);
    })
    .catch((error) => {
      if (state.view === view && !(error instanceof ApiError && error.status === 404)) {
        handleError(error); // a 404 is the stream's to report
      }
    });
}

function closeView() {
  const view = state.view;
  if (view && view.stream) view.stream.stop();
  state.view = null;
  els.transcript.replaceChildren();
  els.live.replaceChildren();
}

function showNewChat({ focus = true } = {}) {
  closeView();
  els.newChat.hidden = false;
  els.log.hidden = true;
  els.title.textContent = "New conversation";
  els.meta.textContent = "";
  els.meta.title = "";
  document.title = "chatworker";
  renderList();
  render(null);
  if (focus) els.input.focus();
}

function showHeader(view) {
  const conversation = view.conversation;
  const title = (conversation.context && conversation.context.title) || "Conversation";
  els.title.textContent = title;
  document.title = `${title} – chatworker`;
  const names = conversation.tools;
  const tools =
    names.length === 0
      ? "no tools"
      : names.length <= 4
        ? `tools: ${names.join(", ")}`
        : `tools: ${names.slice(0, 3).join(", ")} and ${names.length - 3} more`;
  els.meta.textContent = `Model ${conversation.model} · ${tools}`;
  els.meta.title = names.join(", ");
}

function onStreamProblem(view, problem) {
  if (state.view !== view) return "stop";
  if (problem.code === "invalid_cursor") {
    resetView(view); // the log does not know our place (a reset database): show it afresh
    return "restart";
  }
  if (problem.status === 503 || problem.status >= 500 || problem.status === 0) return "retry";
  handleError(new ApiError(problem));
  return "stop";
}

function resetView(view) {
  view.lastSeq = 0;
  view.messages.clear();
  view.partials.clear();
  view.turns.clear();
  view.begun.clear();
  view.waiting.clear();
  view.actions.clear();
  view.status = "idle";
  view.outcome = null;
  els.transcript.replaceChildren();
  els.live.replaceChildren();
}

// --- events -------------------------------------------------------------------------------------

function onStreamEvent(view, event) {
  if (state.view !== view) return;
  if (event.type === "stream.end") return;
  const data = JSON.parse(event.data);
  const stick = atBottom();
  if (event.type === "message.delta") onDelta(view, data);
  else if (event.type === "message.discarded") onDiscarded(view, data);
  else onCommitted(view, event.type, data);
  scheduleRender(view, stick);
}

function onCommitted(view, type, event) {
  if (typeof event.seq !== "number" || event.seq <= view.lastSeq) return; // shown already
  view.lastSeq = event.seq;
  if (event.turn_id && type !== "turn.queued" && type !== "turn.cancel_requested") {
    view.begun.add(event.turn_id);
    const waiting = view.waiting.get(event.turn_id);
    if (waiting) waiting.remove(); // its message is committed now (or the turn ended first)
    view.waiting.delete(event.turn_id);
  }
  const turn = event.turn || {};
  const number = turn.number;
  switch (type) {
    case "message.committed":
      commitMessage(view, event.message);
      break;
    case "status.changed":
      view.status = event.status;
      if (event.status !== "failed") view.error = null;
      scheduleListRefresh(); // the list shows each conversation's status
      break;
    case "turn.queued":
      view.turns.set(event.turn_id, { number, cancelling: false });
      scheduleListRefresh();
      break;
    case "turn.started":
    case "turn.resumed":
      if (!view.turns.has(event.turn_id)) {
        view.turns.set(event.turn_id, { number, cancelling: false });
      }
      view.turns.get(event.turn_id).waiting = false;
      if (type === "turn.resumed") {
        addNote(view, event, `Turn ${number} resumed after an interruption.`);
      }
      break;
    case "turn.cancel_requested": {
      const current = view.turns.get(event.turn_id);
      if (current) current.cancelling = true;
      break;
    }
    case "turn.completed":
      view.turns.delete(event.turn_id);
      view.outcome = null;
      scheduleListRefresh();
      break;
    case "turn.failed":
      view.turns.delete(event.turn_id);
      view.outcome = "failed";
      view.error = turn.error || null;
      addNote(view, event, `Turn ${number} failed${turn.error ? `: ${turn.error}` : "."}`);
      scheduleListRefresh();
      break;
    case "turn.cancelled":
      view.turns.delete(event.turn_id);
      view.outcome = "cancelled";
      addNote(view, event, `Turn ${number} was cancelled.`);
      scheduleListRefresh();
      break;
    case "action.required": {
      const current = view.turns.get(event.turn_id) || { number, cancelling: false };
      current.waiting = true;
      view.turns.set(event.turn_id, current);
      showActions(view, event);
      break;
    }
    default:
      break; // a type this page does not know yet: nothing to show
  }
}

// --- what a turn waits for: a question, an approval, a tool this browser runs ------------------

// A tool this page runs itself: the model may ask for the user's time zone and language.
const BROWSER_TOOLS = {
  browser_locale: {
    description: "The user's time zone, language and local time, from their browser.",
    run: () => {
      const options = Intl.DateTimeFormat().resolvedOptions();
      return JSON.stringify({
        timeZone: options.timeZone,
        language: navigator.language,
        localTime: new Date().toString(),
      });
    },
  },
};

function browserToolDefinitions() {
  return Object.entries(BROWSER_TOOLS).map(([name, tool]) => ({
    name,
    description: tool.description,
    parameters: { type: "object", properties: {} },
  }));
}

async function showActions(view, event) {
  let turn;
  try {
    turn = await api("GET", `/v1/turns/${encodeURIComponent(event.turn_id)}`, { retries: 2 });
  } catch (error) {
    handleError(error);
    return;
  }
  if (state.view !== view) return;
  const stick = atBottom();
  for (const action of turn.actions || []) {
    if (view.actions.has(action.call_id)) continue; // drawn already (a replayed event)
    const element = actionElement(view, turn, action);
    view.actions.set(action.call_id, element);
    els.transcript.append(element);
    if (action.kind === "client_tool" && !action.answered && BROWSER_TOOLS[action.name]) {
      runBrowserTool(view, turn, action, element);
    }
  }
  scheduleRender(view, stick);
}

function actionElement(view, turn, action) {
  const attributes = {
    class: `msg action ${action.kind}${action.answered ? " answered" : ""}`,
    "data-role": "action",
    "data-kind": action.kind,
    "data-call-id": action.call_id,
  };
  if (action.kind === "clarification") {
    return h(
      "div",
      { ...attributes, role: "note" },
      spoken("The assistant asks: "),
      h("div", { class: "tool-head", text: "The assistant is asking" }),
      h("div", { class: "text question", text: action.arguments.question || "" }),
      action.answered ? null : h("small", { class: "hint", text: "Your next message answers it." }),
    );
  }
  if (action.kind === "approval") {
    const decided = action.decision ? `You ${action.decision} it.` : null;
    const buttons = action.answered
      ? null
      : h(
          "div",
          { class: "approval-buttons" },
          approvalButton(view, turn, action, true),
          approvalButton(view, turn, action, false),
        );
    return h(
      "div",
      attributes,
      h("div", { class: "tool-head" }, "Approve running ", h("b", { text: action.name }), "?"),
      h("pre", { class: "tool-output", text: shownArguments(JSON.stringify(action.arguments)) }),
      action.reason ? h("p", { class: "reason", text: `Why you are asked: ${action.reason}.` }) : null,
      buttons,
      decided ? h("small", { class: "hint decision", text: decided }) : null,
    );
  }
  return h(
    "div",
    attributes,
    h("div", { class: "tool-head" }, "Runs in your browser: ", h("b", { text: action.name })),
    h("small", {
      class: "hint",
      text: action.answered ? "Done." : BROWSER_TOOLS[action.name] ? "Running…" : "Waiting for it.",
    }),
  );
}

function approvalButton(view, turn, action, approve) {
  const button = h("button", {
    type: "button",
    class: approve ? "approve" : "deny",
    text: approve ? "Approve" : "Deny",
  });
  button.addEventListener("click", () => answerAction(view, turn, action, { approve }));
  return button;
}

async function runBrowserTool(view, turn, action, element) {
  let output;
  try {
    output = BROWSER_TOOLS[action.name].run(action.arguments || {});
  } catch (error) {
    output = `Error: ${error}`;
  }
  await answerAction(view, turn, action, { output: String(output) }, element);
}

async function answerAction(view, turn, action, answer, element = null) {
  const shown = element || view.actions.get(action.call_id);
  for (const button of shown ? shown.querySelectorAll("button") : []) button.disabled = true;
  try {
    const path = `/v1/turns/${encodeURIComponent(turn.id)}/actions`;
    await api("POST", path, { body: { outputs: [{ call_id: action.call_id, ...answer }] }, retries: 2 });
    if (shown) {
      shown.classList.add("answered");
      const hint = shown.querySelector(".hint");
      const text =
        "approve" in answer ? `You ${answer.approve ? "approved" : "denied"} it.` : "Done.";
      if (hint) hint.textContent = text;
      else shown.append(h("small", { class: "hint decision", text }));
      for (const buttons of shown.querySelectorAll(".approval-buttons")) buttons.remove();
    }
    els.input.focus();
  } catch (error) {
    for (const button of shown ? shown.querySelectorAll("button") : []) button.disabled = false;
    handleError(error);
  }
}

function commitMessage(view, message) {
  removePartial(view, message.seq);
  const element = messageElement(message);
  const shown = view.messages.get(message.seq);
  if (shown) shown.replaceWith(element);
  else els.transcript.append(element);
  view.messages.set(message.seq, element);
}

function onDelta(view, delta) {
  if (view.messages.has(delta.message_seq)) return; // committed already: the commit wins
  let partial = view.partials.get(delta.message_seq);
  if (partial && partial.stream !== delta.stream) {
    removePartial(view, delta.message_seq); // a new attempt replaces the old one
    partial = null;
  }
  if (!partial) {
    partial = {
      stream: delta.stream,
      next: 0,
      text: "",
      calls: new Map(),
      element: partialElement(delta.message_seq),
    };
    view.partials.set(delta.message_seq, partial);
    insertPartial(partial.element, delta.message_seq);
  }
  if (delta.index < partial.next) return; // shown already
  partial.next = delta.index + 1;
  for (const fragment of delta.fragments) {
    if (fragment.part === "text") {
      partial.text = placed(partial.text, fragment.offset, fragment.text);
    } else {
      const call = partial.calls.get(fragment.index) || { id: null, name: null, arguments: "" };
      if (fragment.call_id) call.id = fragment.call_id;
      if (fragment.name) call.name = fragment.name;
      call.arguments = placed(call.arguments, fragment.offset, fragment.text);
      partial.calls.set(fragment.index, call);
    }
  }
  fillPartial(partial);
}

function placed(text, offset, piece) {
  return text.slice(0, Math.min(offset, text.length)) + piece;
}

function onDiscarded(view, discarded) {
  const partial = view.partials.get(discarded.message_seq);
  if (partial && (discarded.stream === "*" || discarded.stream === partial.stream)) {
    removePartial(view, discarded.message_seq);
  }
}

function removePartial(view, messageSeq) {
  const partial = view.partials.get(messageSeq);
  if (!partial) return;
  partial.element.remove();
  view.partials.delete(messageSeq);
}

// --- elements -----------------------------------------------------------------------------------

function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") element.className = value;
    else if (name === "text") element.textContent = value;
    else element.setAttribute(name, value === true ? "" : String(value));
  }
  element.append(...children.filter((child) => child !== null && child !== undefined));
  return element;
}

const spoken = (text) => h("span", { class: "visually-hidden", text });

function messageElement(message) {
  const seq = message.seq;
  if (message.role === "user") {
    return h(
      "div",
      { class: "msg user", "data-role": "user", "data-seq": seq },
      spoken("You: "),
      h("div", { class: "text", text: message.content || "" }),
    );
  }
  if (message.role === "assistant") {
    const calls = message.tool_calls || [];
    return h(
      "div",
      {
        class: `msg assistant${message.content ? "" : " calls-only"}`,
        "data-role": "assistant",
        "data-seq": seq,
      },
      spoken("Assistant: "),
      message.content ? h("div", { class: "text", text: message.content }) : null,
      ...calls.map((call) => toolCallElement(callName(call), callArguments(call), call.id, false)),
    );
  }
  if (message.role === "tool") {
    const name = message.tool_name || "a tool";
    return h(
      "div",
      {
        class: `msg tool${message.is_error ? " is-error" : ""}`,
        "data-role": "tool-result",
        "data-seq": seq,
        "data-call-id": message.tool_call_id,
        "data-error": message.is_error ? "true" : null,
      },
      h(
        "div",
        { class: "tool-head" },
        `${message.is_error ? "Error from" : "Result of"} `,
        h("b", { text: name }),
      ),
      h("pre", { class: "tool-output", tabindex: 0, text: message.content || "" }),
    );
  }
  return h(
    "div",
    { class: "msg system", "data-role": "system", "data-seq": seq },
    h("div", { class: "tool-head", text: "Instructions" }),
    h("div", { class: "text", text: message.content || "" }),
  );
}

const callName = (call) => call.name || (call.function && call.function.name) || "tool";
const callArguments = (call) =>
  call.arguments !== undefined ? call.arguments : (call.function && call.function.arguments) || "";

function toolCallElement(name, args, id, partial) {
  return h(
    "div",
    {
      class: `tool-call${partial ? " partial" : ""}`,
      "data-role": "tool-call",
      "data-call-id": id,
      "data-partial": partial ? "true" : null,
    },
    h("span", { class: "tool-head" }, "Calls ", h("b", { text: name || "…" })),
    h("code", { class: "tool-args", text: shownArguments(args) }),
  );
}

function shownArguments(args) {
  if (typeof args !== "string") return JSON.stringify(args);
  try {
    return JSON.stringify(JSON.parse(args));
  } catch {
    return args; // still forming, or not JSON: as it is
  }
}

function partialElement(messageSeq) {
  return h(
    "div",
    {
      class: "msg assistant partial",
      "data-role": "assistant",
      "data-partial": "true",
      "data-message-seq": messageSeq,
      "aria-busy": "true",
    },
    spoken("Assistant (writing): "),
    h("div", { class: "text" }),
    h("div", { class: "calls" }),
  );
}

function insertPartial(element, messageSeq) {
  const after = [...els.live.children].find(
    (child) => child.dataset.role === "waiting" || Number(child.dataset.messageSeq) > messageSeq,
  );
  els.live.insertBefore(element, after || null);
}

function fillPartial(partial) {
  const [, text, calls] = partial.element.children;
  text.textContent = partial.text;
  text.hidden = partial.text === "";
  calls.replaceChildren(
    ...[...partial.calls.entries()]
      .sort(([a], [b]) => a - b)
      .map(([, call]) => toolCallElement(call.name, call.arguments, call.id, true)),
  );
}

/** A message queued behind the running turn is not in the log until its turn starts: show it
 * meanwhile (this tab only; the log has it once the turn starts). */
function showWaiting(view, turn, text) {
  if (state.view !== view || turn.message_seq !== null || view.begun.has(turn.id)) return;
  if (view.waiting.has(turn.id)) return;
  const element = h(
    "div",
    { class: "msg user waiting", "data-role": "waiting", "data-turn-id": turn.id },
    spoken("You (queued): "),
    h("div", { class: "text", text }),
    h("small", { class: "hint", text: "Queued: sent when the current turn ends." }),
  );
  view.waiting.set(turn.id, element);
  els.live.append(element);
  scheduleRender(view, true);
}

function addNote(view, event, text) {
  els.transcript.append(
    h("p", {
      class: `note ${event.type.replace(".", "-")}`,
      "data-role": "turn-note",
      "data-event": event.type,
      "data-event-seq": event.seq,
      text,
    }),
  );
}

// --- status and controls ------------------------------------------------------------------------

let renderPending = false;
let stickToBottom = false;

function scheduleRender(view, stick) {
  stickToBottom = stickToBottom || stick;
  if (renderPending) return;
  renderPending = true;
  queueMicrotask(() => {
    renderPending = false;
    if (state.view === view) render(view);
    if (stickToBottom) els.log.scrollTop = els.log.scrollHeight;
    stickToBottom = false;
  });
}

function atBottom() {
  return els.log.scrollHeight - els.log.scrollTop - els.log.clientHeight < 48;
}

function statusOf(view) {
  if (!view) return ["new", "New conversation: your first message starts it."];
  if (view.connection === "closed") return ["closed", "Not connected"];
  const turns = [...view.turns.values()];
  if (turns.some((turn) => turn.cancelling) && view.status !== "idle") {
    return ["cancelling", "Cancelling…"];
  }
  if (BUSY.has(view.status)) {
    if (view.partials.size) return [view.status, "Answering…"];
    return [view.status, view.status === "tool_loop" ? "Running tools…" : "Thinking…"];
  }
  if (view.status === "failed") return ["failed", `Failed${view.error ? `: ${view.error}` : ""}`];
  if (turns.some((turn) => turn.waiting)) return ["requires_action", "Waiting for your answer"];
  if (turns.length) return ["queued", "Queued…"];
  if (view.outcome === "cancelled") return ["idle", "Ready (the last turn was cancelled)"];
  return ["idle", "Ready"];
}

function render(view) {
  const [code, text] = statusOf(view);
  if (els.status.textContent !== text) els.status.textContent = text;
  els.status.dataset.status = code;
  const busy = Boolean(view) && (view.turns.size > 0 || BUSY.has(view.status));
  const cancelling = code === "cancelling";
  els.cancel.disabled = !busy || cancelling;
  els.retry.hidden = !view || view.status !== "failed" || busy;
  const connection = view ? view.connection : "closed";
  els.connection.dataset.state = connection;
  els.connection.textContent =
    { connecting: "Connecting…", reconnecting: "Reconnecting…" }[connection] || "";
  els.send.disabled = state.sending;
  els.send.setAttribute("aria-busy", state.sending ? "true" : "false");
}

// --- actions ------------------------------------------------------------------------------------

async function send() {
  const text = els.input.value;
  if (!text.trim() || state.sending) {
    els.input.focus();
    return;
  }
  clearError();
  state.sending = true;
  render(state.view);
  try {
    if (!state.view) {
      const id = newId(); // chosen here: a retried create returns the same conversation
      const body = {
        id,
        tools: chosenTools(),
        client_tools: browserToolDefinitions(),
        context: { title: titleOf(text) },
      };
      const instructions = els.instructions.value.trim();
      if (instructions) body.instructions = instructions;
      await api("POST", "/v1/conversations", { body, retries: 2 });
      history.pushState(null, "", `#c=${id}`);
      openConversation(id);
      refreshList();
    }
    const view = state.view;
    const path = `/v1/conversations/${encodeURIComponent(view.id)}/messages`;
    const submitted = await api("POST", path, {
      body: { text, on_busy: els.onBusy.value },
      headers: { "Idempotency-Key": newId() }, // a retried submit runs nothing twice
      retries: 2,
    });
    if (els.input.value === text) els.input.value = "";
    showWaiting(view, submitted.turn, text);
  } catch (error) {
    handleError(error);
  } finally {
    state.sending = false;
    render(state.view);
    els.input.focus();
  }
}

async function cancel() {
  const view = state.view;
  if (!view) return;
  clearError();
  els.cancel.disabled = true;
  els.input.focus(); // the button is disabled now: focus goes where the user types next
  try {
    await api("POST", `/v1/conversations/${encodeURIComponent(view.id)}/cancel`, { retries: 2 });
  } catch (error) {
    handleError(error);
  } finally {
    if (state.view === view) render(view);
  }
}

async function retry() {
  const view = state.view;
  if (!view) return;
  clearError();
  try {
    await api("POST", `/v1/conversations/${encodeURIComponent(view.id)}/retry`);
  } catch (error) {
    handleError(error);
  }
  els.input.focus();
}

function chosenTools() {
  return [...els.tools.querySelectorAll("input[name=tool]:checked")].map((box) => box.value);
}

function titleOf(text) {
  const words = text.trim().split(/\s+/).join(" ");
  return words.length > 80 ? `${words.slice(0, 79)}…` : words;
}

// --- tools and the conversation list ------------------------------------------------------------

async function loadTools() {
  try {
    const tools = (await api("GET", "/v1/tools", { retries: 2 })).data;
    state.tools = tools;
    if (!tools.length) {
      els.tools.replaceChildren(h("p", { class: "hint", text: "The workers offer no tools yet." }));
      return;
    }
    els.tools.replaceChildren(
      ...tools.map((tool) => {
        const id = `tool-${tool.name}`;
        const description = (tool.description || "").split(/(?<=\.)\s/)[0];
        return h(
          "div",
          { class: "tool-choice" },
          h("input", {
            type: "checkbox",
            id,
            name: "tool",
            value: tool.name,
            checked: true,
            "aria-describedby": `${id}-about`,
          }),
          h("label", { for: id }, h("b", { text: tool.name })),
          h("small", { id: `${id}-about`, class: "hint", text: description }),
        );
      }),
    );
  } catch (error) {
    els.tools.replaceChildren(h("p", { class: "hint", text: "The tools could not be listed." }));
    handleError(error);
  }
}

async function refreshList({ older = false } = {}) {
  const query = new URLSearchParams({ limit: "30" });
  if (older && state.listNext) query.set("before", state.listNext);
  try {
    const page = await api("GET", `/v1/conversations?${query}`, { retries: 2 });
    state.list = older ? state.list.concat(page.data) : page.data;
    state.listNext = page.next_before;
    renderList();
  } catch (error) {
    if (!(error instanceof ApiError && error.status === 401)) handleError(error);
  }
}

let listTimer = null;
function scheduleListRefresh() {
  clearTimeout(listTimer);
  listTimer = setTimeout(() => refreshList(), 600);
}

function titleFromList(id) {
  const found = state.list.find((conversation) => conversation.id === id);
  return found && found.context && found.context.title;
}

function renderList() {
  const openId = state.view && state.view.id;
  els.list.replaceChildren(
    ...state.list.map((conversation) => {
      const title = (conversation.context && conversation.context.title) || "Conversation";
      const when = new Date(conversation.created_at).toLocaleString(undefined, {
        dateStyle: "short",
        timeStyle: "short",
      });
      return h(
        "li",
        {},
        h(
          "a",
          {
            href: `#c=${conversation.id}`,
            "data-testid": "conversation-link",
            "data-id": conversation.id,
            "aria-current": conversation.id === openId ? "page" : null,
          },
          h("span", { class: "conversation-title", text: title }),
          h("small", { class: "conversation-meta", text: `${conversation.status} · ${when}` }),
        ),
      );
    }),
  );
  els.listEmpty.hidden = state.list.length > 0;
  els.more.hidden = !state.listNext;
}

// --- navigation ---------------------------------------------------------------------------------

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

function hashId() {
  const id = new URLSearchParams(location.hash.slice(1)).get("c");
  return id && UUID.test(id) ? id.toLowerCase() : null;
}

let routed = false;
function route({ focus = true } = {}) {
  if (location.hash.length > 1 && !location.hash.startsWith("#c=")) return; // an in-page link
  const id = hashId();
  if (id) openConversation(id, { focus });
  else if (state.view || !routed) showNewChat({ focus });
  routed = true;
}

function setSidebar(open) {
  els.sidebar.classList.toggle("open", open);
  els.toggleList.setAttribute("aria-expanded", open ? "true" : "false");
}

function wire() {
  els.composer.addEventListener("submit", (event) => {
    event.preventDefault();
    send();
  });
  els.input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.altKey && !event.isComposing) {
      event.preventDefault();
      send();
    }
  });
  els.cancel.addEventListener("click", cancel);
  els.retry.addEventListener("click", retry);
  els.errorClose.addEventListener("click", () => {
    clearError();
    els.input.focus();
  });
  els.newConversation.addEventListener("click", () => {
    if (location.hash) history.pushState(null, "", location.pathname + location.search);
    setSidebar(false);
    showNewChat();
  });
  els.more.addEventListener("click", () => refreshList({ older: true }));
  els.list.addEventListener("click", (event) => {
    if (event.target.closest("a")) setSidebar(false); // the hash change opens it
  });
  document.querySelector(".skip-link").addEventListener("click", (event) => {
    event.preventDefault(); // the URL's hash names the open conversation: leave it alone
    els.input.focus();
  });
  document.addEventListener("keydown", (event) => {
    if (event.key !== "Escape") return;
    if (els.sidebar.classList.contains("open")) {
      setSidebar(false);
      els.toggleList.focus();
    } else if (els.auth.open) {
      els.auth.open = false;
      els.auth.querySelector("summary").focus();
    }
  });
  els.toggleList.addEventListener("click", () => {
    const open = !els.sidebar.classList.contains("open");
    setSidebar(open);
    if (open) els.newConversation.focus();
  });
  window.addEventListener("hashchange", () => route());
  window.addEventListener("popstate", () => route());
  els.authForm.addEventListener("submit", (event) => {
    event.preventDefault();
    state.token = els.token.value.trim();
    if (state.token) sessionStorage.setItem(TOKEN_KEY, state.token);
    else sessionStorage.removeItem(TOKEN_KEY);
    els.token.value = "";
    els.auth.open = false;
    restart();
  });
  els.tokenForget.addEventListener("click", () => {
    state.token = "";
    sessionStorage.removeItem(TOKEN_KEY);
    els.token.value = "";
    els.auth.open = false;
    restart();
  });
}

/** New credentials: read everything again with them. */
function restart() {
  clearError();
  const view = state.view;
  if (view) {
    closeView();
    openConversation(view.id);
  }
  loadTools();
  refreshList();
}

// For tests and debugging: cut the stream as a network failure would (it resumes on its own).
window.chatworker = {
  dropConnection: () => state.view && state.view.stream && state.view.stream.drop(),
  lastEventId: () => state.view && state.view.stream && state.view.stream.lastEventId,
};

wire();
route({ focus: true });
loadTools();
refreshList();
