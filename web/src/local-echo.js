// Predictive local echo, as VS Code's terminal and mosh do it: over a slow link, printable keys
// typed at a shell prompt are drawn at once, dimmed, over the terminal, and confirmed or taken
// back by the output the server sends. Predictions are drawn in an xterm.js decoration (an
// element laid over the cells), never written into the terminal: xterm's buffer only ever holds
// what the server sent, so the screen always ends up as the server's.
//
// The round trip is measured from typing itself: the time from sending a predicted key to the
// output that draws it where it was predicted. No frame of the WebSocket protocol is added.
//
// When it predicts, all of these must hold:
// - the setting is `auto` and the measured round trip exceeds the threshold (30 ms by default);
// - the normal screen is active (a full-screen program's alternate screen gets no predictions);
// - the page is *confident* that the server echoes what is typed where the cursor is: after
//   connecting, after any key that is not a printable character (Enter, Tab, Backspace, arrows,
//   control keys, escape sequences), after a wrong prediction or one the server did not echo in
//   time (max(1 s, 4 round trips); 5 s before any was measured), the next keys are only sent, and prediction resumes once the output shows them echoed
//   just before the cursor. A password prompt (`stty -echo`) never echoes, so nothing typed
//   there is drawn;
// - no prediction was wrong in the last COOLDOWN_MS;
// - the cursor is at the end of its line's text and the prediction stays off the last column
//   (no wrapping is predicted).
//
// This module has no DOM or xterm dependency of its own: `LocalEcho` works against a small
// screen interface (`xtermScreen` adapts a terminal) and a view (`DecorationView` draws in one),
// so the prediction logic is tested under node without a browser.

/** The default round trip above which `auto` predicts, in milliseconds. */
export const DEFAULT_THRESHOLD_MS = 30;
/** The largest threshold the settings accept, in milliseconds. */
export const MAX_THRESHOLD_MS = 10_000;
/** How long predictions stay off after one was wrong. */
export const COOLDOWN_MS = 2_000;
/** A prediction the output has not confirmed after this long (or 4 round trips) was wrong. */
export const MIN_TIMEOUT_MS = 1_000;
/** The same before any round trip was measured: long enough to measure a very slow link. */
export const UNMEASURED_TIMEOUT_MS = 5_000;
/** The round trip is the median of this many recent samples. */
const SAMPLES = 5;
/** Keys sent while not confident, kept to recognise their echo; more are forgotten. */
const MAX_PROBES = 64;

/**
 * @typedef {{ line: number, dispose(): void }} Marker a line of the buffer that stays the same
 *   line as output scrolls (an xterm marker); `line` is -1 once the line is gone.
 * @typedef {object} Screen what the prediction logic reads of the terminal
 * @property {number} cols
 * @property {boolean} alternate whether the alternate screen (a full-screen program) is active
 * @property {() => { line: number, col: number }} cursor the cursor (`line` absolute in the buffer)
 * @property {(line: number, col: number) => string} cell the text of a cell ('' when empty)
 * @property {(line: number, col: number) => boolean} blankFrom whether the line holds nothing from `col` on
 * @property {(count: number) => string} textBeforeCursor up to `count` cells just left of the cursor
 * @property {() => Marker | null} mark a marker on the cursor's line
 * @typedef {{ marker: Marker, col: number, text: string }} Run predictions drawn from `col` on
 * @typedef {object} View where predictions are drawn
 * @property {(run: Run | null) => void} draw shows `run`, or nothing
 * @typedef {{ mode: 'auto' | 'off', thresholdMs: number }} LocalEchoSettings
 * @typedef {{ char: string, col: number, sentAt: number, seq: number, judged: boolean }} Prediction
 *   `seq`: the output frames received when the key was sent (only later output can echo it);
 *   `judged`: whether a mismatch counts as a wrong prediction (not for those still waiting when
 *   a key that ends prediction was sent: what that key does to them is unknown).
 */

