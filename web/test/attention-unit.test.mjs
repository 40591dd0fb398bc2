// A background tab's attention marks (src/attention.js) under node, without a browser: which
// mark shows when several come, the bell kept under a wait, and what looking at the tab clears.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { attentionCame, attentionSeen, waitEnded } from '../src/attention.js';

const freshTab = () => ({ attention: null, bellUnseen: false });

describe('attention marks', () => {
  test('a mark that outranks the present one replaces it, a lesser one does not', () => {
    const tab = freshTab();
    assert.equal(attentionCame(tab, 'bell'), true);
    assert.equal(tab.attention, 'bell');
    assert.equal(attentionCame(tab, 'input'), true);
    assert.equal(tab.attention, 'input');
    assert.equal(attentionCame(tab, 'bell'), false, 'a bell does not outrank a wait');
    assert.equal(tab.attention, 'input');
    assert.equal(attentionCame(tab, 'exited'), true);
    assert.equal(attentionCame(tab, 'input'), false, 'nothing outranks an exit');
    assert.equal(tab.attention, 'exited');
  });

  test('a bell rung under a wait shows once the wait ends unseen', () => {
    const tab = freshTab();
    attentionCame(tab, 'input');
    attentionCame(tab, 'bell');
    assert.equal(tab.attention, 'input');
    assert.equal(waitEnded(tab), true);
    assert.equal(tab.attention, 'bell');
  });

  test('a bell the wait came after shows again too', () => {
    const tab = freshTab();
    attentionCame(tab, 'bell');
    attentionCame(tab, 'input');
    waitEnded(tab);
    assert.equal(tab.attention, 'bell');
  });

  test('a wait that ends without a bell leaves no mark', () => {
    const tab = freshTab();
    attentionCame(tab, 'input');
    assert.equal(waitEnded(tab), true);
    assert.equal(tab.attention, null);
  });

  test('the end of a wait leaves a mark that is not the wait alone', () => {
    const tab = freshTab();
    attentionCame(tab, 'exited');
    assert.equal(waitEnded(tab), false);
    assert.equal(tab.attention, 'exited');
    assert.equal(waitEnded(freshTab()), false);
  });

  test('looking at the tab clears its mark and the bell under it', () => {
    const tab = freshTab();
    attentionCame(tab, 'bell');
    attentionCame(tab, 'input');
    assert.equal(attentionSeen(tab), true);
    assert.deepEqual(tab, freshTab());
    attentionCame(tab, 'input');
    waitEnded(tab);
    assert.equal(tab.attention, null, 'the bell was seen with the tab');
    assert.equal(attentionSeen(tab), false, 'nothing to clear');
  });
});
