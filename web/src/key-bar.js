// The touch screen's key bar: the keys an on-screen keyboard lacks (Esc, Tab, Shift+Tab, the
// arrows, Home/End, PgUp/PgDn, Paste, Select), Ctrl and Alt that latch for the next key (tapped
// or typed), and a receipt for every key, so that on a phone "did my Ctrl-C arrive?" has an answer.

import { el } from './dom.js';

/** @typedef {import('./session-tab.js').SessionTab} SessionTab */

/** How long a key waits for its receipt (the server's `input_ack`) before it shows a failure. */
export const RECEIPT_TIMEOUT_MS = 3000;
/** Two taps on Ctrl or Alt this close together lock it until the next tap. */
const DOUBLE_TAP_MS = 400;

/**
 * One key of the bar: its accessible name, its face, and what it sends (a function of the
 * latched modifiers and the terminal's cursor-key mode), or a `kind` the bar handles itself.
 * @typedef {{ name: string, face: string, send?: (mods: Modifiers, application: boolean) => string, kind?: 'ctrl' | 'alt' | 'paste' | 'select' }} KeySpec
 * @typedef {{ ctrl: boolean, alt: boolean }} Modifiers
 */

/** xterm's modifier parameter: 1 + (2 for Alt) + (4 for Ctrl); Shift (1) is Shift+Tab's alone. */
const modifierParameter = (/** @type {Modifiers} */ mods) => 1 + (mods.alt ? 2 : 0) + (mods.ctrl ? 4 : 0);

/** A cursor or Home/End key: `CSI 1;m X` with modifiers, `SS3 X` in application mode, else `CSI X`. */
const cursorKey = (/** @type {string} */ letter) => (/** @type {Modifiers} */ mods, /** @type {boolean} */ application) => {
  const parameter = modifierParameter(mods);
  if (parameter > 1) return `\x1b[1;${parameter}${letter}`;
  return application ? `\x1bO${letter}` : `\x1b[${letter}`;
};

/** A tilde key (PgUp 5, PgDn 6): `CSI n ~`, or `CSI n;m ~` with modifiers. */
const tildeKey = (/** @type {number} */ number) => (/** @type {Modifiers} */ mods) => {
  const parameter = modifierParameter(mods);
  return parameter > 1 ? `\x1b[${number};${parameter}~` : `\x1b[${number}~`;
};

/** A key whose bytes Alt prefixes with Esc, as xterm's meta-sends-escape does. */
const plainKey = (/** @type {string} */ bytes) => (/** @type {Modifiers} */ mods) => (mods.alt ? `\x1b${bytes}` : bytes);

/** @type {readonly KeySpec[]} */
const KEYS = Object.freeze([
  { name: 'Escape', face: 'Esc', send: plainKey('\x1b') },
  { name: 'Tab', face: 'Tab', send: plainKey('\t') },
  { name: 'Shift+Tab', face: '⇤Tab', send: plainKey('\x1b[Z') },
  { name: 'Ctrl', face: 'Ctrl', kind: 'ctrl' },
  { name: 'Alt', face: 'Alt', kind: 'alt' },
  { name: 'Ctrl+C', face: '^C', send: plainKey('\x03') },
  { name: 'Left', face: '←', send: cursorKey('D') },
  { name: 'Up', face: '↑', send: cursorKey('A') },
  { name: 'Down', face: '↓', send: cursorKey('B') },
  { name: 'Right', face: '→', send: cursorKey('C') },
  { name: 'Home', face: 'Home', send: cursorKey('H') },
  { name: 'End', face: 'End', send: cursorKey('F') },
  { name: 'Page up', face: 'PgUp', send: tildeKey(5) },
  { name: 'Page down', face: 'PgDn', send: tildeKey(6) },
  { name: 'Paste', face: 'Paste', kind: 'paste' },
  { name: 'Select text', face: 'Select', kind: 'select' },
]);

/**
 * A modifier of the bar: off, latched (for the next key, typed or tapped) or locked (a double
 * tap: for every key until it is tapped again).
 */
