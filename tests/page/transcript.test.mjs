// @ts-check
// The transcript (app/api/page/transcript.js) as a specification: the page's view model after each
// event of a conversation's stream, walked event by event as h11's tests walk its state machine.

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import {
  HANDLED,
  SKIPPED,
  apply,
  empty,
  isBusy,
  placed,
  statusOf,
  visible,
  withActions,
  withAnswer,
  withWaiting,
} from "../../app/api/page/transcript.js";

/**
 * @typedef {import("../../app/api/page/transcript.js").Transcript} Transcript
 * @typedef {import("../../app/api/page/transcript.js").StreamEvent} StreamEvent
 * @typedef {import("../../app/api/page/transcript.js").Turn} Turn
 */

const TURN = "11111111-1111-4111-8111-111111111111";
const NEXT_TURN = "22222222-2222-4222-8222-222222222222";

/** A committed event. @param {number} seq @param {string} type @param {object} [fields]
 * @returns {StreamEvent} */
const committed = (seq, type, fields = {}) => ({
  type,
  data: { seq, type, turn_id: TURN, turn: { id: TURN, number: 1, message_seq: 1 }, ...fields },
});

/** @param {number} seq @param {number} messageSeq @param {string} role @param {string | null} content
 * @param {object} [fields] */
const message = (seq, messageSeq, role, content, fields = {}) =>
  committed(seq, "message.committed", {
    message_seq: messageSeq,
    message: { seq: messageSeq, role, content, tool_calls: [], ...fields },
  });

/** @param {number} messageSeq @param {string} stream @param {number} index
 * @param {object[]} fragments @returns {StreamEvent} */
const delta = (messageSeq, stream, index, fragments) => ({
  type: "message.delta",
  data: { message_seq: messageSeq, stream, index, text: "", fragments },
});

/** @param {number} offset @param {string} text */
const text = (offset, text) => ({ part: "text", index: 0, offset, text });

/** @param {number} messageSeq @param {string} stream @returns {StreamEvent} */
const discarded = (messageSeq, stream) => ({
  type: "message.discarded",
  data: { message_seq: messageSeq, stream },
});

/** @param {StreamEvent[]} events @param {Transcript} [from] */
const walk = (events, from = empty()) => events.reduce(apply, from);

/** @param {Transcript} t */
const shown = (t) =>
  t.items.map((item) =>
    item.kind === "message"
      ? `${item.message.role}:${item.message.content}`
      : item.kind === "note"
        ? `note:${item.text}`
        : `action:${item.action.call_id}`,
  );

/** A whole turn with a tool call, streamed words, a discarded attempt, and its end. */
const TURN_EVENTS = [
  committed(1, "turn.queued"),
  committed(2, "turn.started"),
  committed(3, "status.changed", { status: "processing" }),
  message(4, 1, "user", "What is 2 plus 3?"),
  message(5, 2, "assistant", null, {
    tool_calls: [{ id: "call_add", name: "add", arguments: '{"a":2,"b":3}' }],
  }),
  committed(6, "status.changed", { status: "tool_loop" }),
  message(7, 3, "tool", "5", { tool_call_id: "call_add", tool_name: "add" }),
  committed(8, "status.changed", { status: "processing" }),
  delta(4, "a", 0, [text(0, "Fi")]),
  discarded(4, "a"),
  delta(4, "b", 0, [text(0, "Two plus")]),
  delta(4, "b", 1, [text(8, " three is five.")]),
  message(9, 4, "assistant", "Two plus three is five."),
  committed(10, "status.changed", { status: "idle" }),
  committed(11, "turn.completed", { turn: { id: TURN, number: 1, status: "completed" } }),
];