/** Whether `data` (one `onData` call) is only printable ASCII characters, which are predicted. */
export function isPredictable(data) {
  if (data.length === 0) return false;
  for (let index = 0; index < data.length; index += 1) {
    const code = data.charCodeAt(index);
    if (code < 0x20 || code > 0x7e) return false;
  }
  return true;
}

export class LocalEcho {
  /**
   * @param {object} options
   * @param {Screen} options.screen
   * @param {View} options.view
   * @param {() => LocalEchoSettings} options.settings read at every key
   * @param {() => number} [options.now] a monotonic clock in milliseconds
   * @param {(callback: () => void, ms: number) => any} [options.setTimer]
   * @param {(timer: any) => void} [options.clearTimer]
   */
  constructor({ screen, view, settings, now = () => performance.now(), setTimer = (callback, ms) => setTimeout(callback, ms), clearTimer = (timer) => clearTimeout(timer) }) {
    this.screen = screen;
    this.view = view;
    this.settings = settings;
    this.now = now;
    this.setTimer = setTimer;
    this.clearTimer = clearTimer;
    /** @type {Prediction[]} the keys drawn (or measured) and not yet confirmed, in order */
    this.predictions = [];
    /** The line the predictions are on (they never wrap, so they share one). @type {Marker | null} */
    this.marker = null;
    /** Keys sent while not confident, with the output count then, to recognise their echo. */
    this.probes = /** @type {{ char: string, seq: number }[]} */ ([]);
    this.confident = false;
    /** Recent round trips, newest last. @type {number[]} */
    this.samples = [];
    this.cooldownUntil = -Infinity;
    /** Output frames received, and the last one the terminal has drawn. */
    this.received = 0;
    this.drawn = 0;
    this.timer = null;
    /** Counters for the tests and for anyone curious: predictions confirmed and taken back. */
    this.confirmed = 0;
    this.mispredictions = 0;
  }

  /** The measured round trip in milliseconds (the median of recent samples), or null before any. */
  get rtt() {
    if (this.samples.length === 0) return null;
    const sorted = [...this.samples].sort((a, b) => a - b);
    return sorted[Math.floor(sorted.length / 2)];
  }

  /** Whether predictions are drawn now (they are made, for measuring, either way). */
  get showing() {
    const { mode, thresholdMs } = this.settings();
    const rtt = this.rtt;
    return mode === 'auto' && rtt !== null && rtt > thresholdMs && this.now() >= this.cooldownUntil;
  }

  /** A key (or a paste) about to be sent to the server. */
  input(data) {
    if (this.settings().mode === 'off') {
      this.reset();
      return;
    }
    if (this.screen.alternate || !isPredictable(data)) {
      this.endPrediction();
    } else {
      for (const char of data) this.type(char);
    }
    this.render();
  }

  /** An output frame arrived; returns its number, for `drawnOutput` once the terminal drew it. */
  receivedOutput() {
    this.received += 1;
    return this.received;
  }

  /** The terminal has drawn output frame `seq`: the screen now tells which predictions held. */
  drawnOutput(seq) {
    this.drawn = Math.max(this.drawn, seq);
    this.check();
  }

  /**
   * Forgets every prediction, not counting any as wrong: the screen was redrawn (a snapshot, a
   * restart, a resize) or the connection changed, so what comes next says nothing about them.
   */
  reset() {
    this.clearPredictions();
    this.probes = [];
    this.confident = false;
    this.render();
  }

  dispose() {
    this.clearPredictions();
    this.view.draw(null);
  }

  // ---- keys -------------------------------------------------------------------------------

  type(char) {
    if (!this.confident) {
      this.probe(char);
      return;
    }
    const col = this.nextColumn();
    if (col === null) {
      this.confident = false;
      this.probe(char);
      return;
    }
    this.predictions.push({ char, col, sentAt: this.now(), seq: this.received, judged: true });
    this.armTimer();
  }

  /** Where the next prediction goes, taking a marker for a first one; null when it cannot. */
  nextColumn() {
    const last = this.predictions.at(-1);
    if (last) {
      const col = last.col + 1;
      return this.marker && this.marker.line >= 0 && col < this.screen.cols - 1 ? col : null;
    }
    const cursor = this.screen.cursor();
    if (cursor.col >= this.screen.cols - 1 || !this.screen.blankFrom(cursor.line, cursor.col)) return null;
    this.marker?.dispose();
    this.marker = this.screen.mark();
    return this.marker ? cursor.col : null;
  }

