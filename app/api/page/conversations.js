// @ts-check
// The conversation list: the caller's conversations, newest first, a page at a time ("Show
// older"), refreshed a little after the open conversation's status changes.

import { ApiError } from "./api.js";
import { h } from "./dom.js";

/**
 * @typedef {import("./api.js").Api} Api
 * @typedef {import("./api.js").Conversation} Conversation
 * @typedef {import("./api.js").ConversationPage} ConversationPage
 * @typedef {{list: HTMLElement, empty: HTMLElement, more: HTMLElement}} ListElements
 */

/** How long a burst of status changes waits before the list is read again. */
const REFRESH_DELAY_MS = 600;

/** A conversation's title: the one the page gave it at creation (`context.title`).
 * @param {{context: {title?: string} | null} | null | undefined} conversation */
export function titleOf(conversation) {
  return (conversation && conversation.context && conversation.context.title) || "Conversation";
}

/** A title from a first message: its words on one line, at most 80 characters.
 * @param {string} text */
export function titleFromMessage(text) {
  const words = text.trim().split(/\s+/).join(" ");
  return words.length > 80 ? `${words.slice(0, 79)}…` : words;
}

/**
 * The list after a page was read: the first page replaces it, an older one is appended.
 * @param {Conversation[]} shown @param {ConversationPage} page @param {boolean} older
 */
export function merged(shown, page, older) {
  return older ? shown.concat(page.data) : page.data;
}

/** The list of one page; `onError` hears a failed read (not a 401: the page asks for a key). */
export class ConversationList {
  /**
   * @param {Api} api @param {ListElements} els
   * @param {(error: unknown) => void} onError
   */
  constructor(api, els, onError) {
    this.api = api;
    this.els = els;
    this.onError = onError;
    /** @type {Conversation[]} */
    this.conversations = [];
    /** @type {string | null} */
    this.next = null;
    /** @type {string | null} */
    this.openId = null;
    /** @type {ReturnType<typeof setTimeout> | undefined} */
    this.timer = undefined;
  }

  /** Read the first page again, or (`older`) the next one. */
  async refresh({ older = false } = {}) {
    try {
      const page = await this.api.conversations(older ? this.next : null);
      this.conversations = merged(this.conversations, page, older);
      this.next = page.next_before;
      this.render();
    } catch (error) {
      if (!(error instanceof ApiError && error.status === 401)) this.onError(error);
    }
  }

  /** Refresh soon, once for a burst of events. */
  schedule() {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.refresh(), REFRESH_DELAY_MS);
  }

  /** @param {string} id @returns {string | null} its title, if the list has it */
  title(id) {
    const found = this.conversations.find((conversation) => conversation.id === id);
    return found ? titleOf(found) : null;
  }

  /** @param {string | null} id the open conversation, marked as the current page */
  open(id) {
    this.openId = id;
    this.render();
  }

  /** The list shown, its items kept (only what changed is written): a refresh landing between
   * a press and its release would otherwise replace the link being clicked, and lose the click. */
  render() {
    /** @type {Map<string, Element>} */
    const shown = new Map();
    for (const item of this.els.list.children) {
      const id = item.querySelector("a")?.getAttribute("data-id");
      if (id) shown.set(id, item);
    }
    const items = this.conversations.map((conversation) => {
      const item = shown.get(conversation.id) || listItem(conversation.id);
      showIn(item, conversation, conversation.id === this.openId);
      return item;
    });
    const children = [...this.els.list.children];
    if (items.length !== children.length || items.some((item, n) => item !== children[n])) {
      this.els.list.replaceChildren(...items);
    }
    this.els.empty.hidden = this.conversations.length > 0;
    this.els.more.hidden = !this.next;
  }
}

/** @param {string} id @returns {Element} an empty item of the list, its link to `id` */
function listItem(id) {
  return h(
    "li",
    {},
    h(
      "a",
      { href: `#c=${id}`, "data-testid": "conversation-link", "data-id": id },
      h("span", { class: "conversation-title" }),
      h("small", { class: "conversation-meta" }),
    ),
  );
}

/** Write what an item shows of `conversation`, each part only if it changed.
 * @param {Element} item @param {Conversation} conversation @param {boolean} current */
function showIn(item, conversation, current) {
  const when = new Date(conversation.created_at).toLocaleString(undefined, {
    dateStyle: "short",
    timeStyle: "short",
  });
  const parts = [
    [".conversation-title", titleOf(conversation)],
    [".conversation-meta", `${conversation.status} · ${when}`],
  ];
  for (const [selector, text] of parts) {
    const part = item.querySelector(selector);
    if (part && part.textContent !== text) part.textContent = text;
  }
  const link = item.querySelector("a");
  if (link && link.hasAttribute("aria-current") !== current) {
    if (current) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}
