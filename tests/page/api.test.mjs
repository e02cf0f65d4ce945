// @ts-check
// The API module (app/api/page/api.js) against a fake fetch: what each call sends, what a refusal
// becomes, and which requests are retried (only those safe to repeat, with the same key).

import assert from "node:assert/strict";
import { test } from "node:test";

import { ApiError, createApi, NO_MESSAGES, newId } from "../../app/api/page/api.js";

/**
 * @typedef {{path: string, method: string, headers: Record<string, string>, body: unknown}} Sent
 * @typedef {Response | Error} Reply
 */

/** @param {number} status @param {unknown} [body] @param {Record<string, string>} [headers] */
const reply = (status, body, headers = {}) =>
  new Response(body === undefined ? null : JSON.stringify(body), {
    status,
    headers: { "Content-Type": "application/json", ...headers },
  });

/** An API on a fake fetch that answers `replies` in order and records what was sent.
 * @param {Reply[]} replies @param {string} [token] */
function fake(replies, token = "") {
  /** @type {Sent[]} */
  const sent = [];
  /** @type {number[]} */
  const slept = [];
  const api = createApi({
    token: () => token,
    fetch: async (input, init = {}) => {
      sent.push({
        path: String(input),
        method: String(init.method),
        headers: /** @type {Record<string, string>} */ (init.headers),
        body: init.body === undefined ? undefined : JSON.parse(String(init.body)),
      });
      const next = replies.shift();
      if (!next) throw new Error("no reply left");
      if (next instanceof Error) throw next;
      return next;
    },
    sleep: async (ms) => {
      slept.push(ms);
    },
  });
  return { api, sent, slept };
}

test("a request sends the bearer token and JSON, and returns the parsed body", async () => {
  const { api, sent } = fake([reply(201, { id: "c1" })], "secret");
  const body = { id: "c1", tools: ["add"], client_tools: [], context: { title: "Hi" } };
  assert.deepEqual(await api.createConversation(body), { id: "c1" });
  assert.equal(sent[0].method, "POST");
  assert.equal(sent[0].path, "/v1/conversations");
  assert.equal(sent[0].headers.Authorization, "Bearer secret");
  assert.equal(sent[0].headers["Content-Type"], "application/json");
  assert.deepEqual(sent[0].body, body);
});

test("without a token no Authorization header is sent", async () => {
  const { api, sent } = fake([reply(200, { data: [] })]);
  assert.deepEqual(await api.tools(), []);
  assert.equal("Authorization" in sent[0].headers, false);
});

test("a refusal throws ApiError with the problem's detail, code and status", async () => {
  const problem = { code: "conversation_busy", detail: "Still working on the last message." };
  const { api } = fake([reply(409, problem, { "Content-Type": "application/problem+json" })]);
  await assert.rejects(api.submit("c1", "Hi", "reject"), (error) => {
    assert.ok(error instanceof ApiError);
    assert.equal(error.message, problem.detail);
    assert.equal(error.code, "conversation_busy");
    assert.equal(error.status, 409);
    return true;
  });
});

test("a refusal without a problem body gets a code and detail from its status", async () => {
  const { api } = fake([new Response("oops", { status: 502, statusText: "Bad Gateway" })]);
  await assert.rejects(api.retry("c1"), { code: "http_502", status: 502, message: "Bad Gateway" });
});

test("a 503 is retried after its Retry-After, then the answer is returned", async () => {
  const { api, sent, slept } = fake([
    reply(503, {}, { "Retry-After": "2" }),
    reply(200, { id: "t1" }),
  ]);
  assert.deepEqual(await api.turn("t1"), { id: "t1" });
  assert.equal(sent.length, 2);
  assert.deepEqual(slept, [2000]);
});