class LatchingModifier {
  /** @param {HTMLButtonElement} button */
  constructor(button) {
    this.button = button;
    /** @type {'off' | 'latched' | 'locked'} */
    this.state = 'off';
    this.lastTap = -Infinity;
  }

  get on() {
    return this.state !== 'off';
  }

  tap(now = performance.now()) {
    const double = now - this.lastTap <= DOUBLE_TAP_MS;
    this.lastTap = now;
    if (this.state === 'off') this.set('latched');
    else if (this.state === 'latched' && double) this.set('locked');
    else this.set('off');
  }

  /** A key went with this modifier: a latched one lets go, a locked one stays. */
  used() {
    if (this.state === 'latched') this.set('off');
  }

  /** @param {'off' | 'latched' | 'locked'} state */
  set(state) {
    this.state = state;
    this.button.setAttribute('aria-pressed', String(state !== 'off'));
    this.button.dataset.latch = state;
  }
}

/**
 * The key bar of touch screens (any width): the keys an on-screen keyboard lacks. Each key is
 * sent as an input with an id and marks itself when its receipt (`input_ack`) comes back, or with
 * a failure when none comes within RECEIPT_TIMEOUT_MS or the server refuses it: on a phone, "did
 * my Ctrl-C arrive?" has an answer. Ctrl and Alt apply to the next key, from the bar or typed on
 * the keyboard.
 */
export class KeyBar {
  /**
   * @param {{ activeTab: () => SessionTab | null, openCopyView: () => void, showToast: (text: string) => void }} parts
   */
  constructor({ activeTab, openCopyView, showToast }) {
    this.activeTab = activeTab;
    this.openCopyView = openCopyView;
    this.showToast = showToast;
    /** @type {Map<string, HTMLButtonElement>} */
    this.buttons = new Map();
    for (const spec of KEYS) {
      const button = el('button', { type: 'button', 'aria-label': spec.name, title: spec.name, 'data-key': spec.kind ?? spec.name },
        el('span', { class: 'key-face', 'aria-hidden': 'true' }, spec.face));
      if (spec.kind === 'ctrl' || spec.kind === 'alt') button.setAttribute('aria-pressed', 'false');
      this.buttons.set(spec.name, button);
    }
    this.ctrl = new LatchingModifier(/** @type {HTMLButtonElement} */ (this.buttons.get('Ctrl')));
    this.alt = new LatchingModifier(/** @type {HTMLButtonElement} */ (this.buttons.get('Alt')));
    // What the last receipts said, in words, for assistive technology.
    this.receiptWords = el('span', { class: 'visually-hidden', role: 'status', 'aria-live': 'polite', 'aria-label': 'Key receipts' });
    this.element = el('div', { class: 'keys-row', role: 'toolbar', 'aria-label': 'Special keys' },
      ...this.buttons.values(), this.receiptWords);
    // A press must not take the focus from the terminal, which would close the phone's keyboard.
    this.element.addEventListener('pointerdown', (event) => event.preventDefault());
    this.element.addEventListener('mousedown', (event) => event.preventDefault());
    this.element.addEventListener('click', (event) => this.press(event));
  }

  /** The modifiers latched now. @returns {Modifiers} */
  get modifiers() {
    return { ctrl: this.ctrl.on, alt: this.alt.on };
  }

  /**
   * What typed `data` sends: with Ctrl or Alt latched, one character becomes its control
   * character and/or gets an Esc before it, and sends with a receipt shown on the modifier's
   * key; returns null then. Anything else is returned to be sent as typed.
   * @param {SessionTab} tab
   * @param {string} data
   * @returns {string | null}
   */
  typed(tab, data) {
    const mods = this.modifiers;
    if (!(mods.ctrl || mods.alt) || [...data].length !== 1) return data;
    const character = mods.ctrl ? controlCharacter(data) : data;
    const bytes = mods.alt ? `\x1b${character}` : character;
    const shownOn = /** @type {HTMLButtonElement} */ (this.buttons.get(mods.ctrl ? 'Ctrl' : 'Alt'));
    this.ctrl.used();
    this.alt.used();
    this.sendWithReceipt(tab, shownOn, mods.ctrl ? `Ctrl+${data}` : `Alt+${data}`, bytes);
    return null;
  }

