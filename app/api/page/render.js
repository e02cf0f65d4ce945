// @ts-check
// Rendering: the transcript's view model as DOM elements, redrawn by key only where an item
// changed (so a focused button or a selection survives the next event).

import { h } from "./dom.js";
import { markdown } from "./markdown.js";

/**
 * @typedef {import("./transcript.js").Item} Item
 * @typedef {import("./transcript.js").ActionItem} ActionItem
 * @typedef {import("./transcript.js").Message} Message
 * @typedef {import("./transcript.js").Partial} Partial
 * @typedef {import("./transcript.js").Waiting} Waiting
 * @typedef {import("./transcript.js").ToolCall} ToolCall
 * @typedef {import("./transcript.js").Answer} Answer
 * @typedef {import("./transcript.js").MessageItem} MessageItem
 * @typedef {{onAnswer: (item: ActionItem, answer: Answer, element: HTMLElement) => void,
 *   runsHere: (name: string) => boolean, onEdit?: (seq: number, text: string) => void,
 *   onRegenerate?: (seq: number) => void, onSwitch?: (seq: number) => void,
 *   fileUrl?: (id: string) => Promise<string | null>}} ActionHandlers
 * @typedef {import("./transcript.js").FileRef} FileRef
 */

/** Words for a screen reader only. @param {string} text */
const spoken = (text) => h("span", { class: "visually-hidden", text });

/** @type {WeakMap<Element, Map<string, {item: object, element: HTMLElement}>>} */
const drawn = new WeakMap();

/**
 * Make `container`'s children the elements of `items`, in order: an item seen before (the same
 * object) keeps its element, a changed one is built again, one gone is removed.
 * @template {{key: string}} T
 * @param {Element} container
 * @param {T[]} items
 * @param {(item: T) => HTMLElement} build
 */
export function reconcile(container, items, build) {
  const before = drawn.get(container) || new Map();
  /** @type {Map<string, {item: object, element: HTMLElement}>} */
  const after = new Map();
  items.forEach((item, at) => {
    const old = before.get(item.key);
    const element = old && old.item === item ? old.element : build(item);
    after.set(item.key, { item, element });
    const here = container.children[at] || null;
    if (here !== element) container.insertBefore(element, here);
  });
  while (container.children.length > items.length) container.lastElementChild?.remove();
  drawn.set(container, after);
}

/** @param {Item} item @param {ActionHandlers} handlers @returns {HTMLElement} */
export function itemElement(item, handlers) {
  if (item.kind === "message") return withVersions(item, handlers);
  if (item.kind === "action") return actionElement(item, handlers);
  return h("p", {
    class: `note ${item.event.replace(".", "-")}`,
    "data-role": "turn-note",
    "data-event": item.event,
    "data-event-seq": item.seq,
    text: item.text,
  });
}

/**
 * A message with what the user can do to it: edit their own, regenerate an answer, step through
 * its versions ("‹ 2 / 3 ›").
 * @param {MessageItem} item @param {ActionHandlers} handlers @returns {HTMLElement}
 */
function withVersions(item, handlers) {
  const { message, versions } = item;
  const element = messageElement(message, handlers);
  const controls = h("div", { class: "msg-controls" });
  if (versions && versions.length > 1 && handlers.onSwitch) {
    const onSwitch = handlers.onSwitch;
    const at = versions.indexOf(message.seq);
    const step = (
      /** @type {number} */ by,
      /** @type {string} */ label,
      /** @type {string} */ name,
    ) =>
      button(
        {
          class: "version-step",
          "data-action": name,
          "aria-label": label,
          text: by < 0 ? "‹" : "›",
          disabled: at + by < 0 || at + by >= versions.length,
        },
        () => onSwitch(versions[at + by]),
      );
    controls.append(
      step(-1, "previous version", "previous-version"),
      h("span", { "data-role": "version", text: `${at + 1} / ${versions.length}` }),
      step(1, "next version", "next-version"),
    );
  }
  if (message.role === "user" && handlers.onEdit) {
    const onEdit = handlers.onEdit;
    controls.append(
      button({ "data-action": "edit", text: "Edit" }, () => editInPlace(element, message, onEdit)),
    );
  }
  const answer = message.role === "assistant" && message.content;
  if (answer && handlers.onRegenerate) {
    const onRegenerate = handlers.onRegenerate;
    controls.append(
      button({ "data-action": "regenerate", text: "Regenerate" }, () => onRegenerate(message.seq)),
    );
  }
  if (controls.children.length) element.append(controls);
  return element;
}

/** The user's message as a text box with Save and Cancel, in place.
 * @param {HTMLElement} element @param {Message} message
 * @param {(seq: number, text: string) => void} onEdit */
function editInPlace(element, message, onEdit) {
  if (element.querySelector(".edit-form")) return;
  const box = /** @type {HTMLTextAreaElement} */ (
    h("textarea", { class: "edit-box", "data-role": "edit-box", rows: 3, "aria-label": "Edit" })
  );
  box.value = message.content || "";
  const form = h("div", { class: "edit-form" }, box);
  form.append(
    button({ "data-action": "save-edit", text: "Save and send" }, () =>
      onEdit(message.seq, box.value),
    ),
    button({ "data-action": "cancel-edit", text: "Cancel" }, () => form.remove()),
  );
  element.append(form);
  box.focus();
}

