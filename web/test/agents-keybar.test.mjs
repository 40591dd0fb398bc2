// The page on touch screens, in Debian's Chromium against a real stack: the key bar (Shift+Tab as
// ESC [ Z, a latching and a locked Ctrl, Alt, Paste, each key's receipt, and a failure while the
// server is stalled), a tap that toggles the header on a tablet, and a finger's scroll in a
// full-screen program. The phone is 390x844 with touch, the tablet 1024x768 with touch.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { agentsHarness, agentsSkip, sentInput } from './agents-support.mjs';
import { closePage, screenText, typeLine, waitFor, waitForScreen } from './support.mjs';

const skip = agentsSkip();

/** The key bar's receipt wait (key-bar.js RECEIPT_TIMEOUT_MS) and some room. */
const RECEIPT_FAILURE_SEEN_MS = 8000;

describe('web page for phones and agents: the key bar and touch', { skip: skip ?? false }, () => {
  const harness = agentsHarness();

  for (const device of ['phone', 'tablet']) {
    test(`${device}: Shift+Tab reaches the program as ESC [ Z, a latched Ctrl with c sends 0x03, and each key shows its receipt`, async () => {
      const instance = await harness.stack.createInstance();
      const page = await harness.open(device, instance.id);
      const keys = page.getByRole('toolbar', { name: 'Special keys' });
      await keys.waitFor();
      const key = (name) => keys.getByRole('button', { name, exact: true });

      await typeLine(page, 'cat -v');
      await waitForScreen(page, 'cat -v');
      await key('Shift+Tab').tap();
      await waitFor('the Shift+Tab receipt', async () => (await key('Shift+Tab').getAttribute('data-receipt')) === 'delivered');
      await page.keyboard.press('Enter');
      await waitForScreen(page, '^[[Z');
      assert.ok(sentInput(page).includes('\x1b[Z'), 'ESC [ Z was sent');

      // Ctrl latches for one key typed on the keyboard: c becomes 0x03, which ends cat.
      await key('Ctrl').tap();
      assert.equal(await key('Ctrl').getAttribute('aria-pressed'), 'true');
      await page.keyboard.type('c');
      await waitFor('the Ctrl+C receipt', async () => (await key('Ctrl').getAttribute('data-receipt')) === 'delivered');
      assert.equal(await key('Ctrl').getAttribute('aria-pressed'), 'false', 'Ctrl let go after one key');
      assert.ok(sentInput(page).includes('\x03'), '0x03 was sent');
      await typeLine(page, 'echo after-ctrl-c-$((6*7))');
      // The prompt is back: the signal ended cat.
      await waitForScreen(page, 'after-ctrl-c-42');
      await page.getByRole('status', { name: 'Key receipts' }).filter({ hasText: 'Ctrl+c delivered' }).waitFor({ state: 'attached' });

      // A double tap locks Ctrl for every key until the next tap.
      await key('Ctrl').tap();
      await key('Ctrl').tap();
      assert.equal(await key('Ctrl').getAttribute('data-latch'), 'locked');
      await key('Up').tap();
      assert.equal(await key('Ctrl').getAttribute('data-latch'), 'locked', 'a locked Ctrl stays');
      await key('Ctrl').tap();
      assert.equal(await key('Ctrl').getAttribute('aria-pressed'), 'false');
      assert.ok(sentInput(page).includes('\x1b[1;5A'), 'Ctrl+Up was sent as CSI 1;5 A');

      // Alt latches too: Esc before the next key typed.
      await key('Alt').tap();
      await page.keyboard.type('b');
      await waitFor('the Alt+b receipt', async () => (await key('Alt').getAttribute('data-receipt')) === 'delivered');
      assert.ok(sentInput(page).includes('\x1bb'), 'Alt+b was sent as ESC b');
      // Paste types the clipboard's text, with its own receipt.
      await page.keyboard.press('Control+U');
      await page.evaluate(() => navigator.clipboard.writeText('echo pasted-$((3*3))'));
      await key('Paste').tap();
      await waitFor('the Paste receipt', async () => (await key('Paste').getAttribute('data-receipt')) === 'delivered');
      await page.keyboard.press('Enter');
      await waitForScreen(page, 'pasted-9');
      await closePage(page);
    });
  }

  test('phone: with the server stalled a key shows a failure, and its receipt when it comes after all', async () => {
    const instance = await harness.stack.createInstance();
    const page = await harness.open('phone', instance.id);
    const esc = page.getByRole('toolbar', { name: 'Special keys' }).getByRole('button', { name: 'Escape', exact: true });
    harness.stack.pause();
    try {
      await esc.tap();
      assert.equal(await esc.getAttribute('data-receipt'), 'sent');
      await page.locator('[aria-label="Escape"][data-receipt="failed"]').waitFor({ timeout: RECEIPT_FAILURE_SEEN_MS });
      await page.getByRole('status', { name: 'Key receipts' }).filter({ hasText: 'Escape: no receipt from the server' }).waitFor({ state: 'attached' });
    } finally {
      harness.stack.resume();
    }
    await page.locator('[aria-label="Escape"][data-receipt="delivered"]').waitFor();
    await closePage(page);
  });

  test('tablet: a tap on the terminal hides and shows the header and tabs on a 1024x768 touch screen', async () => {
    const instance = await harness.stack.createInstance();
    const page = await harness.open('tablet', instance.id);
    const terminal = page.locator('.pane:not([hidden]) .xterm');
    await terminal.tap();
    await page.locator('.topbar').waitFor({ state: 'hidden' });
    await page.getByRole('tablist').waitFor({ state: 'hidden' });
    await terminal.tap();
    await page.locator('.topbar').waitFor({ state: 'visible' });
    await page.getByRole('tablist').waitFor({ state: 'visible' });
    // The key bar is there too, at this width.
    assert.equal(await page.getByRole('toolbar', { name: 'Special keys' }).isVisible(), true);
    await closePage(page);
  });

  test('phone: a finger scrolling in a full-screen program sends what the wheel sends', async () => {
    const instance = await harness.stack.createInstance();
    const page = await harness.open('phone', instance.id);
    await typeLine(page, "printf '\\033[?1049h'; stty -icanon; cat -v");
    await waitFor('the alternate screen', () => page.evaluate(() => document.querySelector('.pane:not([hidden])').xterm.buffer.active.type === 'alternate'));
    const cdp = await page.context().newCDPSession(page);
    const at = (y) => [{ x: 195, y, id: 1 }];
    await cdp.send('Input.dispatchTouchEvent', { type: 'touchStart', touchPoints: at(500) });
    for (let y = 480; y >= 300; y -= 20) await cdp.send('Input.dispatchTouchEvent', { type: 'touchMove', touchPoints: at(y) });
    await cdp.send('Input.dispatchTouchEvent', { type: 'touchEnd', touchPoints: [] });
    // A finger moving up scrolls down: xterm sends Down for the wheel outside mouse mode.
    await waitForScreen(page, '^[[B');
    assert.ok(!(await screenText(page)).includes('^[[A'), 'nothing scrolled up');
    await closePage(page);
  });
});
