// Presence and control requests in the page (CONTRACT.md "Presence on the page"): two browsers
// on one session each see both attendees in the header with their roles, "is typing" shows and
// clears, and a read-only viewer's request for control shows on the controller's page, where
// Decline changes nothing and Grant moves control without a reconnect of either page.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
  closePage, launchBrowser, missingRequirement, newDesktopPage, startStack, typeLine, waitFor,
  waitForConnectionState, waitForScreen,
} from './support.mjs';

const skip = missingRequirement();
if (skip) console.log(`# skipping the presence tests: ${skip}`);

/** The header's attendees as `role` words, in the record's order. */
async function roles(page) {
  return page.locator('[data-testid="presence"] li').evaluateAll(
    (items) => items.map((item) => item.getAttribute('data-role')),
  );
}

describe('presence and control requests', { skip: skip ?? false }, () => {
  let stack;
  let chromium;

  before(async () => {
    stack = await startStack();
    chromium = await launchBrowser();
  });

  after(async () => {
    await chromium?.close();
    await stack?.stop();
  });

  async function openInstance(instanceId, query = '') {
    const page = await newDesktopPage(chromium.browser);
    const separator = query ? '&' : '';
    await page.goto(`${stack.origin}/instances/${instanceId}?${query}${separator}token=${stack.token}`);
    await page.locator('[role="tablist"] [role="tab"]').first().waitFor();
    await waitForConnectionState(page, query.includes('mode=view') ? 'Connected, read-only' : 'Connected');
    return page;
  }

  test('two pages see each other, who types, and a request for control declined then granted', async () => {
    const instance = await stack.createInstance();
    const { status } = await stack.rest('POST', `/api/v1/instances/${instance.id}/terminal/sessions`, {});
    assert.equal(status, 201);
    const owner = await openInstance(instance.id);
    const watcher = await openInstance(instance.id, 'mode=view');

    // Each page lists both, the controller first (it attached first), within a second or so.
    const seenAt = Date.now();
    for (const page of [owner, watcher]) {
      await waitFor('both attendees in the header', async () => {
        const listed = await roles(page);
        return listed.length === 2 && listed[0] === 'controller' && listed[1] === 'viewer';
      });
    }
    console.log(`both pages listed both attendees ${Date.now() - seenAt} ms after the second attached`);
    const tooltip = await owner.locator('[data-testid="presence"] li').first().getAttribute('title');
    assert.match(tooltip ?? '', /\(controller, web\)$/);

    // The owner types: the watcher's header says someone is typing, then, a few quiet seconds
    // later, no more.
    await typeLine(owner, 'echo typed-$((6*7))');
    await waitForScreen(watcher, 'typed-42');
    await waitFor('"is typing" on the watcher', async () =>
      / is typing$/.test(await watcher.locator('[data-testid="typing"]').textContent() ?? ''));
    await waitFor('"is typing" cleared', async () =>
      (await watcher.locator('[data-testid="typing"]').textContent()) === '');

    // The watcher asks; the owner declines: the watcher is told and still only watches.
    const socketsBefore = [owner.sockets.length, watcher.sockets.length];
    await watcher.getByRole('button', { name: 'Request control' }).click();
    const request = owner.getByTestId('control-request');
    await request.getByText(/asks for control/).waitFor();
    await request.getByRole('button', { name: 'Decline' }).click();
    await watcher.getByText('Your request for control was declined').waitFor();
    assert.deepEqual(await roles(owner), ['controller', 'viewer']);

    // Asked again and granted: the watcher types on the same socket, the owner only watches.
    await watcher.getByRole('button', { name: 'Request control' }).click();
    await request.getByText(/asks for control/).waitFor();
    await request.getByRole('button', { name: 'Grant' }).click();
    await watcher.getByText('You have control').waitFor();
    await owner.getByText('You gave control away').waitFor();
    await typeLine(watcher, 'echo granted-$((7*8))');
    await waitForScreen(owner, 'granted-56');
    await waitFor('the roles swapped in the header', async () => {
      const listed = await roles(owner);
      return listed[0] === 'viewer' && listed[1] === 'controller';
    });
    assert.deepEqual([owner.sockets.length, watcher.sockets.length], socketsBefore, 'no page reconnected');

    await closePage(owner);
    await closePage(watcher);
  });
});
