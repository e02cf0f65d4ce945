// @ts-check
// Elements: the one helper that builds them (attributes as data, text never parsed as HTML), for
// the modules that draw; it imports nothing, so the pure modules' tests can load its users.

/**
 * An element: `class`, `text` (its text content) and attributes (null, undefined and false are
 * left out; true is an empty attribute), then its children.
 * @param {string} tag
 * @param {Record<string, string | number | boolean | null | undefined>} [attributes]
 * @param {...(Node | string | null | undefined)} children
 * @returns {HTMLElement}
 */
export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") element.className = String(value);
    else if (name === "text") element.textContent = String(value);
    else element.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children) if (child !== null && child !== undefined) element.append(child);
  return element;
}