describe("deltas", () => {
  test("deltas merge into one partial reply, each placed at its offset", () => {
    const t = walk([delta(4, "s", 0, [text(0, "Two")]), delta(4, "s", 1, [text(3, " plus")])]);
    assert.equal(t.partials.length, 1);
    assert.equal(t.partials[0].text, "Two plus");
    assert.equal(t.partials[0].messageSeq, 4);
  });

  test("a delta seen again (a resumed stream) changes nothing", () => {
    const once = walk([delta(4, "s", 0, [text(0, "Two")]), delta(4, "s", 1, [text(3, " plus")])]);
    assert.equal(apply(once, delta(4, "s", 1, [text(3, " plus")])), once);
    assert.equal(apply(once, delta(4, "s", 0, [text(0, "Two")])), once);
  });

  test("a piece placed at an offset already covered overwrites the rest", () => {
    assert.equal(placed("Two plux", 7, "s"), "Two pluss".slice(0, 8));
    assert.equal(placed("ab", 5, "c"), "abc");
  });

  test("tool call arguments form by call index, with the call's id and name", () => {
    const t = walk([
      delta(2, "s", 0, [
        { part: "call", index: 1, offset: 0, text: '{"b"', call_id: "c1", name: "add" },
      ]),
      delta(2, "s", 1, [
        { part: "call", index: 0, offset: 0, text: "{}", call_id: "c0", name: "now" },
        { part: "call", index: 1, offset: 4, text: ":3}" },
      ]),
    ]);
    assert.deepEqual(
      t.partials[0].calls.map((call) => [call.index, call.id, call.name, call.arguments]),
      [
        [0, "c0", "now", "{}"],
        [1, "c1", "add", '{"b":3}'],
      ],
    );
  });

  test("partial replies of two messages are kept in message order", () => {
    const t = walk([delta(6, "s", 0, [text(0, "later")]), delta(4, "s", 0, [text(0, "first")])]);
    assert.deepEqual(
      t.partials.map((p) => p.messageSeq),
      [4, 6],
    );
  });

  test("a new stream (a retried model call) replaces the old attempt's words", () => {
    const t = walk([delta(4, "a", 0, [text(0, "Fir")]), delta(4, "b", 0, [text(0, "Two")])]);
    assert.equal(t.partials.length, 1);
    assert.equal(t.partials[0].stream, "b");
    assert.equal(t.partials[0].text, "Two");
  });
});

describe("discards and commits", () => {
  test("a discard drops the partial message of its stream", () => {
    const t = walk([delta(4, "a", 0, [text(0, "Fir")]), discarded(4, "a")]);
    assert.deepEqual(t.partials, []);
  });

  test("a discard of another stream leaves the partial message", () => {
    const before = walk([delta(4, "b", 0, [text(0, "Two")])]);
    assert.equal(apply(before, discarded(4, "a")), before);
  });

  test("a discard of every stream (*) drops it whatever its stream", () => {
    const t = walk([delta(4, "b", 0, [text(0, "Two")]), discarded(4, "*")]);
    assert.deepEqual(t.partials, []);
  });

  test("the committed message replaces its preview", () => {
    const t = walk([
      delta(4, "s", 0, [text(0, "Two plus")]),
      message(9, 4, "assistant", "Two plus three."),
    ]);
    assert.deepEqual(t.partials, []);
    assert.deepEqual(shown(t), ["assistant:Two plus three."]);
  });

  test("a delta of a message already committed is ignored: the commit wins", () => {
    const t = walk([message(9, 4, "assistant", "Done."), delta(4, "s", 0, [text(0, "Do")])]);
    assert.deepEqual(t.partials, []);
  });
});

