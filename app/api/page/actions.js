// @ts-check
// Actions: what the user does (send a message, cancel, retry, answer what a turn waits for),
// each one API call whose outcome the stream then shows; a refusal shows the problem's detail.

import { newId } from "./api.js";
import { titleFromMessage } from "./conversations.js";
import { browserToolDefinitions, chosenTools } from "./tools.js";
import { withAnswer, withWaiting } from "./transcript.js";

/**
 * @typedef {import("./api.js").Api} Api
 * @typedef {import("./api.js").NewConversation} NewConversation
 * @typedef {import("./view.js").View} View
 * @typedef {import("./transcript.js").ActionItem} ActionItem
 * @typedef {import("./transcript.js").Answer} Answer
 * @typedef {{input: HTMLTextAreaElement, onBusy: HTMLSelectElement,
 *   instructions: HTMLTextAreaElement, tools: HTMLElement, cancel: HTMLButtonElement}}
 *   ActionElements
 * @typedef {import("./attachments.js").Attachments} Attachments
 * @typedef {{api: Api, els: ActionElements, view: () => View | null,
 *   create: (id: string) => View, setSending: (sending: boolean) => void,
 *   isSending: () => boolean, clearError: () => void, onError: (error: unknown) => void,
 *   render: () => void, attachments: Attachments}} Page
 */

/**
 * Send the message box's text: to the open conversation, or to a new one created with the
 * chosen tools and instructions (its id chosen here, so a retried create makes one).
 * @param {Page} page
 */
export async function send(page) {
  const { api, els } = page;
  const text = els.input.value;
  if (!text.trim() || page.isSending()) {
    els.input.focus();
    return;
  }
  page.clearError();
  page.setSending(true);
  try {
    let view = page.view();
    if (!view) {
      const id = newId();
      /** @type {NewConversation} */
      const body = {
        id,
        tools: chosenTools(els.tools),
        client_tools: browserToolDefinitions(),
        context: { title: titleFromMessage(text) },
      };
      const instructions = els.instructions.value.trim();
      if (instructions) body.instructions = instructions;
      await api.createConversation(body);
      view = page.create(id);
    }
    const files = await page.attachments.wire();
    const submitted = await api.submit(view.id, text, els.onBusy.value, files);
    if (els.input.value === text) els.input.value = "";
    page.attachments.clear();
    const turn = submitted.turn;
    /** @type {View} */ (view).update((t) => withWaiting(t, turn, text));
  } catch (error) {
    page.onError(error);
  } finally {
    page.setSending(false);
    els.input.focus();
  }
}

/** Ask the open conversation's turns to stop (the stream shows when they did). @param {Page} page */
export async function cancel(page) {
  const view = page.view();
  if (!view) return;
  page.clearError();
  page.els.cancel.disabled = true;
  page.els.input.focus(); // the button is disabled now: focus goes where the user types next
  try {
    await page.api.cancel(view.id);
  } catch (error) {
    page.onError(error);
  } finally {
    if (page.view() === view) page.render();
  }
}

/** Run the failed turn again, from its transcript. @param {Page} page */
export async function retry(page) {
  const view = page.view();
  if (!view) return;
  page.clearError();
  try {
    await page.api.retry(view.id);
  } catch (error) {
    page.onError(error);
  }
  page.els.input.focus();
}

/**
 * Answer what a turn waits for (an approval, a browser tool's output); its buttons are disabled
 * meanwhile, and enabled again if the answer is refused.
 * @param {View} view @param {ActionItem} item @param {Answer} answer
 * @param {HTMLElement | null} [element]
 */
export async function answerAction(view, item, answer, element = null) {
  const buttons = element ? [...element.querySelectorAll("button")] : [];
  for (const button of buttons) button.disabled = true;
  try {
    await view.context.api.answer(item.turnId, [{ call_id: item.action.call_id, ...answer }]);
    view.update((t) => withAnswer(t, item.action.call_id, answer));
    view.context.focusInput();
  } catch (error) {
    for (const button of buttons) button.disabled = false;
    view.context.onError(error);
  }
}

/**
 * The user's message `seq` edited: a new version, and a turn runs on it (the stream shows both).
 * @param {View} view @param {number} seq @param {string} text
 */
export async function editMessage(view, seq, text) {
  if (!text.trim()) return;
  try {
    await view.context.api.edit(view.id, seq, text);
    view.context.focusInput();
  } catch (error) {
    view.context.onError(error);
  }
}

/** A new answer to the message at or above `seq`. @param {View} view @param {number} seq */
export async function regenerate(view, seq) {
  try {
    await view.context.api.regenerate(view.id, seq);
  } catch (error) {
    view.context.onError(error);
  }
}

/** Show the version holding `seq` (the stream's branch.switched redraws the path).
 * @param {View} view @param {number} seq */
export async function switchVersion(view, seq) {
  try {
    await view.context.api.switchVersion(view.id, seq);
  } catch (error) {
    view.context.onError(error);
  }
}
