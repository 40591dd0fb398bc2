// What a program in a session may do to the user's clipboard (OSC 52, which tmux, vim and
// neovim send): nothing without the user's say. The setting (`ask`, the default, `always` or
// `never`, remembered in localStorage) decides; in `ask` the page shows which session wants to
// copy how much, and what, with Allow, Always and Deny. Read-only pages (the read-only view, a
// share link's page) never load the handler, so their programs reach no clipboard whatever the
// setting. A program's request to read the clipboard is never answered (session-tab.js).

import { el, icon, iconButton } from './dom.js';
import { clipboardWrites, onSettingsChange, setClipboardWrites } from './settings.js';

/** @typedef {import('./session-tab.js').SessionTab} SessionTab */
/** @typedef {import('./settings.js').ClipboardWrites} ClipboardWrites */

/** How long the notice that something was copied stays. */
const COPIED_NOTICE_MS = 4_000;
/** How long a request's Allow stays inactive after it is shown. */
const ANSWER_DELAY_MS = 500;
/** The most of the text the request shows. */
const PREVIEW_CHARS = 80;

const CHOICE_WORDS = Object.freeze({
  ask: 'Ask each time',
  always: 'Always allow',
  never: 'Never',
});

export class ProgramClipboard {
  /**
   * @param {{ focusTerminal: () => void }} parts
   */
  constructor({ focusTerminal }) {
    this.focusTerminal = focusTerminal;
    /** The request waiting for the user's answer: the last one a program made. */
    this.pending = null;
    this.hideTimer = null;
    this.button = iconButton('Clipboard access', icon('clipboard'), () => this.toggleSettings(), { 'aria-expanded': 'false' });
    this.choice = el('select', { 'aria-label': 'Programs may copy', onchange: () => setClipboardWrites(/** @type {ClipboardWrites} */ (this.choice.value)) },
      ...Object.entries(CHOICE_WORDS).map(([value, words]) => el('option', { value }, words)));
    this.panel = el('div', { class: 'clipboard-settings', role: 'dialog', 'aria-label': 'Clipboard access', hidden: true },
      el('p', {}, 'Programs in a session (tmux, vim) can ask to copy text to your clipboard. They can never read it.'),
      el('label', {}, 'Programs may copy ', this.choice),
      el('button', { type: 'button', onclick: () => this.toggleSettings(false) }, 'Done'));
    this.panel.addEventListener('keydown', (event) => {
      event.stopPropagation();
      if (event.key === 'Escape') this.toggleSettings(false);
    });
    // Over the terminal, not above it: a notice that took rows would resize every PTY.
    this.notice = el('div', { class: 'clipboard-notice', role: 'alert', 'aria-label': 'Clipboard', hidden: true });
    this.showChoice();
    onSettingsChange(() => this.showChoice());
  }

  /**
   * A program in `tab` asked to set the clipboard to `text`. Nothing is copied unless the
   * setting or the user allows it, and the notice never takes the focus, so no key typed into
   * the terminal can answer it.
   * @param {SessionTab} tab
   * @param {string} text
   */
  request(tab, text) {
    // An empty text is a program clearing the clipboard (or sending what is not base64).
    if (text === '') return;
    const request = { source: tab.name, text };
    switch (clipboardWrites()) {
      case 'never':
        return;
      case 'always':
        this.copy(request, { askOnFailure: true });
        return;
      default:
        this.ask(request);
    }
  }

  /** @param {{ source: string, text: string }} request */
  ask(request) {
    this.pending = request;
    const allow = el('button', { type: 'button', disabled: true, onclick: () => this.answer(request, 'allow') }, 'Allow');
    const always = el('button', { type: 'button', disabled: true, onclick: () => this.answer(request, 'always') }, 'Always');
    this.show('ask',
      el('span', { class: 'clipboard-notice-text' }, `${request.source} wants to copy ${characters(request.text)} to your clipboard`),
      el('code', { class: 'clipboard-preview' }, preview(request.text)),
      el('span', { class: 'clipboard-actions' },
        allow, always, el('button', { type: 'button', onclick: () => this.answer(request, 'deny') }, 'Deny')));
    // A program may replace its request at any moment: the new one's Allow takes a moment to
    // become active, so that a click aimed at the request the user read never allows another.
    setTimeout(() => {
      allow.disabled = false;
      always.disabled = false;
    }, ANSWER_DELAY_MS);
  }

