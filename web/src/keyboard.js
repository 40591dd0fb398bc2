// The terminal page's keyboard: its own shortcuts (Alt+Shift for fullscreen, the tabs, the font
// size and the jumps between commands; Ctrl+Shift+F for find), which the terminal must not also
// receive; the browser's own keys (zoom, and find on a Mac), which neither the page nor the
// terminal takes; and the touch screen's key bar (keys an on-screen keyboard lacks, Ctrl and Alt
// that latch, and a receipt for every key).

import { el } from './dom.js';
import { fontSize, setFontSize } from './settings.js';

/** @typedef {import('./session-tab.js').SessionTab} SessionTab */

/**
 * What the page's shortcuts do; the page composes them from its parts.
 * @typedef {object} ShortcutActions
 * @property {() => void} openSearch Ctrl+Shift+F
 * @property {() => void} toggleFullscreen Alt+Shift+F
 * @property {() => void} createSession Alt+Shift+N
 * @property {() => void} closeActive Alt+Shift+W
 * @property {() => void} previous Alt+Shift+Left
 * @property {() => void} next Alt+Shift+Right
 * @property {() => void} restartActive Alt+Shift+R
 * @property {() => void} previousCommand Alt+Shift+Up
 * @property {() => void} nextCommand Alt+Shift+Down
 */

/**
 * Runs the page's shortcuts. The listener is on the window in the capture phase, so a shortcut
 * is taken before the terminal (or any other element with the focus) sees the key.
 * @param {ShortcutActions} actions
 */
export function listenForShortcuts(actions) {
  window.addEventListener('keydown', (event) => pageShortcut(event, actions), true);
}

/** The Alt+Shift family: the key's `code`, and what it does. */
const ALT_SHIFT_ACTIONS = Object.freeze({
  KeyF: 'toggleFullscreen',
  KeyN: 'createSession',
  KeyW: 'closeActive',
  ArrowLeft: 'previous',
  ArrowRight: 'next',
  KeyR: 'restartActive',
  ArrowUp: 'previousCommand',
  ArrowDown: 'nextCommand',
});

/** @param {KeyboardEvent} event @param {ShortcutActions} actions */
function pageShortcut(event, actions) {
  if (event.type !== 'keydown') return;
  if (isSearchShortcut(event)) {
    take(event);
    actions.openSearch();
    return;
  }
  if (!isAltShift(event)) return;
  const zoom = fontSizeStep(event.code);
  if (zoom !== undefined) {
    take(event);
    setFontSize(zoom === null ? null : fontSize() + zoom);
    return;
  }
  const action = ALT_SHIFT_ACTIONS[event.code];
  if (!action) return;
  take(event);
  if (event.repeat) return;
  actions[action]();
}

/** Keeps a key that the page acted on from the terminal and the browser. */
function take(/** @type {KeyboardEvent} */ event) {
  event.preventDefault();
  event.stopPropagation();
}

/**
 * Whether the terminal may have a key: not one of the page's shortcuts, and not one of the
 * browser's own keys (zoom, a Mac's find), which xterm would otherwise turn into input.
 */
export function terminalMayHave(/** @type {KeyboardEvent} */ event) {
  return !isPageShortcut(event) && !isBrowserKey(event);
}

/** The page's own shortcuts, which the terminal must not also receive. */
export function isPageShortcut(/** @type {KeyboardEvent} */ event) {
  if (isSearchShortcut(event)) return true;
  return isAltShift(event) && (fontSizeStep(event.code) !== undefined || event.code in ALT_SHIFT_ACTIONS);
}

const onMac = /Mac|iPhone|iPad/.test(navigator.platform || navigator.userAgent);

/** The browser's zoom (Ctrl or Cmd with =, +, - or 0) and, on a Mac, its find (Cmd+F). */
export function isBrowserKey(/** @type {KeyboardEvent} */ event) {
  const primary = onMac ? event.metaKey && !event.ctrlKey : event.ctrlKey && !event.metaKey;
  if (!primary || event.altKey) return false;
  if (onMac && event.code === 'KeyF' && !event.shiftKey) return true;
  return ['Equal', 'Minus', 'Digit0', 'NumpadAdd', 'NumpadSubtract', 'Numpad0'].includes(event.code);
}

function isAltShift(/** @type {KeyboardEvent} */ event) {
  return event.altKey && event.shiftKey && !event.ctrlKey && !event.metaKey;
}

/** Ctrl+Shift+F, as terminals have it (Ctrl+F is the shell's, Cmd+F the Mac browser's). */
function isSearchShortcut(/** @type {KeyboardEvent} */ event) {
  return event.type === 'keydown' && event.code === 'KeyF' && event.ctrlKey && event.shiftKey
    && !event.altKey && !event.metaKey;
}

/**
 * Alt+Shift with = or - makes the terminal's font larger or smaller by one, with 0 goes back to
 * the default (null); undefined for any other key. By `code`, as Shift changes what `key` says.
 * @param {string} code
 * @returns {number | null | undefined}
 */
function fontSizeStep(code) {
  if (code === 'Equal' || code === 'NumpadAdd') return 1;
  if (code === 'Minus' || code === 'NumpadSubtract') return -1;
  if (code === 'Digit0' || code === 'Numpad0') return null;
  return undefined;
}

// ---- the key bar ---------------------------------------------------------------------------------

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
