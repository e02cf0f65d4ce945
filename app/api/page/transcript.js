// @ts-check
// The transcript: a pure function from a conversation's stream events to the view model the page
// draws (no DOM, no I/O: `node --test tests/page/` walks it event by event).
//
// The rules, which make it idempotent, so a reload (a replay from the start) and a reconnection
// (a resume from the last SSE id) show the same page with nothing twice:
//
// | input                       | effect                                                          |
// |-----------------------------|-----------------------------------------------------------------|
// | a committed event, seq <= lastSeq | nothing: shown already                                    |
// | message.committed           | the message, keyed by its seq; replaces its partial reply       |
// | message.delta               | the partial reply of its message seq: applied once by `index`,  |
// |                             | placed by `offset`; ignored once the message is committed; a    |
// |                             | new `stream` (a retried model call) replaces the old one        |
// | message.discarded           | drops the partial reply of that stream (`*`: any stream)        |
// | turn.queued / started / resumed / cancel_requested / action.required | the turn's state     |
// | turn.completed / failed / cancelled | the turn is over (a note for a failure, a cancel)       |
// | status.changed              | the conversation's status (not failed: its error is cleared)    |
// | any event of a turn that began | the message queued behind it is no longer shown as waiting   |
// | withActions (GET the turn)  | what the turn waits for, once per call id                       |
// | withWaiting (a submit)      | the message queued behind the running turn, until it begins     |
// | withAnswer (a POST)         | an action answered from this page                               |
// | branch.switched             | the active path ends at its message now (an edit, a regenerate, |
// |                             | a switch, a rollback moved it)                                  |
//
// Messages form a tree (each names its `parent_seq`); every committed one is kept, and the page
// shows the active path: from the leaf (the last message committed, or the one a
// `branch.switched` names) up its parents, each with its versions (`visible`).
// Every function returns a new transcript (or the same one when nothing changed) and never
// mutates its input: the renderer redraws only the items that are new objects.

/**
 * @typedef {{status: number, code: string, detail: string} & Record<string, unknown>} Problem
 * @typedef {{id?: string, name?: string, arguments?: unknown,
 *   function?: {name?: string, arguments?: unknown}}} ToolCall
 * @typedef {{seq: number, role: "system" | "user" | "assistant" | "tool", content: string | null,
 *   tool_calls?: ToolCall[], tool_call_id?: string | null, tool_name?: string | null,
 *   is_error?: boolean, parent_seq?: number | null, files?: FileRef[]}} Message
 * @typedef {{id: string, media_type: string, name: string | null, size: number}} FileRef
 * @typedef {{call_id: string, kind: "clarification" | "client_tool" | "approval", name: string,
 *   arguments: Record<string, unknown>, answered: boolean | null,
 *   decision?: "approved" | "denied" | null, reason?: string | null}} Action
 * @typedef {{id: string, number: number, status?: string, message_seq: number | null,
 *   error?: string | null, actions?: Action[]}} Turn
 * @typedef {{kind?: string, from_seq?: number, through_seq?: number}} Compacted
 * @typedef {{seq: number, turn_id?: string | null, status?: string | null,
 *   message?: Message | null, message_seq?: number | null, turn?: Turn | null,
 *   data?: Compacted | null}} Committed
 * @typedef {{part: "text" | "call", index: number, offset: number, text: string,
 *   call_id?: string | null, name?: string | null}} Fragment
 * @typedef {{message_seq: number, stream: string, index: number, fragments: Fragment[]}} Delta
 * @typedef {{message_seq: number, stream: string}} Discarded
 * @typedef {{type: string, data: unknown}} StreamEvent
 *
 * @typedef {{kind: "message", key: string, message: Message, versions?: number[]}} MessageItem
 * @typedef {{kind: "note", key: string, seq: number, event: string, text: string}} NoteItem
 * @typedef {{kind: "action", key: string, turnId: string, action: Action}} ActionItem
 * @typedef {MessageItem | NoteItem | ActionItem} Item
 * @typedef {{index: number, id: string | null, name: string | null, arguments: string}} PartialCall
 * @typedef {{key: string, messageSeq: number, stream: string, next: number, text: string,
 *   calls: PartialCall[]}} Partial
 * @typedef {{key: string, turnId: string, text: string}} Waiting
 * @typedef {{id: string, number: number | undefined, cancelling: boolean, waiting: boolean}}
 *   TurnState
 * @typedef {{lastSeq: number, items: Item[], partials: Partial[], turns: TurnState[],
 *   begun: string[], waiting: Waiting[], status: string, outcome: "failed" | "cancelled" | null,
 *   error: string | null, leaf: number | null}} Transcript
 * @typedef {"connecting" | "open" | "reconnecting" | "closed"} Connection
 * @typedef {{approve: boolean} | {output: string}} Answer
 */