  /** A tap on a key of the bar. @param {MouseEvent} event */
  press(event) {
    const button = /** @type {HTMLElement | null} */ (event.target instanceof Element ? event.target.closest('button') : null);
    const tab = this.activeTab();
    if (!button || !tab) return;
    const spec = KEYS.find((candidate) => candidate.name === button.getAttribute('aria-label'));
    if (!spec) return;
    if (spec.kind === 'ctrl') this.ctrl.tap();
    else if (spec.kind === 'alt') this.alt.tap();
    else if (spec.kind === 'select') this.openCopyView();
    else if (spec.kind === 'paste') this.paste(tab, /** @type {HTMLButtonElement} */ (button));
    else if (spec.send) {
      const bytes = spec.send(this.modifiers, tab.terminal.modes.applicationCursorKeysMode);
      this.ctrl.used();
      this.alt.used();
      this.sendWithReceipt(tab, /** @type {HTMLButtonElement} */ (button), spec.name, bytes);
    }
    if (spec.kind !== 'select') tab.terminal.focus();
  }

  /** Pastes the clipboard's text, bracketed when the program asked for bracketed paste. */
  async paste(/** @type {SessionTab} */ tab, /** @type {HTMLButtonElement} */ button) {
    let text;
    try {
      text = await navigator.clipboard.readText();
    } catch (error) {
      this.showToast(`The clipboard cannot be read here (${error instanceof Error ? error.message : error})`);
      return;
    }
    if (text === '') return;
    const lines = text.replace(/\r?\n/g, '\r');
    const bytes = tab.terminal.modes.bracketedPasteMode ? `\x1b[200~${lines}\x1b[201~` : lines;
    this.sendWithReceipt(tab, button, 'Paste', bytes);
  }

  /**
   * Sends `bytes` as an input with an id and marks `button`: `sent` at once, `delivered` when
   * the receipt comes, `failed` when the server refuses it or nothing comes in time. A receipt
   * that comes after the failure was shown still marks the key delivered: the key did arrive.
   * @param {SessionTab} tab @param {HTMLButtonElement} button @param {string} name @param {string} bytes
   */
  sendWithReceipt(tab, button, name, bytes) {
    const receipt = tab.sendWithReceipt(bytes);
    const attempt = Symbol(name);
    button.dataset.receipt = 'sent';
    /** @type {any} */ (button).attempt = attempt;
    const current = () => /** @type {any} */ (button).attempt === attempt;
    const timer = setTimeout(() => {
      if (current()) this.showReceipt(button, 'failed', `${name}: no receipt from the server`);
    }, RECEIPT_TIMEOUT_MS);
    receipt.then(
      () => {
        clearTimeout(timer);
        if (current()) this.showReceipt(button, 'delivered', `${name} delivered`);
      },
      (/** @type {Error} */ error) => {
        clearTimeout(timer);
        if (current()) this.showReceipt(button, 'failed', `${name} not delivered: ${error.message}`);
      },
    );
  }

  /** @param {HTMLButtonElement} button @param {'delivered' | 'failed'} outcome @param {string} words */
  showReceipt(button, outcome, words) {
    button.dataset.receipt = outcome;
    button.title = `${button.getAttribute('aria-label')}: ${words}`;
    this.receiptWords.textContent = words;
  }
}

/** What Ctrl plus a typed character sends: Ctrl+C is 0x03, Ctrl+[ is Escape, and so on. */
function controlCharacter(/** @type {string} */ character) {
  if (character === ' ' || character === '@') return '\x00';
  if (character === '?') return '\x7f';
  const code = character.toUpperCase().charCodeAt(0);
  if (code >= 0x40 && code <= 0x5f) return String.fromCharCode(code - 0x40);
  return character;
}
