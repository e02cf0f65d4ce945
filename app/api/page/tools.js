// @ts-check
// Tools: the checkboxes of the workers' tools for a new conversation, and the tools this page
// runs itself when the model calls them (client tools: the turn waits for their output).

import { h } from "./dom.js";

/**
 * @typedef {import("./api.js").Tool} Tool
 * @typedef {import("./api.js").ClientTool} ClientTool
 * @typedef {{description: string, run: (args: Record<string, unknown>) => string}} BrowserTool
 */

/** @type {Record<string, BrowserTool>} */
export const BROWSER_TOOLS = {
  browser_locale: {
    description: "The user's time zone, language and local time, from their browser.",
    run: () => {
      const options = Intl.DateTimeFormat().resolvedOptions();
      return JSON.stringify({
        timeZone: options.timeZone,
        language: navigator.language,
        localTime: new Date().toString(),
      });
    },
  },
};

/** @param {string} name */
export const runsHere = (name) => Object.hasOwn(BROWSER_TOOLS, name);

/** The browser tools as a new conversation declares them. @returns {ClientTool[]} */
export function browserToolDefinitions() {
  return Object.entries(BROWSER_TOOLS).map(([name, tool]) => ({
    name,
    description: tool.description,
    parameters: { type: "object", properties: {} },
  }));
}

/**
 * A browser tool's output (its error as text: the model reads it like any tool error).
 * @param {string} name @param {Record<string, unknown>} args
 */
export function runBrowserTool(name, args) {
  try {
    return String(BROWSER_TOOLS[name].run(args));
  } catch (error) {
    return `Error: ${error}`;
  }
}

/** The checkboxes of the workers' tools, all checked. @param {Tool[]} tools */
export function toolChoices(tools) {
  if (!tools.length) return [h("p", { class: "hint", text: "The workers offer no tools yet." })];
  return tools.map((tool) => {
    const id = `tool-${tool.name}`;
    const description = (tool.description || "").split(/(?<=\.)\s/)[0];
    return h(
      "div",
      { class: "tool-choice" },
      h("input", {
        type: "checkbox",
        id,
        name: "tool",
        value: tool.name,
        checked: true,
        "aria-describedby": `${id}-about`,
      }),
      h("label", { for: id }, h("b", { text: tool.name })),
      h("small", { id: `${id}-about`, class: "hint", text: description }),
    );
  });
}

/** The tools checked in `container`. @param {Element} container */
export function chosenTools(container) {
  return [...container.querySelectorAll("input[name=tool]:checked")].map(
    (box) => /** @type {HTMLInputElement} */ (box).value,
  );
}
