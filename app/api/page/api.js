// @ts-check
// The API calls: the /v1 routes the page uses, as JSON requests over an injected `fetch`.
// A refusal throws `ApiError` with the RFC 9457 problem; only repeatable requests are retried.

import { readProblem } from "./sse.js";

/**
 * @typedef {import("./transcript.js").Turn} Turn
 * @typedef {import("./transcript.js").Problem} Problem
 * @typedef {{id: string, status: string, model: string, tools: string[],
 *   context: {title?: string} | null, created_at: string}} Conversation
 * @typedef {{data: Conversation[], next_before: string | null}} ConversationPage
 * @typedef {{name: string, description: string | null}} Tool
 * @typedef {{turn: Turn, repeated: boolean, enqueued: boolean, detail: string | null}} Submission
 * @typedef {{call_id: string, output: string} | {call_id: string, approve: boolean}} Answer
 * @typedef {{name: string, description: string,
 *   parameters: {type: "object", properties: Record<string, unknown>}}} ClientTool
 * @typedef {{id: string, tools: string[], client_tools: ClientTool[],
 *   context: {title: string}, instructions?: string}} NewConversation
 * @typedef {{body?: unknown, headers?: Record<string, string>, retries?: number}} RequestOptions
 * @typedef {import("./attachments.js").FileIn} FileIn
 */

/** `?after_seq=` past any message: the conversation without its transcript. */
export const NO_MESSAGES = 2147483647;

/** A refused request: the problem's `detail` is the message a user reads. */
export class ApiError extends Error {
  /** @param {Problem} problem */
  constructor(problem) {
    super(problem.detail);
    this.status = problem.status;
    this.code = problem.code;
    this.problem = problem;
  }
}

/** @param {number} ms */
const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * The API client of one page. `token()` gives the current credentials; `fetch` and `sleep` are
 * the browser's unless a test passes its own.
 * @param {{token: () => string, fetch?: typeof fetch, sleep?: (ms: number) => Promise<unknown>}}
 *   options
 */
