// A phone's tab strip and Restart, in Debian's Chromium against a real stack: `+` is the strip's
// last item and the tab's actions are in its menu; Restart sends the WebSocket's reset frame while
// the socket is open and goes through REST once it is closed. Desktop is 1280x720, the phone
// 390x844 with touch.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { agentsHarness, agentsSkip, press, tabAction } from './agents-support.mjs';
import { closePage, typeLine, waitForActiveConnected, waitForConnectionState, waitForScreen } from './support.mjs';

const skip = agentsSkip();

describe('web page for phones and agents: a phone\'s tab strip, and Restart', { skip: skip ?? false }, () => {
  const harness = agentsHarness();

  test('phone: + is the rightmost item of the tab strip; Restart, Find and Fullscreen are in its menu', async () => {
    const instance = await harness.stack.createInstance();
    const page = await harness.open('phone', instance.id);
    const boxes = await page.locator('.tabbar').evaluate((bar) => [...bar.querySelectorAll('button, [role="tab"]')]
      .filter((element) => element.checkVisibility())
      .map((element) => ({ name: element.getAttribute('aria-label') ?? element.textContent, right: element.getBoundingClientRect().right })));
    const rightmost = boxes.reduce((best, box) => (box.right > best.right ? box : best));
    assert.equal(rightmost.name, 'New session', `the rightmost item: ${JSON.stringify(boxes)}`);
    for (const name of ['Restart session', 'Find in the terminal', 'Fullscreen']) {
      assert.equal(await page.getByRole('button', { name, exact: true }).isVisible(), false, `${name} is not in the strip`);
    }
    await page.getByRole('button', { name: 'Session actions' }).tap();
    for (const name of ['Restart session', 'Find in the terminal', 'Fullscreen']) {
      await page.getByRole('button', { name, exact: true }).waitFor();
    }
    await closePage(page);
  });

  for (const device of ['desktop', 'phone']) {
    test(`${device}: Restart sends the WebSocket's reset frame while the socket is open, and goes through REST once it is closed`, async () => {
      const instance = await harness.stack.createInstance();
      const page = await harness.open(device, instance.id);
      const resets = [];
      page.on('request', (request) => {
        if (request.url().endsWith('/reset')) resets.push(request.method());
      });
      await typeLine(page, 'MARK=before-restart');
      await tabAction(device, page, 'Restart session');
      await page.getByRole('status').filter({ hasText: /^Session restarted$/ }).waitFor();
      await waitForActiveConnected(page);
      const frames = page.sockets.flatMap((socket) => socket.sent).filter((payload) => typeof payload === 'string');
      assert.ok(frames.includes('{"type":"reset"}'), 'the reset frame went on the socket');
      assert.deepEqual(resets, [], 'no REST reset');
      await typeLine(page, 'echo "mark=[$MARK]"');
      await waitForScreen(page, 'mark=[]');

      // The process exited and its socket closed: Restart goes through REST.
      await typeLine(page, 'exit 3');
      await waitForConnectionState(page, 'Session ended (exit code 3)');
      await press(device, page.locator('.pane:not([hidden]) .pane-notice').getByRole('button', { name: 'Restart' }));
      await waitForActiveConnected(page);
      assert.deepEqual(resets, ['POST'], 'one REST reset');
      await closePage(page);
    });
  }
});
