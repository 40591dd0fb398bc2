// The mark of a background session whose agent waits for input, in Debian's Chromium against a
// real stack: the tab's terminal state while the agent works, the mark and the count in the
// page's title once it asks (how long after it asked is reported, not asserted: speed belongs to
// the benchmarks), looking at the tab clearing both, and the opt-in system notification. Desktop
// is 1280x720, the phone 390x844 with touch.

import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { AGENT, agentsHarness, agentsSkip, press, sessionsPath } from './agents-support.mjs';
import { closePage, PATIENCE_MS, tabNamed, tabState, waitFor, waitForScreen } from './support.mjs';

const skip = agentsSkip();

describe('web page for phones and agents: a background session waiting for input', { skip: skip ?? false }, () => {
  const harness = agentsHarness();

  for (const device of ['desktop', 'phone']) {
    test(`${device}: a background session whose agent asks for input marks its tab after it asked, with the count in the title`, async (context) => {
      const instance = await harness.stack.createInstance();
      const page = await harness.open(device, instance.id);
      const { status, body: second } = await harness.stack.rest('POST', sessionsPath(instance.id), {});
      assert.equal(status, 201);
      const backgroundTab = page.locator(`[role="tab"][data-session-id="${second.id}"]`);
      await backgroundTab.waitFor({ state: 'attached' });
      const stamp = join(harness.scratch, `stamp-${second.id}`);
      await harness.stack.rest('POST', `${sessionsPath(instance.id)}/${second.id}/input`, { text: `sh ${AGENT} ${stamp}\n` });

      // Its state shows on its tab while it works: running, with the progress it reports.
      await waitFor('the running state with its progress', async () => (await tabState(page, 'Session 2')).includes('Running, 40 % done'));
      assert.equal(await page.locator('.tab-item', { has: backgroundTab }).locator('.tab-state').textContent(), '40%');
      assert.equal(await backgroundTab.getAttribute('data-attention'), null);
      const title = await page.title();

      // The page notes when the mark appears, on the machine's clock the agent's stamp uses too.
      await page.evaluate((id) => {
        const tab = document.querySelector(`[role="tab"][data-session-id="${id}"]`);
        const observer = new MutationObserver(() => {
          if (tab.dataset.attention === 'input' && window.markedAt === undefined) window.markedAt = Date.now();
        });
        observer.observe(tab, { attributes: true, attributeFilter: ['data-attention'] });
      }, second.id);
      // How soon is reported, not asserted (a loaded machine is slow); the wait is only bounded.
      await harness.stack.rest('POST', `${sessionsPath(instance.id)}/${second.id}/input`, { text: 'go\n' });
      await page.getByRole('tab', { name: 'Session 2 (waiting for input)', exact: true }).waitFor({ state: 'attached', timeout: PATIENCE_MS });
      const asked = Number((await readFile(stamp, 'utf8')).trim());
      const marked = await page.evaluate(() => window.markedAt);
      context.diagnostic(`the tab was marked ${marked - asked} ms after the agent asked`);
      assert.ok(Number.isFinite(asked), 'the agent wrote when it asked');
      assert.equal(typeof marked, 'number', 'the page saw the mark appear');
      assert.ok(marked >= asked, `the tab was marked after the agent asked, not before (${marked - asked} ms)`);
      assert.equal(await page.title(), `(1) ${title}`);
      assert.match(await tabState(page, 'Session 2 (waiting for input)'), /Waiting for input$/);
      if (device === 'phone') {
        await page.locator('.pane:not([hidden]) .xterm').tap();
        await page.getByRole('button', { name: 'Show tabs (waiting for input in another session)' }).tap();
      }

      // Looking at it is what it asked for: the mark and the count go.
      await press(device, backgroundTab);
      await waitForScreen(page, 'allow the edit to main.rs?');
      await page.getByRole('tab', { name: 'Session 2', exact: true }).waitFor();
      assert.equal(await page.title(), title);
      await closePage(page);
    });
  }

  test('desktop: opted in, a background wait raises a system notification that opens its tab', async () => {
    const instance = await harness.stack.createInstance();
    const page = await harness.newPage('desktop');
    await page.context().grantPermissions(['notifications'], { origin: harness.stack.origin });
    // The notifications the page raises, kept as they are made (they are real ones too).
    await page.addInitScript(() => {
      const Real = window.Notification;
      window.raised = [];
      window.Notification = class extends Real {
        constructor(title, options) {
          super(title, options);
          window.raised.push({ title, body: options?.body, notification: this });
        }
      };
    });
    await harness.openOn(page, instance.id);
    const bell = page.getByRole('button', { name: 'Notify when a session waits for input' });
    assert.equal(await bell.getAttribute('aria-pressed'), 'false', 'off until asked for');
    const { body: second } = await harness.stack.rest('POST', sessionsPath(instance.id), {});
    await page.locator(`[role="tab"][data-session-id="${second.id}"]`).waitFor({ state: 'attached' });
    const stamp = join(harness.scratch, `stamp-notify-${second.id}`);
    await harness.stack.rest('POST', `${sessionsPath(instance.id)}/${second.id}/input`, { text: `sh ${AGENT} ${stamp}\n` });
    await waitFor('the agent at work', async () => (await tabState(page, 'Session 2')).includes('Running'));

    await bell.click();
    await waitFor('notifications on', async () => (await bell.getAttribute('aria-pressed')) === 'true');
    await harness.stack.rest('POST', `${sessionsPath(instance.id)}/${second.id}/input`, { text: 'go\n' });
    await waitFor('a notification', () => page.evaluate(() => window.raised.length === 1));
    const raised = await page.evaluate(() => window.raised.map(({ title, body }) => ({ title, body })));
    assert.deepEqual(raised, [{ title: 'Session 2 is waiting for input', body: 'Allow the edit to main.rs?' }]);
    await page.evaluate(() => window.raised[0].notification.onclick());
    await waitFor('its tab shown', async () => (await tabNamed(page, 'Session 2').getAttribute('aria-selected')) === 'true');
    await waitForScreen(page, 'allow the edit to main.rs?');
    await closePage(page);
  });
});