describe("committed events", () => {
  test("a type passed over on purpose only moves the log past it", () => {
    const started = walk(TURN_EVENTS.slice(0, 3));
    for (const type of SKIPPED) {
      assert.equal(HANDLED.has(type), false, type);
      const next = apply(started, committed(started.lastSeq + 1, type, { data: {} }));
      assert.deepEqual(next, { ...started, lastSeq: started.lastSeq + 1 }, type);
    }
  });

  test("a whole turn: the user's message, the call, its result, the answer, in order", () => {
    const t = walk(TURN_EVENTS);
    assert.deepEqual(shown(t), [
      "user:What is 2 plus 3?",
      "assistant:null",
      "tool:5",
      "assistant:Two plus three is five.",
    ]);
    assert.deepEqual(t.partials, []);
    assert.equal(t.lastSeq, 11);
    assert.equal(t.status, "idle");
    assert.deepEqual(t.turns, []);
    assert.deepEqual(statusOf(t, "open"), ["idle", "Ready"]);
    assert.equal(isBusy(t), false);
  });

  test("the status line follows the turn: thinking, running tools, answering", () => {
    const upTo = (/** @type {number} */ n) => walk(TURN_EVENTS.slice(0, n));
    assert.deepEqual(statusOf(upTo(1), "open"), ["queued", "Queued…"]);
    assert.deepEqual(statusOf(upTo(3), "open"), ["processing", "Thinking…"]);
    assert.deepEqual(statusOf(upTo(6), "open"), ["tool_loop", "Running tools…"]);
    assert.deepEqual(statusOf(upTo(12), "open"), ["processing", "Answering…"]);
    assert.equal(isBusy(upTo(12)), true);
    assert.deepEqual(statusOf(upTo(12), "closed"), ["closed", "Not connected"]);
    assert.deepEqual(statusOf(null, "closed")[0], "new");
  });

  test("an event at or below the last seq is shown already: the same transcript", () => {
    const t = walk(TURN_EVENTS.slice(0, 7));
    for (const event of TURN_EVENTS.slice(0, 7)) assert.equal(apply(t, event), t);
  });

  test("a reconnection with a cursor gives the same view, whatever the boundary", () => {
    const straight = walk(TURN_EVENTS);
    for (let cut = 0; cut <= TURN_EVENTS.length; cut++) {
      for (let from = 0; from <= cut; from++) {
        // Shown up to `cut`, then the stream resumes at `from` (a replay of what was seen).
        const resumed = walk(TURN_EVENTS.slice(from), walk(TURN_EVENTS.slice(0, cut)));
        assert.deepEqual(resumed, straight, `cut at ${cut}, resumed from ${from}`);
      }
    }
  });

  test("a reload mid-reply shows the same words as the tab that stayed", () => {
    const midway = TURN_EVENTS.slice(0, 12);
    assert.deepEqual(walk(midway.concat(midway)), walk(midway));
  });

  test("no event is mutated in place: the old transcript stays as it was", () => {
    const before = walk(TURN_EVENTS.slice(0, 9));
    const copy = structuredClone(before);
    walk(TURN_EVENTS.slice(9), before);
    assert.deepEqual(before, copy);
  });

  test("an event type the page does not know only moves the cursor", () => {
    const t = walk([committed(1, "turn.branched", { turn_id: null })]);
    assert.deepEqual({ ...t, lastSeq: 0 }, empty());
    assert.equal(t.lastSeq, 1);
  });

  test("a compaction of what the model is sent is a discreet note; nothing is taken away", () => {
    const t = walk([
      committed(1, "turn.started"),
      message(2, 1, "user", "hi"),
      committed(3, "context.compacted", { data: { kind: "elide", from_seq: 1, through_seq: 1 } }),
      committed(4, "context.compacted", {
        data: { kind: "summary", reason: "threshold", from_seq: 1, through_seq: 1 },
      }),
    ]);
    assert.deepEqual(shown(t), [
      "user:hi",
      "note:Earlier tool outputs were set aside for the model to fit its context; it can read them back.",
      "note:Messages 1-1 were summarised for the model to fit its context; they stay here in full.",
    ]);
  });

  test("a resumed turn (a crash recovered) says so", () => {
    const t = walk([committed(1, "turn.started"), committed(2, "turn.resumed")]);
    assert.deepEqual(shown(t), ["note:Turn 1 resumed after an interruption."]);
  });
});

describe("requires_action", () => {
  const turn = /** @type {Turn} */ ({
    id: TURN,
    number: 1,
    message_seq: 1,
    actions: [
      { call_id: "erase", kind: "approval", name: "erase_notes", arguments: {}, answered: false },
      {
        call_id: "where",
        kind: "client_tool",
        name: "browser_locale",
        arguments: {},
        answered: false,
      },
    ],
  });
  const waiting = walk([
    committed(1, "turn.started"),
    committed(2, "status.changed", { status: "idle" }),
    committed(3, "action.required"),
  ]);

  test("action.required: the turn waits for the user", () => {
    assert.deepEqual(statusOf(waiting, "open"), ["requires_action", "Waiting for your answer"]);
    assert.equal(isBusy(waiting), true);
  });

  test("what it waits for is shown once per call, however often it is read", () => {
    const once = withActions(waiting, turn);
    assert.deepEqual(shown(once), ["action:erase", "action:where"]);
    assert.equal(withActions(once, turn), once);
  });

  test("an answer from this page marks the action answered, an approval with its decision", () => {
    const t = withAnswer(
      withAnswer(withActions(waiting, turn), "erase", { approve: true }),
      "where",
      {
        output: "{}",
      },
    );
    const actions = t.items.flatMap((item) => (item.kind === "action" ? [item.action] : []));
    assert.deepEqual(
      actions.map((a) => [a.call_id, a.answered, a.decision]),
      [
        ["erase", true, "approved"],
        ["where", true, undefined],
      ],
    );
    assert.equal(withAnswer(t, "unknown", { approve: false }), t);
  });

  test("the turn started again (the answers are in) no longer waits", () => {
    const t = apply(waiting, committed(4, "turn.started"));
    assert.deepEqual(
      statusOf(apply(t, committed(5, "status.changed", { status: "processing" })), "open"),
      ["processing", "Thinking…"],
    );
    assert.equal(t.turns[0].waiting, false);
  });
});

