// The terminal page's keyboard: its own shortcuts (find, font size, and Alt+Shift for fullscreen
// and the tabs), which the terminal must not also receive, and the phone's row of special keys
// (Esc, Tab, the arrows, text selection, and a Ctrl that latches for the next key).

import { el } from './dom.js';
import { fontSize, setFontSize } from './settings.js';

/** @typedef {import('./session-tab.js').SessionTab} SessionTab */

/**
 * What the page's shortcuts do; the page composes them from its parts.
 * @typedef {object} ShortcutActions
 * @property {() => void} openSearch Ctrl+Shift+F (Cmd+F on a Mac)
 * @property {() => void} toggleFullscreen Alt+Shift+F
 * @property {() => void} createSession Alt+Shift+N
 * @property {() => void} closeActive Alt+Shift+W
 * @property {() => void} previous Alt+Shift+Left
 * @property {() => void} next Alt+Shift+Right
 * @property {() => void} restartActive Alt+Shift+R
 */

/**
 * Runs the page's shortcuts. The listener is on the window in the capture phase, so a shortcut
 * is taken before the terminal (or any other element with the focus) sees the key.
 * @param {ShortcutActions} actions
 */
export function listenForShortcuts(actions) {
  window.addEventListener('keydown', (event) => pageShortcut(event, actions), true);
}

/** @param {KeyboardEvent} event @param {ShortcutActions} actions */
function pageShortcut(event, actions) {
  if (isSearchShortcut(event)) {
    event.preventDefault();
    event.stopPropagation();
    actions.openSearch();
    return;
  }
  const zoom = fontSizeShortcut(event);
  if (zoom !== undefined) {
    event.preventDefault();
    event.stopPropagation();
    setFontSize(zoom === null ? null : fontSize() + zoom);
    return;
  }
  if (!(event.altKey && event.shiftKey && !event.ctrlKey && !event.metaKey)) return;
  const action = {
    KeyF: actions.toggleFullscreen,
    KeyN: actions.createSession,
    KeyW: actions.closeActive,
    ArrowLeft: actions.previous,
    ArrowRight: actions.next,
    KeyR: actions.restartActive,
  }[event.code];
  if (!action) return;
  event.preventDefault();
  event.stopPropagation();
  if (event.repeat) return;
  action();
}

/** The page's own shortcuts, which the terminal must not also receive. */
export function isPageShortcut(/** @type {KeyboardEvent} */ event) {
  if (isSearchShortcut(event) || fontSizeShortcut(event) !== undefined) return true;
  return event.altKey && event.shiftKey && !event.ctrlKey && !event.metaKey
    && ['KeyF', 'KeyN', 'KeyW', 'KeyR', 'ArrowLeft', 'ArrowRight'].includes(event.code);
}

const onMac = /Mac|iPhone|iPad/.test(navigator.platform || navigator.userAgent);

/** Ctrl+Shift+F, as terminals have it (Ctrl+F is the shell's); on a Mac also the browser's Cmd+F. */
function isSearchShortcut(/** @type {KeyboardEvent} */ event) {
  if (event.type !== 'keydown' || event.code !== 'KeyF' || event.altKey) return false;
  if (event.ctrlKey && event.shiftKey && !event.metaKey) return true;
  return onMac && event.metaKey && !event.ctrlKey && !event.shiftKey;
}

/**
 * Ctrl+= / Ctrl+- (Cmd on a Mac) make the terminal's font larger or smaller by one, Ctrl+0 goes
 * back to the default (null); undefined for any other key.
 * @param {KeyboardEvent} event
 * @returns {number | null | undefined}
 */
function fontSizeShortcut(event) {
  const modifier = onMac ? event.metaKey && !event.ctrlKey : event.ctrlKey && !event.metaKey;
  if (event.type !== 'keydown' || !modifier || event.altKey) return undefined;
  if (event.code === 'Equal' || event.code === 'NumpadAdd' || event.key === '+') return 1;
  if ((event.code === 'Minus' || event.code === 'NumpadSubtract') && !event.shiftKey) return -1;
  if ((event.code === 'Digit0' || event.code === 'Numpad0') && !event.shiftKey) return null;
  return undefined;
}

/**
 * The phone's row of the keys its on-screen keyboard lacks. Ctrl latches: it applies to the next
 * key, typed on the keyboard or pressed in the row, and then lets go. Select opens the copy view.
 */
export class SpecialKeys {
  /** @param {{ activeTab: () => SessionTab | null, openCopyView: () => void }} parts */
  constructor({ activeTab, openCopyView }) {
    this.activeTab = activeTab;
    this.openCopyView = openCopyView;
    this.ctrlLatched = false;
    this.ctrlKey = el('button', { type: 'button', 'aria-pressed': 'false', 'data-key': 'ctrl' }, 'Ctrl');
    const key = (label, text, send) => el('button', { type: 'button', 'aria-label': label, 'data-send': send }, text);
    this.element = el('div', { class: 'keys-row', role: 'toolbar', 'aria-label': 'Special keys' },
      key('Escape', 'Esc', 'esc'), key('Tab', 'Tab', 'tab'), this.ctrlKey,
      key('Left', '←', 'left'), key('Up', '↑', 'up'), key('Down', '↓', 'down'), key('Right', '→', 'right'),
      el('button', { type: 'button', 'data-key': 'select', 'aria-label': 'Select text' }, 'Select'));
    // A press must not take the focus from the terminal, which would close the phone's keyboard.
    this.element.addEventListener('pointerdown', (event) => event.preventDefault());
    this.element.addEventListener('mousedown', (event) => event.preventDefault());
    this.element.addEventListener('click', (event) => this.press(event));
  }

  /**
   * What typed `data` sends: with Ctrl latched, one character becomes its control character and
   * Ctrl lets go; anything else goes as it is.
   * @param {string} data
   */
  typed(data) {
    if (!(this.ctrlLatched && data.length === 1)) return data;
    const text = controlCharacter(data);
    this.setCtrlLatched(false);
    return text;
  }

  /** A click in the row: Ctrl latches or lets go, Select opens the copy view, the rest is sent. */
  press(event) {
    const button = event.target.closest('button');
    const tab = this.activeTab();
    if (!button || !tab) return;
    if (button.dataset.key === 'ctrl') {
      this.setCtrlLatched(!this.ctrlLatched);
      return;
    }
    if (button.dataset.key === 'select') {
      this.openCopyView();
      return;
    }
    const application = tab.terminal.modes.applicationCursorKeysMode;
    const arrow = (letter) => (this.ctrlLatched ? `\x1b[1;5${letter}` : application ? `\x1bO${letter}` : `\x1b[${letter}`);
    const sequence = {
      esc: '\x1b',
      tab: '\t',
      up: arrow('A'),
      down: arrow('B'),
      right: arrow('C'),
      left: arrow('D'),
    }[button.dataset.send];
    if (sequence === undefined) return;
    tab.sendText(sequence);
    this.setCtrlLatched(false);
    tab.terminal.focus();
  }

  setCtrlLatched(latched) {
    this.ctrlLatched = latched;
    this.ctrlKey.setAttribute('aria-pressed', String(latched));
  }
}

/** What Ctrl plus a typed character sends: Ctrl+C is 0x03, Ctrl+[ is Escape, and so on. */
function controlCharacter(character) {
  if (character === ' ' || character === '@') return '\x00';
  if (character === '?') return '\x7f';
  const code = character.toUpperCase().charCodeAt(0);
  if (code >= 0x40 && code <= 0x5f) return String.fromCharCode(code - 0x40);
  return character;
}