export function createApi({
  token,
  fetch: send = (input, init) => fetch(input, init),
  sleep = pause,
}) {
  /** @returns {Record<string, string>} */
  const authHeaders = () => {
    const current = token();
    return current ? { Authorization: `Bearer ${current}` } : {};
  };

  /**
   * A JSON request; refusals throw `ApiError`. Network failures and 503s are retried `retries`
   * times (only for requests safe to repeat: idempotent ones).
   * @param {string} method
   * @param {string} path
   * @param {RequestOptions} [options]
   * @returns {Promise<any>}
   */
  async function request(method, path, { body, headers = {}, retries = 0 } = {}) {
    /** @type {Record<string, string>} */
    const sent = { Accept: "application/json", ...authHeaders(), ...headers };
    /** @type {RequestInit} */
    const init = { method, headers: sent };
    if (body !== undefined) {
      sent["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    for (let attempt = 0; ; attempt++) {
      let response;
      try {
        response = await send(path, init);
      } catch {
        if (attempt < retries) {
          await sleep(500 * (attempt + 1));
          continue;
        }
        throw new ApiError({
          status: 0,
          code: "network",
          detail: "The server did not answer. Check the connection and try again.",
        });
      }
      if (response.status === 503 && attempt < retries) {
        await sleep((Number(response.headers.get("Retry-After")) || 1) * 1000);
        continue;
      }
      if (!response.ok) throw new ApiError(await readProblem(response));
      if (response.status === 204) return null;
      return response.json();
    }
  }

  const at = encodeURIComponent;
  return {
    authHeaders,
    request,
    /** @returns {Promise<Tool[]>} */
    tools: async () => (await request("GET", "/v1/tools", { retries: 2 })).data,
    /** @param {string | null} before @returns {Promise<ConversationPage>} */
    conversations: (before) => {
      const query = new URLSearchParams({ limit: "30" });
      if (before) query.set("before", before);
      return request("GET", `/v1/conversations?${query}`, { retries: 2 });
    },
    /** @param {string} id @returns {Promise<Conversation>} */
    conversation: (id) =>
      request("GET", `/v1/conversations/${at(id)}?after_seq=${NO_MESSAGES}`, { retries: 2 }),
    /** The id is chosen by the page, so a retried create returns the same conversation.
     * @param {NewConversation} body @returns {Promise<Conversation>} */
    createConversation: (body) => request("POST", "/v1/conversations", { body, retries: 2 }),
    /** A retried submit runs nothing twice: its Idempotency-Key is chosen once, here.
     * @param {string} id @param {string} text @param {string} onBusy
     * @param {FileIn[]} [files] what the message carries (data: URLs)
     * @returns {Promise<Submission>} */
    submit: (id, text, onBusy, files = []) =>
      request("POST", `/v1/conversations/${at(id)}/messages`, {
        body: files.length ? { text, on_busy: onBusy, files } : { text, on_busy: onBusy },
        headers: { "Idempotency-Key": newId() },
        retries: 2,
      }),
    /** A message's file as a URL the page can show (read with the credentials: an `<img>`
     * could not send them); null when it cannot be read.
     * @param {string} id @returns {Promise<string | null>} */
    fileUrl: async (id) => {
      try {
        const response = await send(`/v1/files/${at(id)}`, { headers: authHeaders() });
        return response.ok ? URL.createObjectURL(await response.blob()) : null;
      } catch {
        return null;
      }
    },
    /** A new version of user message `seq`; a turn runs on it.
     * @param {string} id @param {number} seq @param {string} text @returns {Promise<Submission>} */
    edit: (id, seq, text) =>
      request("POST", `/v1/conversations/${at(id)}/messages/${seq}/edit`, {
        body: { text },
        headers: { "Idempotency-Key": newId() },
        retries: 2,
      }),
    /** A new answer to the user message at or above `seq`.
     * @param {string} id @param {number} seq @returns {Promise<Submission>} */
    regenerate: (id, seq) =>
      request("POST", `/v1/conversations/${at(id)}/regenerate`, {
        body: { seq },
        headers: { "Idempotency-Key": newId() },
        retries: 2,
      }),
    /** Show the version holding message `seq` (no turn runs).
     * @param {string} id @param {number} seq @returns {Promise<Conversation>} */
    switchVersion: (id, seq) =>
      request("POST", `/v1/conversations/${at(id)}/switch`, { body: { seq }, retries: 2 }),
    /** @param {string} id */
    cancel: (id) => request("POST", `/v1/conversations/${at(id)}/cancel`, { retries: 2 }),
    /** Not repeated: a second retry after the first succeeded would be refused.
     * @param {string} id */
    retry: (id) => request("POST", `/v1/conversations/${at(id)}/retry`),
    /** @param {string} id @returns {Promise<Turn>} */
    turn: (id) => request("GET", `/v1/turns/${at(id)}`, { retries: 2 }),
    /** @param {string} turnId @param {Answer[]} outputs */
    answer: (turnId, outputs) =>
      request("POST", `/v1/turns/${at(turnId)}/actions`, { body: { outputs }, retries: 2 }),
    /** @param {string} id */
    streamUrl: (id) => `/v1/conversations/${at(id)}/stream?until=never`,
  };
}

/** @typedef {ReturnType<typeof createApi>} Api */

/** A random UUID (version 4), also outside secure contexts, where `randomUUID` is missing. */
export function newId() {
  if (crypto.randomUUID) return crypto.randomUUID();
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  bytes[6] = (bytes[6] & 0x0f) | 0x40;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  const hex = [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
  const parts = [hex.slice(0, 8), hex.slice(8, 12), hex.slice(12, 16), hex.slice(16, 20)];
  return [...parts, hex.slice(20)].join("-");
}