/** The stream's types this reducer shows (`apply`'s and `applyCommitted`'s cases), and those it
 * passes over on purpose (the log moves past them); tests/unit/test_renderer_coverage.py holds
 * both to app/vocabulary.py, so a new type fails there until it is decided here. */
export const HANDLED = new Set([
  "stream.end",
  "message.delta",
  "message.discarded",
  "message.committed",
  "status.changed",
  "turn.queued",
  "turn.started",
  "turn.resumed",
  "turn.cancel_requested",
  "turn.completed",
  "turn.failed",
  "turn.cancelled",
  "action.required",
  "context.compacted",
  "branch.switched",
]);
export const SKIPPED = new Set(["model.fallback"]);

/** The conversation statuses of a running turn. */
export const BUSY = new Set(["processing", "tool_loop"]);

/** @returns {Transcript} before the first event */
export function empty() {
  return {
    lastSeq: 0,
    items: [],
    partials: [],
    turns: [],
    begun: [],
    waiting: [],
    status: "idle",
    outcome: null,
    error: null,
    leaf: null,
  };
}

/**
 * The transcript after one event of the stream (its `data` parsed).
 * @param {Transcript} t
 * @param {StreamEvent} event
 * @returns {Transcript}
 */
export function apply(t, event) {
  if (event.type === "stream.end") return t;
  if (event.type === "message.delta") return applyDelta(t, /** @type {Delta} */ (event.data));
  if (event.type === "message.discarded") {
    return applyDiscard(t, /** @type {Discarded} */ (event.data));
  }
  return applyCommitted(t, event.type, /** @type {Committed} */ (event.data));
}

/** @param {Transcript} t @param {string} type @param {Committed} event @returns {Transcript} */
function applyCommitted(t, type, event) {
  if (typeof event.seq !== "number" || event.seq <= t.lastSeq) return t;
  let next = { ...t, lastSeq: event.seq };
  const turnId = event.turn_id;
  if (turnId && type !== "turn.queued" && type !== "turn.cancel_requested") {
    // Its message is in the log now (or the turn ended first): no longer shown as waiting.
    next.begun = t.begun.includes(turnId) ? t.begun : [...t.begun, turnId];
    next.waiting = t.waiting.filter((waiting) => waiting.turnId !== turnId);
  }
  const turn = event.turn || null;
  const number = turn ? turn.number : undefined;
  const current = next.turns.find((state) => state.id === turnId);
  /** @param {string} text */
  const note = (text) =>
    withItem(next, { kind: "note", key: `note-${event.seq}`, seq: event.seq, event: type, text });
  switch (type) {
    case "message.committed":
      return event.message ? commitMessage(next, event.message) : next;
    case "status.changed": {
      const status = event.status || next.status;
      return { ...next, status, error: status === "failed" ? next.error : null };
    }
    case "turn.queued":
      return withTurn(next, turnId, { number, cancelling: false, waiting: false });
    case "turn.started":
    case "turn.resumed":
      next = withTurn(next, turnId, { number, cancelling: false, ...current, waiting: false });
      return type === "turn.resumed" ? note(`Turn ${number} resumed after an interruption.`) : next;
    case "turn.cancel_requested":
      return current ? withTurn(next, turnId, { ...current, cancelling: true }) : next;
    case "turn.completed":
      return { ...withoutTurn(next, turnId), outcome: null };
    case "turn.failed": {
      const error = (turn && turn.error) || null;
      next = { ...withoutTurn(next, turnId), outcome: "failed", error };
      return note(`Turn ${number} failed${error ? `: ${error}` : "."}`);
    }
    case "turn.cancelled":
      next = { ...withoutTurn(next, turnId), outcome: "cancelled" };
      return note(`Turn ${number} was cancelled.`);
    case "action.required":
      return withTurn(next, turnId, { number, cancelling: false, ...current, waiting: true });
    case "context.compacted":
      return note(compactedNote(event.data || {}));
    case "branch.switched":
      return typeof event.message_seq === "number" ? { ...next, leaf: event.message_seq } : next;
    default:
      return next; // a type this page does not know yet: nothing to show
  }
}

/** What the model is sent was compacted: said discreetly (the transcript itself is whole).
 * @param {Compacted} data @returns {string} */
