// The terminal page's keyboard: its own shortcuts (Alt+Shift for fullscreen, the tabs, the font
// size and the jumps between commands; Ctrl+Shift+F for find), which the terminal must not also
// receive; and the browser's own keys (zoom, and find on a Mac), which neither the page nor the
// terminal takes. The touch screen's key bar is key-bar.js.

import { fontSize, setFontSize } from './settings.js';

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
