// The DOM renderer's cursor blink (src/cursor-blink.js) against an element that records its
// class and timers the test runs by hand: no browser, no timers of its own.

import assert from 'node:assert/strict';
import { test } from 'node:test';
import { BLINK_MS, CursorBlink, HIDDEN_CLASS, TYPING_PAUSE_MS } from '../src/cursor-blink.js';

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

test('the cursor is hidden and shown by the class every blink interval', () => {
  const element = fakeElement();
  const timers = manualTimers();
  const blink = new CursorBlink(element, timers);
  blink.start();
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
  const blink = new CursorBlink(element, timers);
  blink.start();
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
  const blink = new CursorBlink(element, timers);
  blink.start();
  const changes = element.changes.length;
  blink.output();
  assert.equal(element.changes.length, changes);
});

test('a stopped blink leaves the cursor shown, no timer pending, and ignores keys', () => {
  const element = fakeElement();
  const timers = manualTimers();
  const blink = new CursorBlink(element, timers);
  blink.start();
  timers.fire();
  blink.stop();
  assert.equal(element.classes.has(HIDDEN_CLASS), false);
  assert.equal(timers.pending.size, 0);
  blink.typed();
  assert.equal(timers.pending.size, 0, 'a key does not start a stopped blink');
});