function compactedNote(data) {
  if (data.kind === "summary") {
    return `Messages ${data.from_seq}-${data.through_seq} were summarised for the model to fit its context; they stay here in full.`;
  }
  return "Earlier tool outputs were set aside for the model to fit its context; it can read them back.";
}

/** @param {Transcript} t @param {Message} message @returns {Transcript} */
function commitMessage(t, message) {
  const partials = t.partials.filter((partial) => partial.messageSeq !== message.seq);
  const item = { kind: /** @type {const} */ ("message"), key: `message-${message.seq}`, message };
  return { ...withItem(t, item), partials, leaf: message.seq }; // a new message ends the path
}

/**
 * What the page shows: the messages of the active path (from the leaf up its parents), each with
 * its versions when it has more than one, and every other item (notes, actions) in log order.
 * @param {Transcript} t @returns {Item[]}
 */
export function visible(t) {
  /** @type {Map<number, Message>} */
  const bySeq = new Map();
  /** @type {Map<number, number[]>} */
  const children = new Map(); // parent seq (0: the roots) -> its children's seqs, in order
  for (const item of t.items) {
    if (item.kind !== "message") continue;
    const { message } = item;
    bySeq.set(message.seq, message);
    const parent = message.parent_seq ?? 0;
    children.set(parent, [...(children.get(parent) || []), message.seq]);
  }
  /** @type {Set<number>} */
  const onPath = new Set();
  for (let at = t.leaf; at !== null && at !== undefined && bySeq.has(at);) {
    onPath.add(at);
    at = /** @type {Message} */ (bySeq.get(at)).parent_seq ?? null;
  }
  /** @type {Item[]} */
  const shown = [];
  for (const item of t.items) {
    if (item.kind !== "message") {
      shown.push(item);
      continue;
    }
    if (!onPath.has(item.message.seq)) continue;
    const versions = children.get(item.message.parent_seq ?? 0) || [];
    shown.push(versions.length > 1 ? versionedItem(item, versions) : item);
  }
  return shown;
}

/** @type {WeakMap<MessageItem, {versions: string, item: MessageItem}>} */
const versioned = new WeakMap();

/** The item with its versions, the same object while they stay the same (redrawn only then).
 * @param {MessageItem} item @param {number[]} versions @returns {MessageItem} */
function versionedItem(item, versions) {
  const seen = versioned.get(item);
  if (seen && seen.versions === versions.join()) return seen.item;
  const made = { ...item, versions };
  versioned.set(item, { versions: versions.join(), item: made });
  return made;
}

/** @param {Transcript} t @param {Delta} delta @returns {Transcript} */
function applyDelta(t, delta) {
  if (t.items.some((item) => item.kind === "message" && item.message.seq === delta.message_seq)) {
    return t; // committed already: the commit wins
  }
  const shown = t.partials.find((partial) => partial.messageSeq === delta.message_seq);
  // A new attempt (another stream) replaces the old one.
  /** @type {Partial} */
  const partial =
    shown && shown.stream === delta.stream
      ? shown
      : {
          key: `partial-${delta.message_seq}-${delta.stream}`,
          messageSeq: delta.message_seq,
          stream: delta.stream,
          next: 0,
          text: "",
          calls: [],
        };
  if (delta.index < partial.next) return t; // shown already
  let { text, calls } = partial;
  for (const fragment of delta.fragments) {
    if (fragment.part === "text") {
      text = placed(text, fragment.offset, fragment.text);
      continue;
    }
    const call = calls.find((c) => c.index === fragment.index) || {
      index: fragment.index,
      id: null,
      name: null,
      arguments: "",
    };
    const grown = {
      ...call,
      id: fragment.call_id || call.id,
      name: fragment.name || call.name,
      arguments: placed(call.arguments, fragment.offset, fragment.text),
    };
    calls = [...calls.filter((c) => c.index !== fragment.index), grown];
    calls.sort((a, b) => a.index - b.index);
  }
  const grown = { ...partial, next: delta.index + 1, text, calls };
  const partials = t.partials.filter((p) => p.messageSeq !== delta.message_seq);
  partials.push(grown);
  partials.sort((a, b) => a.messageSeq - b.messageSeq);
  return { ...t, partials };
}

/** @param {Transcript} t @param {Discarded} discarded @returns {Transcript} */
function applyDiscard(t, discarded) {
  const partials = t.partials.filter(
    (partial) =>
      partial.messageSeq !== discarded.message_seq ||
      (discarded.stream !== "*" && discarded.stream !== partial.stream),
  );
  return partials.length === t.partials.length ? t : { ...t, partials };
}

