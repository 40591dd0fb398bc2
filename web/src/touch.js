// Touch screens' chrome and touches: whether the page has the touch layout (any touch screen, any
// width, and narrow windows), the header and tab strip hidden to give the terminal the room (by
// typing or a tap on the terminal) and brought back (another tap, the handle, and in fullscreen a
// tap in a corner or a swipe down from the top edge), and a finger's scroll in a full-screen
// program sent as the wheel.

import { el } from './dom.js';

/** How far from a corner a tap counts as a tap in the corner (phone fullscreen), in CSS pixels. */
const CORNER_PX = 56;
/** A swipe from the top edge starts this close to it and goes at least this far down. */
const EDGE_PX = 28;
const SWIPE_PX = 48;
/** A touch that moves less than this is a tap. */
const TAP_SLOP_PX = 10;

/** A narrow window: the compact header and tab strip. */
export function isMobile() {
  return window.matchMedia('(max-width: 640px)').matches;
}

/**
 * The touch layout, at any width (a tablet too): the key bar, the header and tabs hidden by
 * typing or a tap and brought back by a tap. A narrow window or a touch screen.
 */
export function isTouchLayout() {
  return isMobile() || isTouchScreen();
}

/** A touch screen: a coarse pointer, or any touch point at all (a tablet with a keyboard). */
export function isTouchScreen() {
  return window.matchMedia('(any-pointer: coarse)').matches || navigator.maxTouchPoints > 0;
}

/**
 * In a full-screen program (the alternate screen, where there is no scrollback to scroll), a
 * finger moving up or down over the terminal is turned into the wheel events a mouse would give,
 * and xterm sends for them what it sends for the wheel: mouse reports when the program asked for
 * the mouse, the arrow keys otherwise (as a scroll in less or vim does).
 * @param {HTMLElement} host the element the terminal is open in
 * @param {import('@xterm/xterm').Terminal} terminal
 */
export function sendWheelForTouchScrolling(host, terminal) {
  /** @type {number | null} */
  let lastY = null;
  host.addEventListener('touchstart', (event) => {
    lastY = event.touches.length === 1 ? event.touches[0].clientY : null;
  }, { passive: true });
  host.addEventListener('touchmove', (event) => {
    const touch = event.touches.length === 1 ? event.touches[0] : null;
    if (!touch || lastY === null || terminal.buffer.active.type !== 'alternate') return;
    // A finger moving up scrolls down, as a wheel turned towards the user does.
    const deltaY = lastY - touch.clientY;
    if (deltaY === 0) return;
    lastY = touch.clientY;
    event.preventDefault();
    const screen = terminal.element?.querySelector('.xterm-screen');
    screen?.dispatchEvent(new WheelEvent('wheel', {
      deltaY, deltaMode: WheelEvent.DOM_DELTA_PIXEL, clientX: touch.clientX, clientY: touch.clientY, bubbles: true, cancelable: true,
    }));
  }, { passive: false });
}

/**
 * On a phone, typing or a tap on the terminal hides the header and tab strip to give the
 * terminal the room (in fullscreen the special keys too); the handle brings them back.
 */
export class TouchChrome {
  /**
   * @param {{ root: HTMLElement, panes: HTMLElement, isFullscreen: () => boolean, scheduleFit: () => void }} parts
   */
  constructor({ root, panes, isFullscreen, scheduleFit }) {
    this.root = root;
    this.isFullscreen = isFullscreen;
    this.scheduleFit = scheduleFit;
    /** Where a touch on the terminal began (taps). */
    this.touchStart = null;
    /** Where a touch near the top edge began (swipes down). */
    this.edgeStart = null;
    this.handle = el('button', { type: 'button', class: 'chrome-handle', 'aria-label': 'Show tabs', hidden: true, onclick: () => this.show() },
      el('span', { class: 'handle-grip', 'aria-hidden': 'true' }));
    // A tap on the terminal shows or hides the header and tabs; in fullscreen a tap in a corner
    // or a swipe down from the top edge brings them back.
    panes.addEventListener('touchstart', (event) => this.touchBegan(event), { passive: true, capture: true });
    panes.addEventListener('touchend', (event) => this.touchEnded(event), { passive: false, capture: true });
    root.addEventListener('touchstart', (event) => this.edgeTouchBegan(event), { passive: true });
    root.addEventListener('touchmove', (event) => this.edgeTouchMoved(event), { passive: true });
  }

  hide() {
    if (this.root.classList.contains('chrome-hidden')) return;
    this.root.classList.add('chrome-hidden');
    this.handle.hidden = false;
    this.scheduleFit();
  }

  show() {
    if (!this.root.classList.contains('chrome-hidden')) return;
    this.root.classList.remove('chrome-hidden');
    this.handle.hidden = true;
    this.scheduleFit();
  }

  /**
   * The handle carries the mark of a tab that wants a look (a bell, an exit), and says so in its
   * name; none without `kind`.
   * @param {string | undefined} kind
   * @param {string | undefined} words what the mark says, as on the tab
   */
  markHandle(kind, words) {
    if (kind) this.handle.dataset.attention = kind;
    else delete this.handle.dataset.attention;
    this.handle.setAttribute('aria-label', kind ? `Show tabs (${words} in another session)` : 'Show tabs');
  }

  /** @param {TouchEvent} event */
  touchBegan(event) {
    const touch = event.touches.length === 1 ? event.touches[0] : null;
    this.touchStart = touch ? { x: touch.clientX, y: touch.clientY } : null;
  }

  /** A tap (a touch that did not move) on the terminal: toggles the header and tabs. */
  touchEnded(/** @type {TouchEvent} */ event) {
    const start = this.touchStart;
    this.touchStart = null;
    const touch = event.changedTouches[0];
    if (!start || !touch || !isTouchLayout()) return;
    // Only the terminal itself: a tap on a banner's or notice's button, or on a command's mark,
    // must stay where it was.
    if (!(event.target instanceof Element) || !event.target.closest('.term-host') || event.target.closest('.command-mark')) return;
    if (Math.hypot(touch.clientX - start.x, touch.clientY - start.y) > TAP_SLOP_PX) return;
    const hidden = this.root.classList.contains('chrome-hidden');
    if (this.isFullscreen() && hidden) {
      // In fullscreen a tap is for the program; only a corner brings the tabs back. That tap
      // ends there: its click would land on the special keys now drawn under the finger.
      if (inCorner(touch.clientX, touch.clientY)) {
        event.preventDefault();
        this.show();
      }
      return;
    }
    if (hidden) this.show();
    else this.hide();
  }

  /** @param {TouchEvent} event */
  edgeTouchBegan(event) {
    const touch = event.touches.length === 1 ? event.touches[0] : null;
    this.edgeStart = touch && touch.clientY <= EDGE_PX ? { x: touch.clientX, y: touch.clientY } : null;
  }

  /** A swipe down from the top edge brings the header and tabs back. */
  edgeTouchMoved(/** @type {TouchEvent} */ event) {
    const start = this.edgeStart;
    const touch = event.touches[0];
    if (!start || !touch) return;
    if (touch.clientY - start.y >= SWIPE_PX && Math.abs(touch.clientX - start.x) < touch.clientY - start.y) {
      this.edgeStart = null;
      this.show();
    }
  }
}

/** Whether a point is in a corner of the window. */
function inCorner(/** @type {number} */ x, /** @type {number} */ y) {
  const nearX = x <= CORNER_PX || x >= window.innerWidth - CORNER_PX;
  const nearY = y <= CORNER_PX || y >= window.innerHeight - CORNER_PX;
  return nearX && nearY;
}
