// What the page remembers across visits (localStorage): the terminal font size and the theme
// (light, dark, or following the system), the terminal colours of each theme, and the
// predictive local echo (local-echo.js: `auto` or `off`, and the round trip above which `auto`
// predicts), whether programs may copy to the clipboard (clipboard.js), and whether a session
// that starts waiting for input in the background gets a system notification.

import { DEFAULT_THRESHOLD_MS, MAX_THRESHOLD_MS } from './local-echo.js';

const FONT_SIZE_KEY = 'ptyhub.fontSize';
const THEME_KEY = 'ptyhub.theme';
const LOCAL_ECHO_KEY = 'ptyhub.localEcho';
const GPU_ACCELERATION_KEY = 'ptyhub.gpuAcceleration';
const LOCAL_ECHO_THRESHOLD_KEY = 'ptyhub.localEchoThresholdMs';
const CLIPBOARD_WRITES_KEY = 'ptyhub.clipboardWrites';
const WAITING_NOTIFICATIONS_KEY = 'ptyhub.waitingNotifications';

export const DEFAULT_FONT_SIZE = 14;
export const MIN_FONT_SIZE = 8;
export const MAX_FONT_SIZE = 32;

/** @typedef {'system' | 'light' | 'dark'} ThemeChoice */

/** The terminal's colours, per theme (the page's own are CSS variables in style.css). */
export const TERMINAL_THEMES = Object.freeze({
  dark: Object.freeze({
    background: '#11141a', foreground: '#d8dee9', cursor: '#8fbcbb', cursorAccent: '#11141a',
    selectionBackground: '#4c566a',
  }),
  light: Object.freeze({
    background: '#fbfbfd', foreground: '#1f2430', cursor: '#3465a4', cursorAccent: '#fbfbfd',
    selectionBackground: '#b9d1f0',
    // The ANSI colours tuned for a light background (xterm's defaults are for a dark one).
    black: '#1f2430', red: '#c4262e', green: '#2d7d32', yellow: '#8a6d00', blue: '#1f5fbf',
    magenta: '#8e3fa6', cyan: '#137a83', white: '#8a93a6',
    brightBlack: '#5c6370', brightRed: '#e0474f', brightGreen: '#3c9a41', brightYellow: '#a88400',
    brightBlue: '#3778db', brightMagenta: '#a854c2', brightCyan: '#1a95a0', brightWhite: '#b8bfcc',
  }),
});

/** @type {Set<() => void>} */
const listeners = new Set();
const systemDark = window.matchMedia('(prefers-color-scheme: dark)');
systemDark.addEventListener('change', () => notify());
window.addEventListener('storage', (event) => {
  // Another window of the page changed a setting: follow it.
  if ([FONT_SIZE_KEY, THEME_KEY, LOCAL_ECHO_KEY, LOCAL_ECHO_THRESHOLD_KEY, CLIPBOARD_WRITES_KEY, WAITING_NOTIFICATIONS_KEY].includes(event.key)) notify();
});

function notify() {
  applyPageTheme();
  for (const listener of listeners) listener();
}

