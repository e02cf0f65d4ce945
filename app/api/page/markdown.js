// @ts-check
// Markdown: an assistant's reply as safe HTML, by marked (GFM: code blocks, lists, tables, links)
// then DOMPurify (no script, no event handler, no `javascript:` URL ever reaches the page, and no
// form, control, frame or style that would let a reply pose as the page).

import { Marked } from "./vendor/marked.esm.js";
import DOMPurify from "./vendor/purify.es.js";

// Raw HTML in a reply is not ours to run: marked passes it through, DOMPurify strips what runs.
const marked = new Marked({ gfm: true, breaks: false, async: false });

// A reply is text to read, never a control to fill in or press: a model (or a document it read)
// could otherwise draw a "paste your API key here" form inside the page. Only a GFM task list's
// checkbox, disabled as marked writes it, stays.
const CONTROLS = ["form", "input", "button", "textarea", "select", "option", "label", "fieldset"];
const FRAMES = ["iframe", "frame", "frameset", "object", "embed", "style", "link", "meta", "base"];
const PURIFY = {
  RETURN_DOM_FRAGMENT: /** @type {const} */ (true),
  FORBID_TAGS: [...CONTROLS.filter((tag) => tag !== "input"), ...FRAMES],
  FORBID_ATTR: ["style", "formaction", "form", "autofocus", "contenteditable"],
};

DOMPurify.addHook("uponSanitizeElement", (node, data) => {
  if (data.tagName !== "input") return;
  const input = /** @type {Element} */ (node);
  const taskBox = input.getAttribute("type") === "checkbox" && input.hasAttribute("disabled");
  if (!taskBox) input.remove();
});

// A link leaves the page in a new tab, and the page it opens gets no handle back to this one.
DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A" && node.hasAttribute("href")) {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer");
  }
});

/**
 * The reply's Markdown as sanitized nodes, without the blank text between blocks at its ends (so
 * a one-paragraph reply's text is exactly its words).
 * @param {string} text
 * @returns {DocumentFragment}
 */
export function markdown(text) {
  const html = /** @type {string} */ (marked.parse(text));
  const fragment = DOMPurify.sanitize(html, PURIFY);
  for (const end of ["firstChild", "lastChild"]) {
    const node = end === "firstChild" ? fragment.firstChild : fragment.lastChild;
    if (node && node.nodeType === Node.TEXT_NODE && !(node.textContent || "").trim()) {
      node.remove();
    }
  }
  return fragment;
}
