// @ts-check
// The chat page's entry: its elements, the open conversation (or a new one), the status line and
// controls, the URL (#c=<id>), the credentials, and the wiring of the user's actions.
//
// The modules: api.js (the /v1 calls), sse.js (the resumable stream), transcript.js (events to
// the view model, pure), render.js and markdown.js (the view model as elements; dom.js builds
// them), view.js (the open conversation), actions.js (send, cancel, retry, answer),
// conversations.js (the list), tools.js (the tool choice and the browser's own tools).

import { cancel, retry, send } from "./actions.js";
import { ApiError, createApi } from "./api.js";
import { acceptDrops, Attachments } from "./attachments.js";
import { ConversationList, titleOf } from "./conversations.js";
import { h } from "./dom.js";
import { toolChoices } from "./tools.js";
import { isBusy, statusOf } from "./transcript.js";
import { View } from "./view.js";

/**
 * @template {HTMLElement} T
 * @param {string} id @param {new () => T} type
 * @returns {T}
 */
function byId(id, type) {
  const element = document.getElementById(id);
  if (!(element instanceof type)) throw new Error(`the page has no #${id}`);
  return element;
}

const els = {
  toggleList: byId("toggle-list", HTMLButtonElement),
  sidebar: byId("sidebar", HTMLElement),
  auth: byId("auth", HTMLDetailsElement),
  authForm: byId("auth-form", HTMLFormElement),
  token: byId("token", HTMLInputElement),
  tokenForget: byId("token-forget", HTMLButtonElement),
  newConversation: byId("new-conversation", HTMLButtonElement),
  list: byId("conversation-list", HTMLUListElement),
  more: byId("more-conversations", HTMLButtonElement),
  listEmpty: byId("list-empty", HTMLParagraphElement),
  title: byId("chat-title", HTMLHeadingElement),
  meta: byId("chat-meta", HTMLParagraphElement),
  status: byId("status", HTMLParagraphElement),
  connection: byId("connection", HTMLSpanElement),
  retry: byId("retry", HTMLButtonElement),
  cancel: byId("cancel", HTMLButtonElement),
  error: byId("error", HTMLDivElement),
  errorText: byId("error-text", HTMLParagraphElement),
  errorClose: byId("error-close", HTMLButtonElement),
  newChat: byId("new-chat", HTMLElement),
  tools: byId("tools", HTMLDivElement),
  instructions: byId("instructions", HTMLTextAreaElement),
  log: byId("log", HTMLDivElement),
  transcript: byId("transcript", HTMLDivElement),
  live: byId("live", HTMLDivElement),
  composer: byId("composer", HTMLFormElement),
  input: byId("message-input", HTMLTextAreaElement),
  onBusy: byId("on-busy", HTMLSelectElement),
  send: byId("send", HTMLButtonElement),
  attach: byId("attach", HTMLButtonElement),
  attachInput: byId("attach-input", HTMLInputElement),
  attachments: byId("attachments", HTMLUListElement),
};

const TOKEN_KEY = "chatworker.token";
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

const state = {
  token: sessionStorage.getItem(TOKEN_KEY) || "",
  /** @type {View | null} the open conversation, or null: a new one */
  view: null,
  sending: false,
  routed: false,
};

const api = createApi({ token: () => state.token });
const list = new ConversationList(
  api,
  { list: els.list, empty: els.listEmpty, more: els.more },
  (error) => handleError(error),
);

// --- errors -------------------------------------------------------------------------------------

/** @param {string} text */
function showError(text) {
  els.errorText.textContent = text;
  els.error.hidden = false;
}

function clearError() {
  els.error.hidden = true;
  els.errorText.textContent = "";
}

/** @param {unknown} error */
function handleError(error) {
  showError(error instanceof ApiError ? error.message : String(error));
  if (error instanceof ApiError && error.status === 401) {
    els.auth.open = true; // ask for a key
    els.token.focus();
  }
}

// --- the open conversation ----------------------------------------------------------------------

/** @param {string} id */
function openConversation(id, { focus = true } = {}) {
  if (state.view && state.view.id === id) return state.view;
  closeView();
  clearError();
  /** @type {View} */
  const view = new View(id, {
    api,
    els,
    onChange: () => state.view === view && render(),
    onError: (error) => state.view === view && handleError(error),
    onListChange: () => list.schedule(),
    focusInput: () => els.input.focus(),
  });
  state.view = view;
  els.newChat.hidden = true;
  els.log.hidden = false;
  showTitle(list.title(id) || "Conversation");
  els.meta.textContent = "";
  list.open(id);
  render();
  if (focus) els.input.focus();
  view.start();
  api
    .conversation(id)
    .then((conversation) => {
      view.conversation = conversation;
      if (state.view === view) showHeader(conversation);
    })
    .catch((error) => {
      // A 404 is the stream's to report.
      if (state.view === view && !(error instanceof ApiError && error.status === 404)) {
        handleError(error);
      }
    });
  return view;
}