  probe(char) {
    this.probes.push({ char, seq: this.received });
    if (this.probes.length > MAX_PROBES) this.probes = [];
  }

  /**
   * A key that is not predicted: predictions already made stay until the output passes them
   * (the server echoes them before it acts on this key), but no longer count as wrong if the
   * output differs; keys from now on wait for their echo.
   */
  endPrediction() {
    for (const prediction of this.predictions) prediction.judged = false;
    this.probes = [];
    this.confident = false;
  }

  // ---- output -----------------------------------------------------------------------------

  check() {
    if (this.screen.alternate) {
      this.clearPredictions();
      this.probes = [];
      this.confident = false;
      this.render();
      return;
    }
    const changed = this.checkPredictions();
    this.checkProbes();
    if (changed) this.render();
  }

  /** Confirms the predictions the output drew, takes all back at the first it contradicts. */
  checkPredictions() {
    let changed = false;
    while (this.predictions.length > 0) {
      const prediction = this.predictions[0];
      // Only output that arrived after the key was sent can be its echo.
      if (this.drawn <= prediction.seq) break;
      const line = this.marker?.line ?? -1;
      if (line < 0) {
        this.contradicted(prediction);
        return true;
      }
      const cursor = this.screen.cursor();
      const cell = this.screen.cell(line, prediction.col);
      const passed = cursor.line > line || (cursor.line === line && cursor.col > prediction.col);
      if (passed && cell === prediction.char) {
        this.predictions.shift();
        if (prediction.judged) {
          this.addSample(this.now() - prediction.sentAt);
          this.confirmed += 1;
        }
        changed = true;
        continue;
      }
      // The output has not reached it yet.
      if (!passed && (cell === '' || cell === ' ')) break;
      this.contradicted(prediction);
      return true;
    }
    if (this.predictions.length === 0) this.clearPredictions();
    return changed;
  }

  /** Whether the keys sent while not confident now stand just left of the cursor: echo is back. */
  checkProbes() {
    if (this.confident || this.probes.length === 0 || this.screen.alternate) return;
    const before = this.screen.textBeforeCursor(this.probes.length);
    for (let count = this.probes.length; count > 0; count -= 1) {
      if (this.drawn <= this.probes[count - 1].seq) continue;
      const echoed = this.probes.slice(0, count).map((probe) => probe.char).join('');
      if (before.endsWith(echoed)) {
        this.probes.splice(0, count);
        // Keys still on their way keep it waiting: the cursor is not where the next one goes.
        this.confident = this.probes.length === 0 && this.predictions.length === 0;
        return;
      }
    }
  }

  /**
   * The output differs from `prediction`: take every prediction back. A wrong guess stops
   * prediction until the output shows echo again, and for COOLDOWN_MS; one made before a key
   * that ends prediction (what that key did is unknown) is only dropped.
   */
  contradicted(prediction) {
    this.clearPredictions();
    if (!prediction.judged) return;
    this.probes = [];
    this.confident = false;
    this.mispredictions += 1;
    this.cooldownUntil = this.now() + COOLDOWN_MS;
  }

  addSample(ms) {
    this.samples.push(ms);
    if (this.samples.length > SAMPLES) this.samples.shift();
  }

  clearPredictions() {
    this.predictions = [];
    this.marker?.dispose();
    this.marker = null;
    if (this.timer !== null) {
      this.clearTimer(this.timer);
      this.timer = null;
    }
  }

  /** A timer for the oldest prediction: one the server never echoes (no echo) is taken back. */
  armTimer() {
    if (this.timer !== null || this.predictions.length === 0) return;
    const rtt = this.rtt;
    const timeout = rtt === null ? UNMEASURED_TIMEOUT_MS : Math.max(MIN_TIMEOUT_MS, 4 * rtt);
    const due = this.predictions[0].sentAt + timeout;
    this.timer = this.setTimer(() => {
      this.timer = null;
      const oldest = this.predictions[0];
      if (!oldest) return;
      if (this.now() >= oldest.sentAt + timeout) {
        this.contradicted(oldest);
        this.render();
      } else {
        this.armTimer();
      }
    }, Math.max(0, due - this.now()));
  }