/** Calls `listener` whenever the font size or the theme in effect changes; returns the undo. */
export function onSettingsChange(/** @type {() => void} */ listener) {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

/** @returns {number} */
export function fontSize() {
  const stored = Number(localStorage.getItem(FONT_SIZE_KEY));
  return Number.isInteger(stored) && stored >= MIN_FONT_SIZE && stored <= MAX_FONT_SIZE ? stored : DEFAULT_FONT_SIZE;
}

/** Sets the font size (clamped; null goes back to the default) and remembers it. */
export function setFontSize(/** @type {number | null} */ size) {
  if (size === null) localStorage.removeItem(FONT_SIZE_KEY);
  else localStorage.setItem(FONT_SIZE_KEY, String(Math.min(MAX_FONT_SIZE, Math.max(MIN_FONT_SIZE, Math.round(size)))));
  notify();
}

/** @returns {ThemeChoice} */
export function themeChoice() {
  const stored = localStorage.getItem(THEME_KEY);
  return stored === 'light' || stored === 'dark' ? stored : 'system';
}

/** @returns {'light' | 'dark'} the theme in effect: the choice, or the system's. */
export function activeTheme() {
  const choice = themeChoice();
  if (choice !== 'system') return choice;
  return systemDark.matches ? 'dark' : 'light';
}

export function setThemeChoice(/** @type {ThemeChoice} */ choice) {
  if (choice === 'system') localStorage.removeItem(THEME_KEY);
  else localStorage.setItem(THEME_KEY, choice);
  notify();
}

/** @returns {import('./local-echo.js').LocalEchoSettings} the local echo setting in effect */
export function localEchoSettings() {
  const mode = localStorage.getItem(LOCAL_ECHO_KEY) === 'off' ? 'off' : 'auto';
  return { mode, thresholdMs: localEchoThreshold() };
}

/** The round trip (ms) above which `auto` predicts: the remembered one, else the default. */
export function localEchoThreshold() {
  const stored = localStorage.getItem(LOCAL_ECHO_THRESHOLD_KEY);
  const value = stored === null ? NaN : Number(stored);
  return Number.isInteger(value) && value >= 0 && value <= MAX_THRESHOLD_MS ? value : DEFAULT_THRESHOLD_MS;
}

export function setLocalEchoMode(/** @type {'auto' | 'off'} */ mode) {
  if (mode === 'off') localStorage.setItem(LOCAL_ECHO_KEY, 'off');
  else localStorage.removeItem(LOCAL_ECHO_KEY);
  notify();
}

/** Sets the threshold in ms (clamped to 0..MAX_THRESHOLD_MS; null goes back to the default). */
export function setLocalEchoThreshold(/** @type {number | null} */ ms) {
  if (ms === null || !Number.isFinite(ms)) localStorage.removeItem(LOCAL_ECHO_THRESHOLD_KEY);
  else localStorage.setItem(LOCAL_ECHO_THRESHOLD_KEY, String(Math.min(MAX_THRESHOLD_MS, Math.max(0, Math.round(ms)))));
  notify();
}

/** The terminal colours of the theme in effect. */
export function terminalTheme() {
  return TERMINAL_THEMES[activeTheme()];
}

/** Puts the theme in effect on the document (`data-theme`, which style.css reads). */
export function applyPageTheme() {
  const theme = activeTheme();
  document.documentElement.dataset.theme = theme;
  document.documentElement.style.colorScheme = theme;
}

/**
 * Whether terminals draw with WebGL, as VS Code's `terminal.integrated.gpuAcceleration`:
 * `auto` (the default) only where the browser draws WebGL on a GPU, `on` wherever it has WebGL
 * (a software rasterizer included), `off` never (xterm's DOM renderer).
 * @returns {'auto' | 'on' | 'off'}
 */
export function gpuAcceleration() {
  const stored = localStorage.getItem(GPU_ACCELERATION_KEY);
  return stored === 'on' || stored === 'off' ? stored : 'auto';
}

/** @typedef {'ask' | 'always' | 'never'} ClipboardWrites */

/**
 * What a program's request to set the clipboard (OSC 52) gets: `ask` (the default) the user's
 * answer, `always` the copy, `never` nothing.
 * @returns {ClipboardWrites}
 */
export function clipboardWrites() {
  const stored = localStorage.getItem(CLIPBOARD_WRITES_KEY);
  return stored === 'always' || stored === 'never' ? stored : 'ask';
}

export function setClipboardWrites(/** @type {ClipboardWrites} */ choice) {
  if (choice === 'always' || choice === 'never') localStorage.setItem(CLIPBOARD_WRITES_KEY, choice);
  else localStorage.removeItem(CLIPBOARD_WRITES_KEY);
  notify();
}

/**
 * Whether a session that starts waiting for input while its tab is not shown gets a system
 * notification: off unless this browser was asked to (the browser's permission is asked then).
 */
export function waitingNotifications() {
  return localStorage.getItem(WAITING_NOTIFICATIONS_KEY) === 'on';
}

export function setWaitingNotifications(/** @type {boolean} */ on) {
  if (on) localStorage.setItem(WAITING_NOTIFICATIONS_KEY, 'on');
  else localStorage.removeItem(WAITING_NOTIFICATIONS_KEY);
  notify();
}
