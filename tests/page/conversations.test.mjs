// @ts-check
// The conversation list's pure parts (app/api/page/conversations.js) and the tools a new
// conversation declares (app/api/page/tools.js).

import assert from "node:assert/strict";
import { test } from "node:test";

import { merged, titleFromMessage, titleOf } from "../../app/api/page/conversations.js";
import { browserToolDefinitions, runsHere } from "../../app/api/page/tools.js";

/** @param {string} id */
const conversation = (id) => ({
  id,
  status: "idle",
  model: "demo/offline",
  tools: [],
  context: { title: id },
  created_at: "2026-11-25T18:00:00Z",
});

test("a title is the first message's words on one line", () => {
  assert.equal(titleFromMessage("  What is\n\n2 plus   3?  "), "What is 2 plus 3?");
});

test("a long first message is cut to 80 characters with an ellipsis", () => {
  const title = titleFromMessage("word ".repeat(40));
  assert.equal(title.length, 80);
  assert.ok(title.endsWith("…"));
});

test("a conversation without a title of ours is called Conversation", () => {
  assert.equal(titleOf({ context: null }), "Conversation");
  assert.equal(titleOf({ context: {} }), "Conversation");
  assert.equal(titleOf(null), "Conversation");
  assert.equal(titleOf({ context: { title: "Tents" } }), "Tents");
});

test("the first page replaces the list, an older page is appended to it", () => {
  const shown = [conversation("b"), conversation("a")];
  const newest = { data: [conversation("c"), conversation("b")], next_before: "b" };
  assert.deepEqual(
    merged(shown, newest, false).map((c) => c.id),
    ["c", "b"],
  );
  const older = { data: [conversation("z")], next_before: null };
  assert.deepEqual(
    merged(shown, older, true).map((c) => c.id),
    ["b", "a", "z"],
  );
});

test("a new conversation declares the browser's tools, which this page runs", () => {
  const tools = browserToolDefinitions();
  assert.deepEqual(
    tools.map((tool) => tool.name),
    ["browser_locale"],
  );
  assert.deepEqual(tools[0].parameters, { type: "object", properties: {} });
  assert.equal(runsHere("browser_locale"), true);
  assert.equal(runsHere("add"), false);
  assert.equal(runsHere("toString"), false); // not an inherited name
});
