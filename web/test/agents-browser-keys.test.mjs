// The browser's own keys, in Debian's Chromium against a real stack: Ctrl+= / - / 0 stay the
// browser's zoom (neither the page nor the terminal takes them), and Alt+Shift+= / - / 0 set the
// terminal's font size.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { agentsHarness, agentsSkip, sentInput } from './agents-support.mjs';
import { closePage, typeLine, waitFor, waitForScreen } from './support.mjs';

const skip = agentsSkip();

describe('web page for phones and agents: the browser\'s own keys', { skip: skip ?? false }, () => {
  const harness = agentsHarness();

  test('desktop: Ctrl+= / Ctrl+- / Ctrl+0 stay the browser\'s zoom; Alt+Shift+= / - / 0 set the font size', async () => {
    const instance = await harness.stack.createInstance();
    const page = await harness.open('desktop', instance.id);
    const size = () => page.evaluate(() => document.querySelector('.pane:not([hidden])').xterm.options.fontSize);
    await page.evaluate(() => {
      window.browserKeys = [];
      window.addEventListener('keydown', (event) => {
        if (event.ctrlKey && event.key !== 'Control') window.browserKeys.push({ code: event.code, taken: event.defaultPrevented });
      });
    });
    await page.locator('.pane:not([hidden]) .xterm').click();
    for (const key of ['Control+Equal', 'Control+Minus', 'Control+Digit0']) await page.keyboard.press(key);
    await typeLine(page, 'echo zoom-$((4*4))');
    await waitForScreen(page, 'zoom-16');
    assert.equal(await size(), 14, 'the page left the font alone');
    assert.deepEqual(await page.evaluate(() => window.browserKeys), [
      { code: 'Equal', taken: false }, { code: 'Minus', taken: false }, { code: 'Digit0', taken: false },
    ], 'the keys went on to the browser');
    const typed = sentInput(page);
    const rest = typed.replace('echo zoom-$((4*4))', '');
    assert.ok(!['\x1f', '\x1e', '='].some((character) => rest.includes(character)), `nothing of them was typed: ${JSON.stringify(typed)}`);

    await page.keyboard.press('Alt+Shift+Equal');
    await page.keyboard.press('Alt+Shift+Equal');
    await waitFor('a larger font', async () => (await size()) === 16);
    await page.keyboard.press('Alt+Shift+Minus');
    await waitFor('a smaller font', async () => (await size()) === 15);
    await page.keyboard.press('Alt+Shift+Digit0');
    await waitFor('the default size', async () => (await size()) === 14);
    await closePage(page);
  });
});