describe("cancel, errors and queued messages", () => {
  test("cancel: cancelling while it runs, then a note and a ready page", () => {
    const running = walk([
      committed(1, "turn.started"),
      committed(2, "status.changed", { status: "tool_loop" }),
    ]);
    const cancelling = apply(running, committed(3, "turn.cancel_requested"));
    assert.deepEqual(statusOf(cancelling, "open"), ["cancelling", "Cancelling…"]);
    const done = walk(
      [committed(4, "status.changed", { status: "idle" }), committed(5, "turn.cancelled")],
      cancelling,
    );
    assert.deepEqual(shown(done), ["note:Turn 1 was cancelled."]);
    assert.deepEqual(statusOf(done, "open"), ["idle", "Ready (the last turn was cancelled)"]);
    assert.equal(isBusy(done), false);
  });

  test("a cancel request for a turn the page never saw changes only the cursor", () => {
    const t = walk([committed(1, "turn.cancel_requested")]);
    assert.deepEqual(t.turns, []);
  });

  test("a failed turn: a note with its error, and the error in the status line", () => {
    const failedTurn = { id: TURN, number: 1, message_seq: 1, error: "the model refused" };
    const t = walk([
      committed(1, "turn.started"),
      committed(2, "status.changed", { status: "failed" }),
      committed(3, "turn.failed", { turn: failedTurn }),
    ]);
    assert.deepEqual(shown(t), ["note:Turn 1 failed: the model refused"]);
    assert.deepEqual(statusOf(t, "open"), ["failed", "Failed: the model refused"]);
    const retried = walk(
      [committed(4, "turn.started"), committed(5, "status.changed", { status: "processing" })],
      t,
    );
    assert.equal(retried.error, null);
  });

  test("a message queued behind a turn shows as waiting until its own turn begins", () => {
    const queued = { id: NEXT_TURN, number: 2, message_seq: null };
    const t = withWaiting(empty(), queued, "And then?");
    assert.deepEqual(
      t.waiting.map((w) => w.text),
      ["And then?"],
    );
    assert.equal(withWaiting(t, queued, "And then?"), t);
    const stillQueued = apply(t, committed(1, "turn.queued", { turn_id: NEXT_TURN }));
    assert.equal(stillQueued.waiting.length, 1);
    const begun = apply(stillQueued, committed(2, "turn.started", { turn_id: NEXT_TURN }));
    assert.deepEqual(begun.waiting, []);
    assert.equal(withWaiting(begun, queued, "And then?"), begun, "its message is in the log");
  });

  test("a submit whose message is in the transcript already is not shown as waiting", () => {
    const t = withWaiting(empty(), { id: NEXT_TURN, number: 2, message_seq: 5 }, "Hi");
    assert.deepEqual(t.waiting, []);
  });
});

describe("the tree: the active path, each message with its versions", () => {
  /** @param {Transcript} t */
  const shown = (t) =>
    visible(t).map((item) =>
      item.kind === "message"
        ? [item.message.seq, (item.versions || []).join(",")]
        : [item.kind, ""],
    );
  // hello (1) answered (2); edited (3, a new root) and answered (4); 2 regenerated as 5 under 1
  const edited = [
    message(1, 1, "user", "hello"),
    message(2, 2, "assistant", "HELLO", { parent_seq: 1 }),
    committed(3, "branch.switched", { message_seq: null }),
    message(4, 3, "user", "bonjour", { parent_seq: null }),
    message(5, 4, "assistant", "BONJOUR", { parent_seq: 3 }),
  ];

  test("a new message ends the path; an edit's versions are counted", () => {
    const t = walk(edited);
    assert.equal(t.leaf, 4);
    assert.deepEqual(shown(t), [
      [3, "1,3"],
      [4, ""],
    ]);
  });

  test("branch.switched moves the path to the message it names, as a replay shows it", () => {
    const back = walk([...edited, committed(6, "branch.switched", { message_seq: 2 })]);
    assert.deepEqual(shown(back), [
      [1, "1,3"],
      [2, ""],
    ]);
    const regenerated = walk([
      ...edited,
      committed(6, "branch.switched", { message_seq: 1 }),
      message(7, 5, "assistant", "HI", { parent_seq: 1 }),
    ]);
    assert.deepEqual(shown(regenerated), [
      [1, "1,3"],
      [5, "2,5"],
    ]);
    // replayed from the start, or resumed from any event: the same page
    for (let at = 0; at <= 7; at += 1) {
      const events = [
        ...edited,
        committed(6, "branch.switched", { message_seq: 1 }),
        message(7, 5, "assistant", "HI", { parent_seq: 1 }),
      ];
      const resumed = walk(events.slice(at), walk(events.slice(0, at)));
      assert.deepEqual(shown(resumed), shown(regenerated));
    }
  });

  test("an item keeps its object while its versions stay the same (drawn once)", () => {
    const t = walk(edited);
    assert.equal(visible(t)[0], visible(t)[0]);
    const single = walk([message(1, 1, "user", "hi")]);
    assert.equal(visible(single)[0], single.items[0]);
  });
});