  render() {
    if (this.predictions.length === 0 || !this.marker || !this.showing) {
      this.view.draw(null);
      return;
    }
    this.view.draw({
      marker: this.marker,
      col: this.predictions[0].col,
      text: this.predictions.map((prediction) => prediction.char).join(''),
    });
  }
}

// ---- xterm.js ---------------------------------------------------------------------------------

/**
 * The screen of an xterm.js terminal, as `LocalEcho` reads it.
 * @param {import('@xterm/xterm').Terminal} terminal
 * @returns {Screen}
 */
export function xtermScreen(terminal) {
  const line = (index) => terminal.buffer.active.getLine(index);
  return {
    get cols() {
      return terminal.cols;
    },
    get alternate() {
      return terminal.buffer.active.type === 'alternate';
    },
    cursor() {
      const buffer = terminal.buffer.active;
      return { line: buffer.baseY + buffer.cursorY, col: buffer.cursorX };
    },
    cell: (index, col) => line(index)?.getCell(col)?.getChars() ?? '',
    // Spaces count as blank: erasing with `\b \b` (the tty's Backspace) writes them.
    blankFrom: (index, col) => (line(index)?.translateToString(true, col) ?? '').trim() === '',
    textBeforeCursor(count) {
      const buffer = terminal.buffer.active;
      const col = Math.min(buffer.cursorX, terminal.cols);
      return line(buffer.baseY + buffer.cursorY)?.translateToString(false, Math.max(0, col - count), col) ?? '';
    },
    mark: () => terminal.registerMarker(0) ?? null,
  };
}

/**
 * Draws predictions in an xterm.js decoration: the predicted characters dimmed, one per cell,
 * over the terminal's background, then a cell in the cursor's colour (the real cursor is under
 * the first prediction). Nothing is written to the terminal.
 */
export class DecorationView {
  /**
   * @param {import('@xterm/xterm').Terminal} terminal
   */
  constructor(terminal) {
    this.terminal = terminal;
    /** @type {import('@xterm/xterm').IDecoration | null} */
    this.decoration = null;
    this.shown = '';
  }

  /** @param {Run | null} run */
  draw(run) {
    const key = run ? `${run.marker.line}:${run.col}:${run.text}` : '';
    if (key === this.shown) return;
    this.shown = key;
    this.decoration?.dispose();
    this.decoration = null;
    if (!run) return;
    const decoration = this.terminal.registerDecoration({ marker: /** @type {any} */ (run.marker), x: run.col, width: run.text.length + 1, layer: 'top' });
    if (!decoration) return;
    this.decoration = decoration;
    decoration.onRender((element) => this.fill(element, run.text));
  }

  fill(element, text) {
    if (element.dataset.text === text) return;
    const { options } = this.terminal;
    const theme = options.theme ?? {};
    element.dataset.text = text;
    element.classList.add('local-echo');
    element.style.background = theme.background ?? '#000000';
    element.style.color = theme.foreground ?? '#ffffff';
    element.style.fontFamily = options.fontFamily ?? 'monospace';
    element.style.fontSize = `${options.fontSize}px`;
    element.style.lineHeight = element.style.height;
    const cells = [...text].map((char) => {
      const cell = document.createElement('span');
      cell.className = 'local-echo-char';
      cell.textContent = char;
      return cell;
    });
    const cursor = document.createElement('span');
    cursor.className = 'local-echo-cursor';
    cursor.style.background = theme.cursor ?? theme.foreground ?? '#ffffff';
    // In a row of its own: xterm shows and hides the decoration by its `display`.
    const row = document.createElement('div');
    row.className = 'local-echo-row';
    row.append(...cells, cursor);
    element.replaceChildren(row);
  }
}