/**
 * A piece of text placed at its offset: a piece seen again (a resumed stream) overwrites itself.
 * @param {string} text @param {number} offset @param {string} piece
 */
export function placed(text, offset, piece) {
  return text.slice(0, Math.min(offset, text.length)) + piece;
}

/** @param {Transcript} t @param {Item} item @returns {Transcript} the item appended, or in place
 * of the one with its key */
function withItem(t, item) {
  const at = t.items.findIndex((shown) => shown.key === item.key);
  if (at === -1) return { ...t, items: [...t.items, item] };
  const items = [...t.items];
  items[at] = item;
  return { ...t, items };
}

/**
 * @param {Transcript} t @param {string | null | undefined} id
 * @param {Omit<TurnState, "id">} state
 * @returns {Transcript}
 */
function withTurn(t, id, state) {
  if (!id) return t;
  const turn = { ...state, id };
  const at = t.turns.findIndex((shown) => shown.id === id);
  if (at === -1) return { ...t, turns: [...t.turns, turn] };
  const turns = [...t.turns];
  turns[at] = turn;
  return { ...t, turns };
}

/** @param {Transcript} t @param {string | null | undefined} id @returns {Transcript} */
function withoutTurn(t, id) {
  return { ...t, turns: t.turns.filter((turn) => turn.id !== id) };
}

/** @param {Transcript} t @param {string} callId */
export function hasAction(t, callId) {
  return t.items.some((item) => item.kind === "action" && item.action.call_id === callId);
}

/**
 * What a turn waits for (read from GET /v1/turns/{id} at its `action.required`), each call once.
 * @param {Transcript} t @param {Turn} turn @returns {Transcript}
 */
export function withActions(t, turn) {
  let next = t;
  for (const action of turn.actions || []) {
    if (hasAction(next, action.call_id)) continue; // drawn already (a replayed event)
    next = withItem(next, {
      kind: "action",
      key: `action-${action.call_id}`,
      turnId: turn.id,
      action,
    });
  }
  return next;
}

/**
 * An action answered from this page: shown as answered before the log says so.
 * @param {Transcript} t @param {string} callId @param {Answer} answer
 * @returns {Transcript}
 */
export function withAnswer(t, callId, answer) {
  const item = t.items.find((i) => i.kind === "action" && i.action.call_id === callId);
  if (!item || item.kind !== "action") return t;
  /** @type {Action} */
  const action = { ...item.action, answered: true };
  if ("approve" in answer) action.decision = answer.approve ? "approved" : "denied";
  return withItem(t, { ...item, action });
}

/**
 * A message queued behind the running turn is not in the log until its turn begins: shown
 * meanwhile (this tab only).
 * @param {Transcript} t @param {Turn} turn @param {string} text @returns {Transcript}
 */
export function withWaiting(t, turn, text) {
  if (turn.message_seq !== null || t.begun.includes(turn.id)) return t;
  if (t.waiting.some((waiting) => waiting.turnId === turn.id)) return t;
  return { ...t, waiting: [...t.waiting, { key: `waiting-${turn.id}`, turnId: turn.id, text }] };
}

/** A turn is queued or running: Cancel applies. @param {Transcript} t */
export function isBusy(t) {
  return t.turns.length > 0 || BUSY.has(t.status);
}

/**
 * The status line: a code (the `data-status` the page's style and tests read) and its words.
 * @param {Transcript | null} t null: a new conversation, not created yet
 * @param {Connection} connection
 * @returns {[string, string]}
 */
export function statusOf(t, connection) {
  if (!t) return ["new", "New conversation: your first message starts it."];
  if (connection === "closed") return ["closed", "Not connected"];
  if (t.turns.some((turn) => turn.cancelling) && t.status !== "idle") {
    return ["cancelling", "Cancelling…"];
  }
  if (BUSY.has(t.status)) {
    if (t.partials.length) return [t.status, "Answering…"];
    return [t.status, t.status === "tool_loop" ? "Running tools…" : "Thinking…"];
  }
  if (t.status === "failed") return ["failed", `Failed${t.error ? `: ${t.error}` : ""}`];
  if (t.turns.some((turn) => turn.waiting)) return ["requires_action", "Waiting for your answer"];
  if (t.turns.length) return ["queued", "Queued…"];
  if (t.outcome === "cancelled") return ["idle", "Ready (the last turn was cancelled)"];
  return ["idle", "Ready"];
}
