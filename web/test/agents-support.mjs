// What the browser tests of the page for phones and agents (`agents-*.test.mjs`) share: one
// `ptyhub up` stack and one Chromium per test file, pages of the three kinds the tests use
// (desktop 1280x720, a phone 390x844 with touch, a tablet 1024x768 with touch), and the small
// steps the tests take on them (a tap or a click, a tab's action, the input the page sent).

import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before } from 'node:test';
import {
  missingRequirement, newDesktopPage, newMobilePage, newTabletPage, launchBrowser, startStack,
  waitForActiveConnected, webRoot,
} from './support.mjs';

/** Why these tests cannot run here (logged), or undefined when they can. */
export function agentsSkip() {
  const skip = missingRequirement();
  if (skip) console.log(`# skipping the browser tests: ${skip}`);
  return skip;
}

/** The fixture agent: progress, then a question with a notification (see the script). */
export const AGENT = join(webRoot, 'test', 'fixtures', 'agent.sh');

/** @typedef {'desktop' | 'phone' | 'tablet'} Device */

/**
 * Starts a stack, a Chromium and a scratch directory before the enclosing suite's tests and stops
 * them after; call it inside `describe`. The returned object's fields are set once `before` ran.
 */
export function agentsHarness() {
  const harness = {
    /** @type {any} */ stack: undefined,
    /** @type {any} */ chromium: undefined,
    /** A directory the tests' agents write their stamps in. @type {string | undefined} */
    scratch: undefined,

    /** A fresh page of the given kind, not yet at any address. @param {Device} device */
    async newPage(device, options = {}) {
      const { stack, chromium } = harness;
      if (device === 'phone') return newMobilePage(chromium.browser, stack.origin, options);
      if (device === 'tablet') return newTabletPage(chromium.browser, stack.origin, options);
      const page = await newDesktopPage(chromium.browser, options);
      await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: stack.origin });
      return page;
    },

    /** Opens an instance's terminal page on `page` and waits for the shown tab to connect. */
    async openOn(page, /** @type {string} */ instanceId) {
      await page.goto(`${harness.stack.origin}/instances/${instanceId}?token=${harness.stack.token}`);
      await page.locator('[role="tablist"] [role="tab"]').first().waitFor();
      await waitForActiveConnected(page);
      return page;
    },

    /** A new page of the given kind on an instance's terminal page, its shown tab connected. */
    async open(/** @type {Device} */ device, /** @type {string} */ instanceId, options = {}) {
      return harness.openOn(await harness.newPage(device, options), instanceId);
    },
  };

  before(async () => {
    harness.stack = await startStack();
    harness.chromium = await launchBrowser();
    harness.scratch = await mkdtemp(join(tmpdir(), 'ptyhub-agents-test-'));
  });

  after(async () => {
    await harness.chromium?.close();
    await harness.stack?.stop();
    if (harness.scratch) await rm(harness.scratch, { recursive: true, force: true });
  });

  return harness;
}

/** Taps (touch screens) or clicks (desktop). */
export async function press(/** @type {Device} */ device, locator) {
  if (device === 'desktop') await locator.click();
  else await locator.tap();
}

/** On a phone whose typing hid the tab strip, brings it back with the handle. */
export async function showTabs(page) {
  const handle = page.locator('.chrome-handle:not([hidden])');
  if (await handle.isVisible()) await handle.tap();
}

/** Presses one of the tab's actions: a button on wide screens, an item of the menu on a phone. */
export async function tabAction(/** @type {Device} */ device, page, /** @type {string} */ name) {
  if (device === 'phone') {
    await showTabs(page);
    await page.getByRole('button', { name: 'Session actions' }).tap();
  }
  await press(device, page.getByRole('button', { name, exact: true }));
}

/** The REST path of an instance's sessions. */
export const sessionsPath = (/** @type {string} */ instanceId) => `/api/v1/instances/${instanceId}/terminal/sessions`;

/** The input frames the page sent, decoded: binary frames as text, `input` frames' data. */
export function sentInput(page) {
  return page.sockets.flatMap((socket) => socket.sent).map((payload) => {
    if (typeof payload !== 'string') return Buffer.from(payload).toString('latin1');
    const message = JSON.parse(payload);
    return message.type === 'input' ? message.data : '';
  }).join('');
}
