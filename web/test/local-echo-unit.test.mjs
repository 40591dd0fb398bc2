// The prediction logic of the page's local echo (src/local-echo.js) against a small model of a
// terminal screen, a view that records what it is asked to draw, and a clock the test moves: no
// browser, no timers of its own.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { COOLDOWN_MS, LocalEcho, MIN_TIMEOUT_MS, UNMEASURED_TIMEOUT_MS, isPredictable } from '../src/local-echo.js';

/** A screen of `cols` x `rows` cells that prints text at its cursor, as a terminal would. */
class FakeScreen {
  constructor(cols = 20, rows = 4) {
    this.cols = cols;
    this.lines = Array.from({ length: rows }, () => Array(cols).fill(''));
    this.row = 0;
    this.col = 0;
    this.alternate = false;
  }

  /** Prints `text`: `\r`, `\n`, `\b`, `\x1b[K` (erase to the end of the line), and wide `漢`. */
  print(text) {
    for (let index = 0; index < text.length; index += 1) {
      const char = text[index];
      if (char === '\r') this.col = 0;
      else if (char === '\n') {
        this.row += 1;
        if (this.row >= this.lines.length) this.lines.push(Array(this.cols).fill(''));
      } else if (char === '\b') this.col = Math.max(0, this.col - 1);
      else if (text.startsWith('\x1b[K', index)) {
        for (let col = this.col; col < this.cols; col += 1) this.lines[this.row][col] = '';
        index += 2;
      } else if (char === '漢') {
        this.lines[this.row][this.col] = char;
        this.lines[this.row][this.col + 1] = '';
        this.col += 2;
      } else {
        this.lines[this.row][this.col] = char;
        this.col += 1;
      }
    }
  }

  text(row) {
    return this.lines[row].map((cell) => cell || ' ').join('').trimEnd();
  }

  cursor() {
    return { line: this.row, col: this.col };
  }

  cell(line, col) {
    return this.lines[line]?.[col] ?? '';
  }

  blankFrom(line, col) {
    return this.lines[line].slice(col).every((cell) => cell === '' || cell === ' ');
  }

  textBeforeCursor(count) {
    return this.lines[this.row].slice(Math.max(0, this.col - count), this.col).map((cell) => cell || ' ').join('');
  }

  mark() {
    const row = this.row;
    return { line: row, disposed: false, dispose() { this.disposed = true; this.line = -1; } };
  }
}

/** A local echo over a fake screen, with a clock and timers the test drives. */
function setup({ mode = 'auto', thresholdMs = 30, cols = 20 } = {}) {
  const screen = new FakeScreen(cols);
  const drawn = [];
  const settings = { mode, thresholdMs };
  let clock = 0;
  let timers = [];
  const echo = new LocalEcho({
    screen,
    view: { draw: (run) => drawn.push(run ? { line: run.marker.line, col: run.col, text: run.text } : null) },
    settings: () => settings,
    now: () => clock,
    setTimer: (callback, ms) => {
      const timer = { at: clock + ms, callback };
      timers.push(timer);
      return timer;
    },
    clearTimer: (timer) => { timers = timers.filter((other) => other !== timer); },
  });
  const world = {
    screen, echo, settings,
    /** What the view shows now: null, or `{ line, col, text }`. */
    get shown() {
      return drawn.at(-1) ?? null;
    },
    type(data) {
      echo.input(data);
    },
    /** The server's output arrives and is drawn. */
    output(text) {
      const seq = echo.receivedOutput();
      screen.print(text);
      echo.drawnOutput(seq);
    },
    /** Moves the clock on, running the timers that come due. */
    advance(ms) {
      const until = clock + ms;
      for (;;) {
        const due = timers.filter((timer) => timer.at <= until).sort((a, b) => a.at - b.at)[0];
        if (!due) break;
        timers = timers.filter((timer) => timer !== due);
        clock = due.at;
        due.callback();
      }
      clock = until;
    },
  };
  return world;
}