function closeView() {
  if (state.view) state.view.close();
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
  list.open(null);
  render();
  if (focus) els.input.focus();
}

/** @param {string} title */
function showTitle(title) {
  els.title.textContent = title;
  document.title = `${title} – chatworker`;
}

/** @param {import("./api.js").Conversation} conversation */
function showHeader(conversation) {
  showTitle(titleOf(conversation));
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

/** The status line and the controls, from the open conversation's transcript. */
function render() {
  const view = state.view;
  const [code, text] = statusOf(view && view.transcript, view ? view.connection : "closed");
  if (els.status.textContent !== text) els.status.textContent = text;
  els.status.dataset.status = code;
  const busy = Boolean(view) && isBusy(/** @type {View} */ (view).transcript);
  els.cancel.disabled = !busy || code === "cancelling";
  els.retry.hidden = !view || view.transcript.status !== "failed" || busy;
  const connection = view ? view.connection : "closed";
  els.connection.dataset.state = connection;
  els.connection.textContent = {
    connecting: "Connecting…",
    reconnecting: "Reconnecting…",
    open: "",
    closed: "",
  }[connection];
  els.send.disabled = state.sending;
  els.send.setAttribute("aria-busy", state.sending ? "true" : "false");
}

// --- the user's actions -------------------------------------------------------------------------

/** @type {import("./actions.js").Page} */
const page = {
  api,
  els,
  view: () => state.view,
  create: (id) => {
    history.pushState(null, "", `#c=${id}`);
    const view = openConversation(id);
    list.refresh();
    return view;
  },
  isSending: () => state.sending,
  setSending: (sending) => {
    state.sending = sending;
    render();
  },
  clearError,
  onError: handleError,
  render,
  attachments: new Attachments(els.attachments),
};

async function loadTools() {
  try {
    els.tools.replaceChildren(...toolChoices(await api.tools()));
  } catch (error) {
    els.tools.replaceChildren(h("p", { class: "hint", text: "The tools could not be listed." }));
    handleError(error);
  }
}

// --- navigation ---------------------------------------------------------------------------------

function hashId() {
  const id = new URLSearchParams(location.hash.slice(1)).get("c");
  return id && UUID.test(id) ? id.toLowerCase() : null;
}

function route({ focus = true } = {}) {
  if (location.hash.length > 1 && !location.hash.startsWith("#c=")) return; // an in-page link
  const id = hashId();
  if (id) openConversation(id, { focus });
  else if (state.view || !state.routed) showNewChat({ focus });
  state.routed = true;
}

/** @param {boolean} open */
function setSidebar(open) {
  els.sidebar.classList.toggle("open", open);
  els.toggleList.setAttribute("aria-expanded", open ? "true" : "false");
}

/** @param {string} token the new credentials: everything is read again with them */
function useToken(token) {
  state.token = token;
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
  els.token.value = "";
  els.auth.open = false;
  clearError();
  const view = state.view;
  if (view) {
    closeView();
    openConversation(view.id);
  }
  loadTools();
  list.refresh();
}

function wire() {
  els.composer.addEventListener("submit", (event) => {
    event.preventDefault();
    send(page);
  });
  els.input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.altKey && !event.isComposing) {
      event.preventDefault();
      send(page);
    }
  });
  els.cancel.addEventListener("click", () => cancel(page));
  els.attach.addEventListener("click", () => els.attachInput.click());
  els.attachInput.addEventListener("change", () => {
    if (els.attachInput.files) page.attachments.add(els.attachInput.files);
    els.attachInput.value = "";
  });
  acceptDrops(page.attachments, els.composer, els.input);
  els.retry.addEventListener("click", () => retry(page));
  els.errorClose.addEventListener("click", () => {
    clearError();
    els.input.focus();
  });
  els.newConversation.addEventListener("click", () => {
    if (location.hash) history.pushState(null, "", location.pathname + location.search);
    setSidebar(false);
    showNewChat();
  });
  els.more.addEventListener("click", () => list.refresh({ older: true }));
  els.list.addEventListener("click", (event) => {
    const target = event.target;
    if (target instanceof Element && target.closest("a")) setSidebar(false); // the hash opens it
  });
  document.querySelector(".skip-link")?.addEventListener("click", (event) => {
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
      els.auth.querySelector("summary")?.focus();
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
    useToken(els.token.value.trim());
  });
  els.tokenForget.addEventListener("click", () => useToken(""));
}

// For tests and debugging: cut the stream as a network failure would (it resumes on its own).
Object.assign(window, {
  chatworker: {
    dropConnection: () => state.view?.stream?.drop(),
    lastEventId: () => state.view?.stream?.lastEventId,
  },
});

wire();
route({ focus: true });
loadTools();
list.refresh();