/** A button that calls `onClick`.
 * @param {Record<string, string | number | boolean | null | undefined>} attributes
 * @param {() => void} onClick */
function button(attributes, onClick) {
  const made = h("button", { type: "button", ...attributes });
  made.addEventListener("click", onClick);
  return made;
}

/** @param {Message} message @param {ActionHandlers} [handlers] @returns {HTMLElement} */
function messageElement(message, handlers) {
  const seq = message.seq;
  if (message.role === "user") {
    const files = message.files || [];
    return h(
      "div",
      { class: "msg user", "data-role": "user", "data-seq": seq },
      spoken("You: "),
      h("div", { class: "text", text: message.content || "" }),
      files.length
        ? h("div", { class: "files" }, ...files.map((file) => fileElement(file, handlers)))
        : null,
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
      message.content ? h("div", { class: "text markdown" }, markdown(message.content)) : null,
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

/**
 * A message's file: an image shown (read with the page's credentials), any other file named.
 * @param {FileRef} file @param {ActionHandlers} [handlers] @returns {HTMLElement}
 */
function fileElement(file, handlers) {
  const name = file.name || file.media_type;
  if (!file.media_type.startsWith("image/")) {
    return h("span", { class: "file-chip", "data-role": "file", text: `📎 ${name}` });
  }
  const image = /** @type {HTMLImageElement} */ (
    h("img", { class: "file-image", "data-role": "file", alt: name, "data-file-id": file.id })
  );
  handlers?.fileUrl?.(file.id).then((url) => {
    if (url) image.src = url;
  });
  return image;
}

/** @param {ToolCall} call */
const callName = (call) => call.name || (call.function && call.function.name) || "tool";
/** @param {ToolCall} call */
const callArguments = (call) =>
  call.arguments !== undefined ? call.arguments : (call.function && call.function.arguments) || "";

/**
 * @param {string | null} name @param {unknown} args @param {string | null | undefined} id
 * @param {boolean} partial
 */
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

/** Arguments as compact JSON, or as they are while still forming. @param {unknown} args */
function shownArguments(args) {
  if (typeof args !== "string") return JSON.stringify(args);
  try {
    return JSON.stringify(JSON.parse(args));
  } catch {
    return args;
  }
}

/**
 * A reply still forming: plain text (half a Markdown table would redraw as something else at
 * each delta); its committed message shows the Markdown.
 * @param {Partial} partial
 */
export function partialElement(partial) {
  return h(
    "div",
    {
      class: "msg assistant partial",
      "data-role": "assistant",
      "data-partial": "true",
      "data-message-seq": partial.messageSeq,
      "aria-busy": "true",
    },
    spoken("Assistant (writing): "),
    h("div", { class: "text", text: partial.text, hidden: partial.text === "" }),
    h(
      "div",
      { class: "calls" },
      ...partial.calls.map((call) => toolCallElement(call.name, call.arguments, call.id, true)),
    ),
  );
}

/** A message queued behind the running turn. @param {Waiting} waiting */
export function waitingElement(waiting) {
  return h(
    "div",
    { class: "msg user waiting", "data-role": "waiting", "data-turn-id": waiting.turnId },
    spoken("You (queued): "),
    h("div", { class: "text", text: waiting.text }),
    h("small", { class: "hint", text: "Queued: sent when the current turn ends." }),
  );
}

/**
 * What a turn waits for: a question, an approval (with its buttons), a client tool.
 * @param {ActionItem} item @param {ActionHandlers} handlers
 */
function actionElement(item, { onAnswer, runsHere }) {
  const action = item.action;
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
      h("div", { class: "text question", text: String(action.arguments.question || "") }),
      action.answered ? null : h("small", { class: "hint", text: "Your next message answers it." }),
    );
  }
  if (action.kind === "approval") {
    const element = h(
      "div",
      attributes,
      h("div", { class: "tool-head" }, "Approve running ", h("b", { text: action.name }), "?"),
      h("pre", { class: "tool-output", text: shownArguments(JSON.stringify(action.arguments)) }),
      action.reason
        ? h("p", { class: "reason", text: `Why you are asked: ${action.reason}.` })
        : null,
      action.decision
        ? h("small", { class: "hint decision", text: `You ${action.decision} it.` })
        : null,
    );
    if (!action.answered) {
      /** @param {boolean} approve */
      const button = (approve) => {
        const text = approve ? "Approve" : "Deny";
        const choice = h("button", { type: "button", class: approve ? "approve" : "deny", text });
        choice.addEventListener("click", () => onAnswer(item, { approve }, element));
        return choice;
      };
      element.append(h("div", { class: "approval-buttons" }, button(true), button(false)));
    }
    return element;
  }
  const state = action.answered ? "Done." : runsHere(action.name) ? "Running…" : "Waiting for it.";
  return h(
    "div",
    attributes,
    h("div", { class: "tool-head" }, "Runs in your browser: ", h("b", { text: action.name })),
    h("small", { class: "hint", text: state }),
  );
}