test("a submit retried after a network failure sends the same Idempotency-Key", async () => {
  const accepted = { turn: { id: "t1" }, repeated: true, enqueued: true, detail: null };
  const { api, sent } = fake([new TypeError("offline"), reply(202, accepted)]);
  assert.deepEqual(await api.submit("c 1", "Hi", "enqueue"), accepted);
  assert.equal(sent.length, 2);
  assert.equal(sent[0].path, "/v1/conversations/c%201/messages");
  assert.deepEqual(sent[0].body, { text: "Hi", on_busy: "enqueue" });
  const keys = sent.map((request) => request.headers["Idempotency-Key"]);
  assert.match(keys[0], /^[0-9a-f-]{36}$/);
  assert.equal(keys[0], keys[1]);
});

test("a submit with files sends them; a file is read with the credentials as a blob URL", async () => {
  const accepted = { turn: { id: "t1" }, repeated: false, enqueued: true, detail: null };
  const image = new Response(new Uint8Array([137, 80, 78, 71]), {
    status: 200,
    headers: { "Content-Type": "image/png" },
  });
  const { api, sent } = fake([reply(202, accepted), image, reply(404, {})], "k1");
  const file = { name: "a.png", media_type: "image/png", data: "data:image/png;base64,iVBORw==" };
  await api.submit("c1", "Look", "reject", [file]);
  assert.deepEqual(sent[0].body, { text: "Look", on_busy: "reject", files: [file] });
  const url = await api.fileUrl("f 1");
  assert.equal(sent[1].path, "/v1/files/f%201");
  assert.equal(sent[1].headers.Authorization, "Bearer k1");
  assert.match(String(url), /^blob:/);
  assert.equal(await api.fileUrl("gone"), null); // a 404: nothing shown, nothing thrown
});

test("each submit has its own Idempotency-Key", async () => {
  const accepted = { turn: { id: "t1" }, repeated: false, enqueued: true, detail: null };
  const { api, sent } = fake([reply(202, accepted), reply(202, accepted)]);
  await api.submit("c1", "Hi", "reject");
  await api.submit("c1", "Hi", "reject");
  assert.notEqual(sent[0].headers["Idempotency-Key"], sent[1].headers["Idempotency-Key"]);
});

test("the server not answering after the retries is a network ApiError", async () => {
  const { api, sent, slept } = fake([new TypeError("a"), new TypeError("b"), new TypeError("c")]);
  await assert.rejects(api.cancel("c1"), { code: "network", status: 0 });
  assert.equal(sent.length, 3);
  assert.deepEqual(slept, [500, 1000]);
});

test("a retry of a failed turn is sent once: repeating it could be refused", async () => {
  const { api, sent } = fake([reply(503, {})]);
  await assert.rejects(api.retry("c1"), { status: 503 });
  assert.equal(sent.length, 1);
});

test("a 204 answers null", async () => {
  const { api } = fake([new Response(null, { status: 204 })]);
  assert.equal(await api.cancel("c1"), null);
});

test("the list asks 30 at a time, older ones before a cursor", async () => {
  const page = { data: [], next_before: null };
  const { api, sent } = fake([reply(200, page), reply(200, page)]);
  await api.conversations(null);
  await api.conversations("c9");
  assert.deepEqual(
    sent.map((request) => request.path),
    ["/v1/conversations?limit=30", "/v1/conversations?limit=30&before=c9"],
  );
});

test("a conversation is read without its transcript; the stream follows it for good", async () => {
  const { api, sent } = fake([reply(200, { id: "c1" })]);
  await api.conversation("c1");
  assert.equal(sent[0].path, `/v1/conversations/c1?after_seq=${NO_MESSAGES}`);
  assert.equal(api.streamUrl("c1"), "/v1/conversations/c1/stream?until=never");
});

test("an answer posts the outputs to the turn's actions", async () => {
  const { api, sent } = fake([reply(200, { id: "t1" })]);
  await api.answer("t1", [{ call_id: "erase", approve: true }]);
  assert.equal(sent[0].path, "/v1/turns/t1/actions");
  assert.deepEqual(sent[0].body, { outputs: [{ call_id: "erase", approve: true }] });
});

test("newId makes version 4 UUIDs", () => {
  assert.match(newId(), /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
});