  /**
   * @param {{ source: string, text: string }} request
   * @param {'allow' | 'always' | 'deny'} answer
   */
  answer(request, answer) {
    if (request !== this.pending) return;
    this.pending = null;
    if (answer === 'always') setClipboardWrites('always');
    if (answer === 'deny') this.hide();
    else this.copy(request, { askOnFailure: false });
    this.focusTerminal();
  }

  /**
   * Writes the request's text to the clipboard and says so. A browser that refuses a write
   * without a click (no focus, Safari) is asked again with the buttons, whose click allows it.
   * @param {{ source: string, text: string }} request
   * @param {{ askOnFailure: boolean }} options
   */
  async copy(request, { askOnFailure }) {
    // Without a click the older way is not tried: it would take the focus from the terminal.
    const copied = await writeToClipboard(request.text, { fallback: !askOnFailure });
    if (copied) {
      this.show('copied', el('span', { class: 'clipboard-notice-text' }, `${characters(request.text)} copied by ${request.source}`),
        el('button', { type: 'button', class: 'toast-close', 'aria-label': 'Dismiss', onclick: () => this.hide() }, '×'));
      this.hideTimer = setTimeout(() => this.hide(), COPIED_NOTICE_MS);
    } else if (askOnFailure) {
      this.ask(request);
    } else {
      this.show('failed', el('span', { class: 'clipboard-notice-text' }, `The browser refused to copy for ${request.source}`),
        el('button', { type: 'button', class: 'toast-close', 'aria-label': 'Dismiss', onclick: () => this.hide() }, '×'));
    }
  }

  /** @param {'ask' | 'copied' | 'failed'} kind @param {...any} children */
  show(kind, ...children) {
    clearTimeout(this.hideTimer);
    this.notice.dataset.kind = kind;
    this.notice.replaceChildren(...children);
    this.notice.hidden = false;
  }

  hide() {
    clearTimeout(this.hideTimer);
    this.notice.hidden = true;
    this.notice.replaceChildren();
  }

  showChoice() {
    this.choice.value = clipboardWrites();
  }

  toggleSettings(open = this.panel.hidden) {
    this.panel.hidden = !open;
    this.button.setAttribute('aria-expanded', String(open));
    if (open) {
      this.showChoice();
      this.choice.focus();
    } else {
      this.focusTerminal();
    }
  }
}

/** `1 character`, `12 characters`: counted as a person counts them (code points). */
function characters(/** @type {string} */ text) {
  const count = [...text].length;
  return count === 1 ? '1 character' : `${count} characters`;
}

/** How control characters are shown in a request's preview. */
const ESCAPES = Object.freeze({ '\n': '\\n', '\r': '\\r', '\t': '\\t', '\x1b': '\\e' });

/** What a preview never shows as it is: controls, format (bidirectional) and line separators. */
const HIDDEN_IN_PREVIEW = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/u;

/**
 * The start of the text as it would be pasted, with what could act or hide (a newline that runs
 * a pasted command, an escape, a bidirectional override that reorders what is shown) written as
 * `\n`, `\e`, `\x07`, `\u{202e}`: seen, never acted on.
 */
function preview(/** @type {string} */ text) {
  const codePoints = [...text];
  const shown = codePoints.slice(0, PREVIEW_CHARS).map((character) => {
    if (!HIDDEN_IN_PREVIEW.test(character)) return character;
    const code = character.codePointAt(0) ?? 0;
    return ESCAPES[character] ?? (code < 0x100 ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u{${code.toString(16)}}`);
  }).join('');
  return codePoints.length > PREVIEW_CHARS ? `${shown}…` : shown;
}

/**
 * Writes `text` to the clipboard with the Clipboard API or, with `fallback` (in a click's
 * handler), the older way where that API is missing or refused (an insecure origin, a refused
 * permission); returns whether it got there.
 * @param {string} text
 * @param {{ fallback?: boolean }} [options]
 */
export async function writeToClipboard(text, { fallback = true } = {}) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    if (!fallback) return false;
    const scratch = el('textarea', { class: 'scratch' });
    scratch.value = text;
    document.body.append(scratch);
    scratch.select();
    const copied = document.execCommand('copy');
    scratch.remove();
    return copied;
  }
}
