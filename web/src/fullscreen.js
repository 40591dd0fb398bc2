// Fullscreen (the tab strip's button or Alt+Shift+F; the same again leaves): the page fills the
// screen, Esc goes to the program under the browser's keyboard lock, and the tab strip is an
// overlay that hides after 3 s without mouse movement on the desktop; on a phone the chrome hides
// instead (touch.js).

import { icon, iconButton } from './dom.js';
import { isTouchLayout } from './touch.js';

/** @typedef {import('./session-tab.js').SessionTab} SessionTab */
/** @typedef {import('./touch.js').TouchChrome} TouchChrome */

const OVERLAY_HIDE_MS = 3000;

export class Fullscreen {
  /**
   * @param {{ root: HTMLElement, chrome: TouchChrome, scheduleFit: () => void, activeTab: () => SessionTab | null }} parts
   */
  constructor({ root, chrome, scheduleFit, activeTab }) {
    this.root = root;
    this.chrome = chrome;
    this.scheduleFit = scheduleFit;
    this.activeTab = activeTab;
    /** Whether the page is in fullscreen (the page's, whether or not the browser went too). */
    this.on = false;
    this.overlayTimer = null;
    this.button = iconButton('Fullscreen', icon('fullscreen'), () => this.toggle());
    this.button.title = 'Fullscreen (Alt+Shift+F)';
    // Leaving the browser's fullscreen (holding Esc, the browser's own controls) leaves the page's.
    document.addEventListener('fullscreenchange', () => {
      if (!document.fullscreenElement && this.on) this.leave();
    });
    root.addEventListener('mousemove', (event) => {
      // Touch screens send a compatibility mousemove with every tap: only a mouse pokes.
      if (!isTouchLayout()) this.pokeOverlay();
      else if (event.movementX || event.movementY) this.pokeOverlay();
    });
  }

  toggle() {
    if (this.on) this.leave();
    else this.enter();
  }

  enter() {
    this.on = true;
    this.root.classList.add('fullscreen');
    this.button.setAttribute('aria-label', 'Exit fullscreen');
    this.button.title = 'Exit fullscreen (Alt+Shift+F)';
    document.documentElement.requestFullscreen?.().then(() => {
      // In the browser's fullscreen Esc would leave it; with the key locked it reaches the
      // program (vim, less), and holding Esc still leaves, as the browser tells.
      const keyboard = /** @type {any} */ (navigator).keyboard;
      return keyboard?.lock?.(['Escape']);
    }).catch(() => {
      // Not allowed here (no user gesture, an iframe): the page still fills the window.
    });
    if (isTouchLayout()) this.chrome.hide();
    else this.pokeOverlay();
    this.scheduleFit();
    this.activeTab()?.terminal.focus();
  }

  leave() {
    this.on = false;
    clearTimeout(this.overlayTimer);
    this.root.classList.remove('fullscreen', 'overlay-hidden');
    this.button.setAttribute('aria-label', 'Fullscreen');
    this.button.title = 'Fullscreen (Alt+Shift+F)';
    /** @type {any} */ (navigator).keyboard?.unlock?.();
    if (document.fullscreenElement) document.exitFullscreen().catch(() => {});
    this.chrome.show();
    this.scheduleFit();
    this.activeTab()?.terminal.focus();
  }

  /** In fullscreen the tab strip is an overlay that hides after 3 s without mouse movement. */
  pokeOverlay() {
    if (!this.on || isTouchLayout()) return;
    this.root.classList.remove('overlay-hidden');
    clearTimeout(this.overlayTimer);
    this.overlayTimer = setTimeout(() => this.root.classList.add('overlay-hidden'), OVERLAY_HIDE_MS);
  }
}
