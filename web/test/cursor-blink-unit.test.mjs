// The DOM renderer's cursor blink (src/cursor-blink.js) against an element that records its
// class and timers the test runs by hand, and the programs' blink requests against a parser the
// test feeds by hand: no browser, no timers of its own.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { BLINK_MS, CursorBlink, HIDDEN_CLASS, ProgramCursorBlink, TYPING_PAUSE_MS } from '../src/cursor-blink.js';

/** An element whose class list records every change. */
function fakeElement() {
  const classes = new Set();
  const changes = [];
  return {
    classes,
    changes,
    classList: {
      toggle(name, force) {
        changes.push([name, force]);
        if (force) classes.add(name);
        else classes.delete(name);
      },
    },
  };
}

/** Timers that run only when the test says: at most one is pending, as CursorBlink keeps. */
function manualTimers() {
  const pending = new Map();
  let next = 0;
  return {
    pending,
    setTimer(callback, ms) {
      next += 1;
      pending.set(next, { callback, ms });
      return next;
    },
    clearTimer(timer) {
      pending.delete(timer);
    },
    /** Runs the one pending timer and returns its delay. */
    fire() {
      assert.equal(pending.size, 1, 'one timer pending');
      const [[timer, { callback, ms }]] = pending;
      pending.delete(timer);
      callback();
      return ms;
    },
  };
}

/** A blink that can be seen: wanted, in a shown pane, its terminal focused. */
function runningBlink(element, timers) {
  const blink = new CursorBlink(element, timers);
  blink.setShown(true);
  blink.setFocused(true);
  blink.setWanted(true);
  return blink;
}

test('the cursor is hidden and shown by the class every blink interval', () => {
  const element = fakeElement();
  const timers = manualTimers();
  const blink = runningBlink(element, timers);
  assert.equal(blink.running, true);
  assert.equal(element.classes.has(HIDDEN_CLASS), false);
  assert.equal(timers.fire(), BLINK_MS);
  assert.equal(element.classes.has(HIDDEN_CLASS), true);
  assert.equal(timers.fire(), BLINK_MS);
  assert.equal(element.classes.has(HIDDEN_CLASS), false);
  assert.equal(timers.pending.size, 1, 'it goes on blinking');
});

test('typing stops the blink without touching the class, until the typing pauses', () => {
  const element = fakeElement();
  const timers = manualTimers();
  const blink = runningBlink(element, timers);
  timers.fire();
  assert.equal(element.classes.has(HIDDEN_CLASS), true);
  const changes = element.changes.length;
  blink.typed();
  blink.typed();
  // A class change while a key is handled would ask for a frame, which the echo would wait for.
  assert.equal(element.changes.length, changes, 'no class change as a key is typed');
  assert.equal(timers.pending.size, 1);
  assert.equal([...timers.pending.values()][0].ms, TYPING_PAUSE_MS);
  // The echo shows the cursor where it moved.
  blink.output();
  assert.equal(element.classes.has(HIDDEN_CLASS), false);
  // After the pause it blinks again, from the shown phase.
  assert.equal(timers.fire(), TYPING_PAUSE_MS);
  assert.equal(element.classes.has(HIDDEN_CLASS), false);
  assert.equal(timers.fire(), BLINK_MS);
  assert.equal(element.classes.has(HIDDEN_CLASS), true);
});

test('output while the cursor is shown changes nothing', () => {
  const element = fakeElement();
  const timers = manualTimers();
  const blink = runningBlink(element, timers);
  const changes = element.changes.length;
  blink.output();
  assert.equal(element.changes.length, changes);
});

test('a disposed blink leaves the cursor shown, no timer pending, and ignores keys', () => {
  const element = fakeElement();
  const timers = manualTimers();
  const blink = runningBlink(element, timers);
  timers.fire();
  blink.dispose();
  assert.equal(element.classes.has(HIDDEN_CLASS), false);
  assert.equal(timers.pending.size, 0);
  blink.typed();
  assert.equal(timers.pending.size, 0, 'a key does not start a stopped blink');
});

test('no timer runs until the blink is wanted, the pane shown and the terminal focused', () => {
  const element = fakeElement();
  const timers = manualTimers();
  const blink = new CursorBlink(element, timers);
  blink.setWanted(true);
  assert.equal(timers.pending.size, 0, 'not shown, not focused');
  blink.setShown(true);
  assert.equal(timers.pending.size, 0, 'not focused');
  blink.typed();
  assert.equal(timers.pending.size, 0, 'a key does not start it');
  blink.setFocused(true);
  assert.equal(blink.running, true);
  assert.equal(timers.fire(), BLINK_MS);
  assert.deepEqual(element.changes, [[HIDDEN_CLASS, true]], 'the first change is the first blink');
});

for (const [condition, lose] of [
  ['focus', (blink) => blink.setFocused(false)],
  ['the shown pane', (blink) => blink.setShown(false)],
  ['a program\'s wish for a blink', (blink) => blink.setWanted(false)],
]) {
  test(`losing ${condition} in the hidden phase stops the timer and shows the cursor; getting it back blinks again`, () => {
    const element = fakeElement();
    const timers = manualTimers();
    const blink = runningBlink(element, timers);
    timers.fire();
    assert.equal(element.classes.has(HIDDEN_CLASS), true);
    lose(blink);
    assert.equal(blink.running, false);
    assert.equal(timers.pending.size, 0, 'no timer');
    assert.equal(element.classes.has(HIDDEN_CLASS), false, 'the cursor is shown');
    blink.setFocused(true);
    blink.setShown(true);
    blink.setWanted(true);
    assert.equal(blink.running, true);
    assert.equal(timers.fire(), BLINK_MS);
    assert.equal(element.classes.has(HIDDEN_CLASS), true);
  });
}

