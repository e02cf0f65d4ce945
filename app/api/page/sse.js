// @ts-check
// Server-sent events over fetch(): unlike EventSource it can send `Authorization`, and the
// reconnection is ours, so it resumes exactly where it stopped (`Last-Event-ID`).

/**
 * @typedef {{type: string, data: string, id: string | null}} SSEEvent
 * @typedef {import("./transcript.js").Problem} Problem
 * @typedef {"connecting" | "open" | "reconnecting" | "closed"} StreamState
 * @typedef {{url: string, headers: () => Record<string, string>,
 *   onEvent: (event: SSEEvent) => void, onState?: (state: StreamState) => void,
 *   onProblem?: (problem: Problem, response: Response) => "retry" | "restart" | "stop",
 *   lastEventId?: string | null}} StreamOptions
 */

/** Splits a text/event-stream into events (the WHATWG parsing rules, minus `retry`). */
export class SSEParser {
  /** @param {(event: SSEEvent) => void} onEvent */
  constructor(onEvent) {
    this.onEvent = onEvent;
    this.buffer = "";
    this.type = "";
    /** @type {string[]} */
    this.data = [];
    /** @type {string | null} this event's own `id:` (null: it had none, e.g. stream.end) */
    this.id = null;
  }

  reset() {
    this.type = "";
    this.data = [];
    this.id = null;
  }

  /** Feed decoded text; complete lines are processed, the rest waits for more.
   * @param {string} text */
  push(text) {
    this.buffer += text;
    const newline = /\r\n|\r|\n/g;
    let start = 0;
    let match;
    while ((match = newline.exec(this.buffer)) !== null) {
      // A lone "\r" at the very end may be the first half of "\r\n": wait for the next chunk.
      if (match[0] === "\r" && match.index === this.buffer.length - 1) break;
      this.line(this.buffer.slice(start, match.index));
      start = newline.lastIndex;
    }
    this.buffer = this.buffer.slice(start);
  }

  /** @param {string} line */
  line(line) {
    if (line === "") {
      if (this.data.length > 0) {
        this.onEvent({ type: this.type || "message", data: this.data.join("\n"), id: this.id });
      }
      this.reset();
      return;
    }
    if (line.startsWith(":")) return; // a comment: the server's keep-alive ping
    const colon = line.indexOf(":");
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (field === "data") this.data.push(value);
    else if (field === "event") this.type = value;
    else if (field === "id" && !value.includes("\0")) this.id = value;
  }
}

/** @param {number} ms */
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * One conversation's stream, kept open: on a dropped connection it reconnects with the id of the
 * last event it handed out as `Last-Event-ID`, so the reader sees every event once, in order.
 *
 *   url         the stream's URL (without a cursor)
 *   headers()   extra request headers (the Authorization)
 *   onEvent     ({type, data, id}) for each event, in order
 *   onState     ("connecting" | "open" | "reconnecting" | "closed")
 *   onProblem   (problem, response) for a refusal: returns "retry", "restart" (from the start:
 *               the cursor is unknown) or "stop"
 */
export class ResumableStream {
  /** @param {StreamOptions} options */
  constructor({ url, headers, onEvent, onState, onProblem, lastEventId = null }) {
    this.url = url;
    this.headers = headers;
    this.onEvent = onEvent;
    this.onState = onState || (() => {});
    this.onProblem = onProblem || (() => "stop");
    /** @type {string | null} */
    this.lastEventId = lastEventId;
    this.stopped = false;
    /** @type {AbortController | null} */
    this.controller = null;
  }

  start() {
    this.run();
    return this;
  }

  /** Close for good (another conversation opens, or the page leaves). */
  stop() {
    this.stopped = true;
    if (this.controller) this.controller.abort();
    this.onState("closed");
  }

  /** Cut the current connection as a network failure would: it reconnects on its own. */
  drop() {
    if (this.controller) this.controller.abort();
  }

  async run() {
    let backoff = 250;
    let first = true;
    while (!this.stopped) {
      this.onState(first ? "connecting" : "reconnecting");
      first = false;
      const controller = new AbortController();
      this.controller = controller;
      /** @type {Record<string, string>} */
      const headers = { Accept: "text/event-stream", ...this.headers() };
      if (this.lastEventId !== null) headers["Last-Event-ID"] = this.lastEventId;
      let response;
      try {
        response = await fetch(this.url, { headers, signal: controller.signal, cache: "no-store" });
      } catch {
        if (this.stopped) return;
        await sleep(backoff);
        backoff = Math.min(backoff * 2, 8000);
        continue;
      }
      if (!response.ok) {
        const problem = await readProblem(response);
        if (this.stopped) return;
        const action = this.onProblem(problem, response);
        if (action === "stop") {
          this.stopped = true;
          this.onState("closed");
          return;
        }
        if (action === "restart") this.lastEventId = null;
        const retryAfter = Number(response.headers.get("Retry-After"));
        await sleep(retryAfter > 0 ? retryAfter * 1000 : backoff);
        backoff = Math.min(backoff * 2, 8000);
        continue;
      }
      this.onState("open");
      backoff = 250;
      await this.read(response, controller);
      if (this.stopped) return;
      await sleep(100); // the server ended the stream (a restart, a deploy): come back soon
    }
  }

  /** @param {Response} response @param {AbortController} controller */
  async read(response, controller) {
    const parser = new SSEParser((event) => {
      if (this.stopped || controller.signal.aborted) return;
      if (event.id !== null) this.lastEventId = event.id;
      try {
        this.onEvent(event);
      } catch (error) {
        console.error("chatworker: could not show an event", event, error);
      }
    });
    if (!response.body) return;
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        parser.push(decoder.decode(value, { stream: true }));
      }
    } catch {
      // aborted or cut: the caller reconnects (an event cut in half was never handed out)
    } finally {
      controller.abort();
    }
  }
}

/** The RFC 9457 body of a refused request, or one made up from the status.
 * @param {Response} response
 * @returns {Promise<Problem>} */
export async function readProblem(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    body = null;
  }
  const problem = body && typeof body === "object" ? body : {};
  return {
    ...problem,
    status: response.status,
    code: problem.code || `http_${response.status}`,
    detail: problem.detail || problem.title || response.statusText || `HTTP ${response.status}`,
  };
}
