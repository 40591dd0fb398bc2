// The blinking cursor of xterm's DOM renderer, blinked by a timer instead of xterm's animation.
//
// xterm's DOM renderer blinks the cursor with an endless CSS animation of its colours, which the
// compositor cannot run: the page draws a frame on the main thread every 16.7 ms for as long as
// the cursor blinks, and Chromium holds back the tasks that follow a key press (the echo's
// WebSocket message among them) until the frame it had pending is drawn. Every key's glyph came
// a frame late (BENCHMARKS.md, scenario 13). Here the cursor is hidden and shown by a class on
// the terminal's element every BLINK_MS, which asks for a frame only then, and it stands still
// while the user types, as xterm's own blink does in its other renderers: a key finds a frame
// pending only when it lands within a frame of a toggle.

/** How long the cursor stays shown, and hidden, while it blinks (xterm's own interval). */
export const BLINK_MS = 600;

/** How long after the last key the cursor starts blinking again. */
export const TYPING_PAUSE_MS = 1000;

/** The class on the terminal's element while the cursor is in its hidden phase (style.css). */
export const HIDDEN_CLASS = 'cursor-blink-off';

export class CursorBlink {
  /**
   * @param {{ classList: { toggle(name: string, force: boolean): unknown } }} element what
   *   carries {@link HIDDEN_CLASS}
   * @param {object} [timers]
   * @param {(callback: () => void, ms: number) => any} [timers.setTimer]
   * @param {(timer: any) => void} [timers.clearTimer]
   */
  constructor(element, { setTimer = (callback, ms) => setTimeout(callback, ms), clearTimer = (timer) => clearTimeout(timer) } = {}) {
    this.element = element;
    this.setTimer = setTimer;
    this.clearTimer = clearTimer;
    this.running = false;
    this.hidden = false;
    this.timer = null;
  }

  /** Starts blinking, from the shown phase. */
  start() {
    this.running = true;
    this.show();
    this.after(BLINK_MS, () => this.toggle());
  }

  /** Stops blinking and leaves the cursor shown. */
  stop() {
    this.running = false;
    this.cancel();
    this.show();
  }

  /**
   * A key was typed: no blinking until the typing pauses. The cursor is not shown here, which
   * would ask for a frame while the key is handled; the echo's output shows it ({@link output}).
   */
  typed() {
    if (!this.running) return;
    this.after(TYPING_PAUSE_MS, () => this.start());
  }

  /** Output was written: the cursor moved, and is shown where it went. */
  output() {
    if (this.hidden) this.show();
  }

  toggle() {
    this.setHidden(!this.hidden);
    this.after(BLINK_MS, () => this.toggle());
  }

  show() {
    if (this.hidden) this.setHidden(false);
  }

  /** @param {boolean} hidden */
  setHidden(hidden) {
    this.hidden = hidden;
    this.element.classList.toggle(HIDDEN_CLASS, hidden);
  }

  /** Runs `callback` after `ms`, instead of what was due before. */
  after(ms, callback) {
    this.cancel();
    this.timer = this.setTimer(() => {
      this.timer = null;
      callback();
    }, ms);
  }

  cancel() {
    if (this.timer !== null) this.clearTimer(this.timer);
    this.timer = null;
  }
}
