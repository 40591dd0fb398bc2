// The blinking cursor of xterm's DOM renderer, blinked by a timer instead of xterm's animation,
// and what the programs in the terminal ask of the cursor's blink.
//
// xterm's DOM renderer blinks the cursor with an endless CSS animation of its colours, which the
// compositor cannot run: the page draws a frame on the main thread every 16.7 ms for as long as
// the cursor blinks, and Chromium holds back the tasks that follow a key press (the echo's
// WebSocket message among them) until the frame it had pending is drawn. Every key's glyph came
// a frame late (BENCHMARKS.md, scenario 13). Here the cursor is hidden and shown by a class on
// the terminal's element every BLINK_MS, which asks for a frame only then, and it stands still
// while the user types, as xterm's own blink does in its other renderers: a key finds a frame
// pending only when it lands within a frame of a toggle. The timer runs only where a blink can
// be seen, in a shown pane whose terminal has focus (xterm draws an unfocused cursor as an
// outline that does not blink); elsewhere each toggle would be a style recalculation and a
// frame for nothing.
//
// A program may ask for a blinking or a steady cursor (DECSCUSR, mode 12). xterm applies both
// itself and, with the DOM renderer, would turn its animation back on for a blinking one; the
// page's style sheet cancels that animation, and ProgramCursorBlink follows the requests so the
// page blinks the cursor exactly when xterm would have.

/** How long the cursor stays shown, and hidden, while it blinks (xterm's own interval). */
export const BLINK_MS = 600;

/** How long after the last key the cursor starts blinking again. */
export const TYPING_PAUSE_MS = 1000;

/** The class on the terminal's element while the cursor is in its hidden phase (style.css). */
export const HIDDEN_CLASS = 'cursor-blink-off';

/** DEC private mode 12: the cursor blinks (`CSI ? 12 h`) or stands still (`CSI ? 12 l`). */
const BLINK_MODE = 12;

/**
 * Blinks a cursor while three things hold: it is wanted ({@link setWanted}: the program's
 * choice or the page's), the pane is shown and its terminal has focus. Starts from nothing.
 */
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
    this.wanted = false;
    this.focused = false;
    this.shown = false;
    /** Whether it blinks, or will once the typing pauses: wanted, shown and focused. */
    this.running = false;
    this.hidden = false;
    this.timer = null;
  }

  /** @param {boolean} wanted whether the cursor should blink at all */
  setWanted(wanted) {
    this.wanted = wanted;
    this.update();
  }

  /** @param {boolean} focused whether the terminal has the keyboard focus */
  setFocused(focused) {
    this.focused = focused;
    this.update();
  }

  /** @param {boolean} shown whether the terminal's pane is shown */
  setShown(shown) {
    this.shown = shown;
    this.update();
  }

  /** Stops blinking for good and leaves the cursor shown. */
  dispose() {
    this.setWanted(false);
  }

  /**
   * A key was typed: no blinking until the typing pauses. The cursor is not shown here, which
   * would ask for a frame while the key is handled; the echo's output shows it ({@link output}).
   */
  typed() {
    if (!this.running) return;
    this.after(TYPING_PAUSE_MS, () => this.blinkFromShown());
  }

  /** Output was written: the cursor moved, and is shown where it went. */
  output() {
    if (this.hidden) this.show();
  }

  /** Starts or stops the timer as the conditions now say; a stopped cursor is left shown. */
  update() {
    const running = this.wanted && this.focused && this.shown;
    if (running === this.running) return;
    this.running = running;
    if (running) {
      this.blinkFromShown();
    } else {
      this.cancel();
      this.show();
    }
  }

  blinkFromShown() {
    this.show();
    this.after(BLINK_MS, () => this.toggle());
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

/**
 * @typedef {object} ParserHooks the part of xterm's `terminal.parser` used here
 * @property {(id: { prefix?: string, intermediates?: string, final: string }, callback: (params: (number | number[])[]) => boolean) => { dispose(): void }} registerCsiHandler
 * @property {(id: { final: string }, callback: () => boolean) => { dispose(): void }} registerEscHandler
 */

/**
 * Whether the cursor should blink, as the programs in the terminal asked, in xterm's own order:
 * DECSCUSR's choice (`CSI Ps SP q`: 1, 3, 5 blink, 2, 4, 6 stand still, 0 or nothing hands the
 * choice back), else mode 12's (`CSI ? 12 h`/`l`), else the page's default. A reset (RIS,
 * `ESC c`, or the page's own {@link reset} with `terminal.reset()`) forgets both.
 *
 * Every handler returns false, so xterm still applies each sequence as it would (the shape, its
 * own record of the blink, the other modes of the same DECSET); the page only follows along.
 * xterm keeps mode 12 in its `cursorBlink` option, which its reset leaves alone: `onReset` is
 * where the page puts the option back.
 */
export class ProgramCursorBlink {
  /**
   * @param {ParserHooks} parser
   * @param {object} options
   * @param {boolean} options.defaultBlinks whether the cursor blinks when no program said
   * @param {(blinks: boolean) => void} options.onChange called when {@link blinks} changes
   * @param {() => void} [options.onReset] called on each reset
   */
  constructor(parser, { defaultBlinks, onChange, onReset = () => {} }) {
    this.defaultBlinks = defaultBlinks;
    this.onChange = onChange;
    this.onReset = onReset;
    /** DECSCUSR's choice, null when it left it to mode 12. @type {boolean | null} */
    this.styleBlinks = null;
    /** Mode 12's choice, null when no program set or reset it. @type {boolean | null} */
    this.modeBlinks = null;
    // The handlers go with the terminal when it is disposed.
    parser.registerCsiHandler({ intermediates: ' ', final: 'q' }, (params) => this.follow(() => this.setCursorStyle(params)));
    parser.registerCsiHandler({ prefix: '?', final: 'h' }, (params) => this.follow(() => this.setPrivateModes(params, true)));
    parser.registerCsiHandler({ prefix: '?', final: 'l' }, (params) => this.follow(() => this.setPrivateModes(params, false)));
    parser.registerEscHandler({ final: 'c' }, () => this.follow(() => this.forget()));
  }

  /** Whether the cursor blinks now. */
  get blinks() {
    return this.styleBlinks ?? this.modeBlinks ?? this.defaultBlinks;
  }

  /** Forgets what the programs asked, for a terminal reset by `terminal.reset()`. */
  reset() {
    this.follow(() => this.forget());
  }

  /**
   * Runs `apply`, tells `onChange` if the answer changed, and returns false: a handler's
   * sequence goes on to xterm's own handler.
   * @param {() => void} apply
   */
  follow(apply) {
    const before = this.blinks;
    apply();
    if (this.blinks !== before) this.onChange(this.blinks);
    return false;
  }

  forget() {
    this.styleBlinks = null;
    this.modeBlinks = null;
    this.onReset();
  }

  /**
   * DECSCUSR, read as xterm reads it: an empty parameter is 0, and any other odd one blinks
   * (a shape past 6 leaves the shape alone but not the blink).
   */
  setCursorStyle(params) {
    const style = params[0] ?? 0;
    if (typeof style !== 'number') return;
    this.styleBlinks = style === 0 ? null : style % 2 === 1;
  }

  /** DECSET (`set`) or DECRST of the modes in `params`, of which only mode 12 matters here. */
  setPrivateModes(params, set) {
    if (params.includes(BLINK_MODE)) this.modeBlinks = set;
  }
}