/** A prompt with echo confirmed and a round trip of `rtt` ms measured from a few keys. */
function measured({ rtt = 100, ...options } = {}) {
  const world = setup(options);
  world.output('$ ');
  // The first key waits for its echo; once seen, the next keys are predicted (and timed).
  world.type('w');
  world.advance(rtt);
  world.output('w');
  for (const char of 'arm') {
    world.type(char);
    world.advance(rtt);
    world.output(char);
  }
  world.type('\r');
  world.output('\r\n$ ');
  world.type('x');
  world.advance(rtt);
  world.output('x');
  return world;
}

describe('local echo: the logic', () => {
  test('only printable ASCII is predicted', () => {
    assert.equal(isPredictable('a'), true);
    assert.equal(isPredictable('hello world~'), true);
    for (const data of ['', '\r', '\x7f', '\x1b[D', '\t', '\x03', 'é', '漢', 'a\rb']) assert.equal(isPredictable(data), false, JSON.stringify(data));
  });

  test('nothing is drawn before a round trip was measured, then typed keys are drawn at the cursor', () => {
    const world = setup();
    world.output('$ ');
    world.type('w');
    assert.equal(world.shown, null, 'the first key waits for its echo');
    world.advance(100);
    world.output('w');
    world.type('a');
    assert.equal(world.shown, null, 'no round trip measured yet');
    world.advance(100);
    world.output('a');
    assert.equal(world.echo.rtt, 100);
    world.type('bc');
    assert.deepEqual(world.shown, { line: 0, col: 4, text: 'bc' });
    world.output('b');
    assert.deepEqual(world.shown, { line: 0, col: 5, text: 'c' });
    world.output('c');
    assert.equal(world.shown, null);
    assert.equal(world.screen.text(0), '$ wabc');
    assert.equal(world.echo.mispredictions, 0);
  });

  test('below the threshold nothing is drawn; threshold 0 always draws; off draws and keeps nothing', () => {
    const fast = measured({ rtt: 10 });
    fast.type('abc');
    assert.equal(fast.shown, null);
    assert.equal(fast.echo.predictions.length, 3, 'still measured');

    const always = measured({ rtt: 1, thresholdMs: 0 });
    always.type('abc');
    assert.equal(always.shown?.text, 'abc');

    const off = measured();
    off.settings.mode = 'off';
    off.type('abc');
    assert.equal(off.shown, null);
    assert.equal(off.echo.predictions.length, 0);
  });

  test('a wide character where a prediction was is a misprediction: all taken back, then a pause', () => {
    const world = measured();
    world.type('ab');
    assert.equal(world.shown?.text, 'ab');
    world.output('\x1b[K漢');
    assert.equal(world.shown, null);
    assert.equal(world.echo.mispredictions, 1);
    // Echo resumes, but the pause after a wrong guess holds predictions back.
    world.output('ab');
    world.type('c');
    assert.equal(world.shown, null, 'waits for the echo after a wrong guess');
    world.output('c');
    world.type('d');
    assert.equal(world.shown, null, 'still in the pause');
    world.output('d');
    world.advance(COOLDOWN_MS);
    world.type('e');
    assert.equal(world.shown?.text, 'e');
  });

  test('output elsewhere (a newline, other text) takes the predictions back', () => {
    const world = measured();
    world.type('ab');
    world.output('\r\nsomething else');
    assert.equal(world.shown, null);
    assert.equal(world.echo.mispredictions, 1);
  });

  test('output that does not reach the predictions leaves them drawn', () => {
    const world = measured();
    world.type('ab');
    // A redraw of what is left of the cursor: the predicted cells stay empty, the cursor before them.
    world.output('\r$ x');
    assert.equal(world.shown?.text, 'ab');
    world.output('ab');
    assert.equal(world.shown, null);
    assert.equal(world.echo.mispredictions, 0);
  });

  test('a password prompt: after Enter, keys the server does not echo are never drawn', () => {
    const world = measured();
    world.type('\r');
    world.output('\r\nPassword: ');
    world.type('secret');
    assert.equal(world.shown, null);
    world.advance(MIN_TIMEOUT_MS * 5);
    world.type('more');
    assert.equal(world.shown, null);
    world.type('\r');
    world.output('\r\n$ ');
    world.type('l');
    assert.equal(world.shown, null, 'waits for the echo again');
    world.advance(100);
    world.output('l');
    world.type('s');
    assert.equal(world.shown?.text, 's', 'echo is back');
  });

  test('a drawn prediction the server never echoes is taken back after the timeout', () => {
    const world = measured();
    world.type('ab');
    assert.equal(world.shown?.text, 'ab');
    world.advance(MIN_TIMEOUT_MS - 1);
    assert.equal(world.shown?.text, 'ab');
    world.advance(1);
    assert.equal(world.shown, null);
    assert.equal(world.echo.mispredictions, 1);
    world.advance(COOLDOWN_MS);
    world.type('c');
    assert.equal(world.shown, null, 'no prediction until the output shows echo again');
  });

  test('before any round trip is measured, a slow echo still measures one', () => {
    const world = setup();
    world.output('$ ');
    world.type('w');
    world.advance(3_000);
    world.output('w');
    world.type('a');
    world.advance(UNMEASURED_TIMEOUT_MS - 1);
    world.output('a');
    assert.equal(world.echo.rtt, UNMEASURED_TIMEOUT_MS - 1);
    assert.equal(world.echo.mispredictions, 0);
    world.type('b');
    assert.equal(world.shown?.text, 'b');
  });

  test('the alternate screen gets no predictions, and entering it takes them back', () => {
    const world = measured();
    world.screen.alternate = true;
    world.type('abc');
    assert.equal(world.shown, null);
    assert.equal(world.echo.predictions.length, 0);

    const entering = measured();
    entering.type('ab');
    assert.equal(entering.shown?.text, 'ab');
    entering.screen.alternate = true;
    entering.output('\x1b[?1049h');
    assert.equal(entering.shown, null);
    entering.screen.alternate = false;
    entering.type('c');
    assert.equal(entering.shown, null, 'waits for echo after leaving it');
  });

  test('Enter ends prediction: keys drawn before it stay until echoed, keys after it wait for their echo', () => {
    const world = measured();
    world.type('ab');
    world.type('\r');
    assert.equal(world.shown?.text, 'ab');
    world.type('c');
    assert.equal(world.shown?.text, 'ab', 'c is sent, not drawn');
    world.output('ab\r\n$ ');
    assert.equal(world.shown, null);
    world.output('c');
    world.type('d');
    assert.equal(world.shown?.text, 'd');
    assert.equal(world.echo.mispredictions, 0);
  });

  test('Backspace ends prediction without counting what it erases as a misprediction', () => {
    const world = measured();
    world.type('ab');
    world.type('\x7f');
    world.type('c');
    world.output('ab\b\x1b[K');
    world.output('c');
    assert.equal(world.shown, null);
    assert.equal(world.echo.mispredictions, 0);
    assert.equal(world.screen.text(1), '$ xac');
    world.type('d');
    assert.equal(world.shown?.text, 'd', 'the echo of c after the Backspace restored confidence');
  });

  test('keys after the line is full, or in the middle of a line, are not predicted', () => {
    const world = measured({ cols: 8 });
    world.type('abc');
    assert.deepEqual(world.shown, { line: 1, col: 3, text: 'abc' });
    world.type('de');
    assert.equal(world.shown?.text, 'abcd', 'the last column is never predicted');
    world.output('abcde');
    assert.equal(world.shown, null);

    const middle = measured();
    middle.output('yz\b\b');
    middle.type('q');
    assert.equal(middle.shown, null, 'text right of the cursor: an insertion is not predicted');
  });

  test('a reset (snapshot, resize) forgets predictions without counting them wrong', () => {
    const world = measured();
    world.type('ab');
    world.echo.reset();
    assert.equal(world.shown, null);
    assert.equal(world.echo.mispredictions, 0);
    world.type('c');
    assert.equal(world.shown, null, 'waits for echo after a reset');
  });
});
