// @ts-check
// The open conversation: its event stream folded into the transcript (transcript.js) and drawn
// (render.js), and the effects an event asks for (read what a turn waits for, refresh the list).

import { answerAction, editMessage, regenerate, switchVersion } from "./actions.js";
import { ApiError } from "./api.js";
import { itemElement, partialElement, reconcile, waitingElement } from "./render.js";
import { ResumableStream } from "./sse.js";
import { runBrowserTool, runsHere } from "./tools.js";
import { apply, empty, hasAction, visible, withActions } from "./transcript.js";

/**
 * @typedef {import("./api.js").Api} Api
 * @typedef {import("./api.js").Conversation} Conversation
 * @typedef {import("./transcript.js").Transcript} Transcript
 * @typedef {import("./transcript.js").Connection} Connection
 * @typedef {import("./transcript.js").Problem} Problem
 * @typedef {import("./transcript.js").Partial} Partial
 * @typedef {import("./transcript.js").Waiting} Waiting
 * @typedef {{transcript: HTMLElement, live: HTMLElement, log: HTMLElement}} ViewElements
 * @typedef {{api: Api, els: ViewElements, onChange: () => void, onError: (error: unknown) => void,
 *   onListChange: () => void, focusInput: () => void}} ViewContext
 */

// The events after which the conversation list shows another status.
const LIST_EVENTS = new Set([
  "status.changed",
  "turn.queued",
  "turn.completed",
  "turn.failed",
  "turn.cancelled",
]);
// Closer to the bottom than this (px): the view follows new messages.
const STICK_PX = 48;

export class View {
  /** @param {string} id @param {ViewContext} context */
  constructor(id, context) {
    this.id = id;
    this.context = context;
    /** @type {Transcript} */
    this.transcript = empty();
    /** @type {Connection} */
    this.connection = "connecting";
    /** @type {Conversation | null} GET /v1/conversations/{id}, without its transcript */
    this.conversation = null;
    /** @type {ResumableStream | null} */
    this.stream = null;
    this.closed = false;
    this.drawPending = false;
    this.stick = false;
  }

  /** Follow the conversation's stream from its first event. */
  start() {
    const { api } = this.context;
    this.stream = new ResumableStream({
      url: api.streamUrl(this.id),
      headers: api.authHeaders,
      onEvent: (event) => this.onEvent(event),
      onState: (connection) => {
        this.connection = connection;
        if (!this.closed) this.context.onChange();
      },
      onProblem: (problem) => this.onProblem(problem),
    }).start();
    return this;
  }

  /** Stop following it (another one opens, or new credentials). */
  close() {
    this.closed = true;
    if (this.stream) this.stream.stop();
  }

  /** @param {(t: Transcript) => Transcript} change */
  update(change) {
    if (this.closed) return;
    const log = this.context.els.log;
    this.stick ||= log.scrollHeight - log.scrollTop - log.clientHeight < STICK_PX;
    this.transcript = change(this.transcript);
    if (this.drawPending) return;
    this.drawPending = true;
    queueMicrotask(() => this.draw()); // a burst of events is drawn once
  }

  draw() {
    this.drawPending = false;
    if (this.closed) return;
    const { els, onChange } = this.context;
    const t = this.transcript;
    const handlers = {
      onAnswer: answerAction.bind(null, this),
      runsHere,
      onEdit: editMessage.bind(null, this),
      onRegenerate: regenerate.bind(null, this),
      onSwitch: switchVersion.bind(null, this),
      fileUrl: (/** @type {string} */ id) => this.context.api.fileUrl(id),
    };
    reconcile(els.transcript, visible(t), (item) => itemElement(item, handlers));
    /** @type {(Partial | Waiting)[]} */
    const live = [...t.partials, ...t.waiting];
    reconcile(els.live, live, (item) =>
      "messageSeq" in item ? partialElement(item) : waitingElement(item),
    );
    onChange();
    if (this.stick) els.log.scrollTop = els.log.scrollHeight;
    this.stick = false;
  }

  /** @param {{type: string, data: string}} event */
  onEvent(event) {
    if (this.closed || event.type === "stream.end") return;
    const data = JSON.parse(event.data);
    const before = this.transcript.lastSeq;
    this.update((t) => apply(t, { type: event.type, data }));
    if (this.transcript.lastSeq === before) return; // a delta, or shown already
    if (event.type === "action.required" && data.turn_id) this.loadActions(data.turn_id);
    if (LIST_EVENTS.has(event.type)) this.context.onListChange();
  }

  /** @param {Problem} problem @returns {"retry" | "restart" | "stop"} */
  onProblem(problem) {
    if (this.closed) return "stop";
    if (problem.code === "invalid_cursor") {
      // The log does not know our place (a reset database): show it afresh.
      this.update(() => empty());
      return "restart";
    }
    if (problem.status >= 500 || problem.status === 0) return "retry";
    this.context.onError(new ApiError(problem));
    return "stop";
  }

  /** What a turn waits for, from the turn itself; a browser tool among it runs at once.
   * @param {string} turnId */
  async loadActions(turnId) {
    let turn;
    try {
      turn = await this.context.api.turn(turnId);
    } catch (error) {
      this.context.onError(error);
      return;
    }
    if (this.closed) return;
    const fresh = (turn.actions || []).filter(
      (action) => !hasAction(this.transcript, action.call_id),
    );
    this.update((t) => withActions(t, turn));
    for (const action of fresh) {
      if (action.kind !== "client_tool" || action.answered || !runsHere(action.name)) continue;
      const item = {
        kind: /** @type {const} */ ("action"),
        key: `action-${action.call_id}`,
        turnId,
        action,
      };
      answerAction(this, item, { output: runBrowserTool(action.name, action.arguments || {}) });
    }
  }
}