/** A parser that keeps the handlers registered with it and feeds sequences to them by hand. */
function fakeParser() {
  const handlers = new Map();
  const key = ({ prefix = '', intermediates = '', final }) => `${prefix}${intermediates}${final}`;
  return {
    registerCsiHandler(id, callback) {
      handlers.set(`CSI ${key(id)}`, callback);
      return { dispose: () => handlers.delete(`CSI ${key(id)}`) };
    },
    registerEscHandler(id, callback) {
      handlers.set(`ESC ${key(id)}`, callback);
      return { dispose: () => handlers.delete(`ESC ${key(id)}`) };
    },
    /** `CSI Ps SP q`, with the parameters as xterm hands them (an empty one is 0). */
    cursorStyle(...params) {
      return handlers.get('CSI  q')(params.length === 0 ? [0] : params);
    },
    privateModes(set, ...params) {
      return handlers.get(`CSI ?${set ? 'h' : 'l'}`)(params);
    },
    fullReset() {
      return handlers.get('ESC c')();
    },
  };
}

/** A ProgramCursorBlink on a fake parser, with every change and reset it reported. */
function followedBlink(defaultBlinks = true) {
  const parser = fakeParser();
  const changes = [];
  let resets = 0;
  const program = new ProgramCursorBlink(parser, {
    defaultBlinks,
    onChange: (blinks) => changes.push(blinks),
    onReset: () => { resets += 1; },
  });
  return { parser, program, changes, resets: () => resets };
}

test('DECSCUSR: an odd style blinks, an even one stands still, 0 and nothing go back to the default', () => {
  const { parser, program, changes } = followedBlink();
  assert.equal(program.blinks, true, 'the page\'s default');
  for (const [style, blinks] of [[2, false], [1, true], [4, false], [3, true], [6, false], [5, true]]) {
    parser.cursorStyle(style);
    assert.equal(program.blinks, blinks, `CSI ${style} SP q`);
  }
  parser.cursorStyle(2);
  parser.cursorStyle(0);
  assert.equal(program.blinks, true, 'CSI 0 SP q');
  parser.cursorStyle(6);
  parser.cursorStyle();
  assert.equal(program.blinks, true, 'CSI SP q');
  assert.deepEqual(changes, [false, true, false, true, false, true, false, true, false, true]);
});

test('the handlers leave every sequence to xterm as well: the shape and the other modes are its', () => {
  const { parser } = followedBlink();
  assert.equal(parser.cursorStyle(5), false);
  assert.equal(parser.privateModes(true, 12, 25), false);
  assert.equal(parser.privateModes(false, 12), false);
  assert.equal(parser.fullReset(), false);
});

test('mode 12 sets the blink, among other modes too; other modes leave it alone', () => {
  const { parser, program, changes } = followedBlink();
  parser.privateModes(false, 12);
  assert.equal(program.blinks, false, 'CSI ? 12 l');
  parser.privateModes(true, 25, 12);
  assert.equal(program.blinks, true, 'CSI ? 25 ; 12 h');
  parser.privateModes(false, 25, 1049);
  parser.privateModes(false, 1, [2]);
  assert.equal(program.blinks, true, 'modes other than 12');
  assert.deepEqual(changes, [false, true]);
});

test('DECSCUSR\'s choice comes before mode 12\'s, as in xterm\'s renderers, until DECSCUSR 0', () => {
  const { parser, program } = followedBlink(false);
  parser.privateModes(true, 12);
  parser.cursorStyle(2);
  assert.equal(program.blinks, false, 'a steady block over mode 12');
  parser.privateModes(true, 12);
  assert.equal(program.blinks, false);
  parser.cursorStyle(0);
  assert.equal(program.blinks, true, 'mode 12 again');
});

test('a reset, by RIS or by the page, forgets both requests and puts the default back', () => {
  const { parser, program, changes, resets } = followedBlink();
  parser.cursorStyle(2);
  parser.privateModes(false, 12);
  parser.fullReset();
  assert.equal(program.blinks, true);
  assert.equal(resets(), 1, 'the page is told, to put xterm\'s option back');
  parser.privateModes(false, 12);
  program.reset();
  assert.equal(program.blinks, true);
  assert.equal(resets(), 2);
  assert.deepEqual(changes, [false, true, false, true]);
  // A reset that changes nothing is still a reset (xterm's option), but no change.
  program.reset();
  assert.equal(resets(), 3);
  assert.equal(changes.length, 4);
});

test('with a default that stands still, a program\'s blinking cursor is followed until a reset', () => {
  const { parser, program } = followedBlink(false);
  assert.equal(program.blinks, false);
  parser.cursorStyle(1);
  assert.equal(program.blinks, true);
  parser.fullReset();
  assert.equal(program.blinks, false);
});
