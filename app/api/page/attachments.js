// @ts-check
// The files the next message carries: picked, dropped on the composer or pasted, listed under
// the message box (each removable), then read as data: URLs for the submit (the server reads
// their type from the bytes, and refuses what the conversation's model does not take).

import { h } from "./dom.js";

/** @typedef {{name: string, media_type: string, data: string}} FileIn */

export class Attachments {
  /** @param {HTMLUListElement} list where the pending files are shown */
  constructor(list) {
    this.list = list;
    /** @type {File[]} */
    this.files = [];
  }

  /** @param {Iterable<File>} files */
  add(files) {
    for (const file of files) this.files.push(file);
    this.render();
  }

  /** @param {number} index */
  remove(index) {
    this.files.splice(index, 1);
    this.render();
  }

  clear() {
    this.files = [];
    this.render();
  }

  /** The pending files as the API takes them. @returns {Promise<FileIn[]>} */
  async wire() {
    return Promise.all(
      this.files.map(async (file) => ({
        name: file.name || "pasted",
        media_type: file.type,
        data: await dataUrl(file),
      })),
    );
  }

  render() {
    this.list.replaceChildren(
      ...this.files.map((file, index) => {
        const remove = h("button", {
          type: "button",
          class: "chip-remove",
          "aria-label": `Remove ${file.name || "the pasted file"}`,
          text: "×",
        });
        remove.addEventListener("click", () => this.remove(index));
        return h(
          "li",
          { class: "attachment-chip", "data-role": "attachment" },
          h("span", { text: `${file.name || "pasted"} (${size(file.size)})` }),
          remove,
        );
      }),
    );
    this.list.hidden = this.files.length === 0;
  }
}

/** @param {Blob} file @returns {Promise<string>} */
function dataUrl(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result));
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

/** @param {number} bytes */
function size(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1024 * 1024) return `${Math.round(bytes / 1024)} KB`;
  return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
}

/**
 * Files dropped on `zone` or pasted into `input` go to `attachments`.
 * @param {Attachments} attachments @param {HTMLElement} zone @param {HTMLElement} input
 */
export function acceptDrops(attachments, zone, input) {
  zone.addEventListener("dragover", (event) => {
    if (event.dataTransfer?.types.includes("Files")) {
      event.preventDefault();
      zone.classList.add("dropping");
    }
  });
  zone.addEventListener("dragleave", () => zone.classList.remove("dropping"));
  zone.addEventListener("drop", (event) => {
    zone.classList.remove("dropping");
    const files = event.dataTransfer?.files;
    if (files && files.length) {
      event.preventDefault();
      attachments.add(files);
    }
  });
  input.addEventListener("paste", (event) => {
    const files = event.clipboardData?.files;
    if (files && files.length) {
      event.preventDefault();
      attachments.add(files);
    }
  });
}
