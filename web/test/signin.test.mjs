// Share links and the browser's sign-in, in Debian's Chromium against a real stack (`ptyhub up`):
// a share link never replaces the browser's sign-in as someone else without asking, whether it is
// pasted into the address bar or followed from a page of another site (whose navigation carries
// no SameSite=Strict cookie); staying keeps every tab signed in as before, and opening it as a
// viewer makes the browser the link's viewer. In a browser signed in as nobody it opens at once.
// A sign-in link (`?token=`) of someone else asks the same way.

import assert from 'node:assert/strict';
import http from 'node:http';
import { after, before, describe, test } from 'node:test';
import {
  closePage, launchBrowser, missingRequirement, newDesktopPage, startStack, waitForConnectionState,
} from './support.mjs';

const skip = missingRequirement();
if (skip) console.log(`# skipping the browser tests: ${skip}`);

describe('share links and the sign-in', { skip: skip ?? false }, () => {
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

  /** A share link of the instance's whole terminal, made with the stack's token. */
  async function shareLink(instanceId) {
    const { status, body } = await stack.rest('POST', `/api/v1/instances/${instanceId}/shares`, {});
    assert.equal(status, 201, JSON.stringify(body));
    return body;
  }

  /** Who the page's cookie signs in, as the page's own request asks. */
  async function whoIsSignedIn(page) {
    return page.evaluate(async () => {
      const response = await fetch('/api/v1/auth/session', { cache: 'no-store' });
      return response.ok ? response.json() : { status: response.status };
    });
  }

  /**
   * A page of another site (`localhost` is not `127.0.0.1`'s site) with a link to `url`, as a
   * chat or a mail in a browser shows one: following it sends no SameSite=Strict cookie along.
   */
  async function pageOfAnotherSite(url) {
    const server = http.createServer((_, response) => {
      response.writeHead(200, { 'Content-Type': 'text/html' });
      response.end(`<!doctype html><a id="link" href="${url}">the share link</a>`);
    });
    await new Promise((resolvePromise) => server.listen(0, '127.0.0.1', resolvePromise));
    return { url: `http://localhost:${server.address().port}/`, close: () => new Promise((resolvePromise) => server.close(resolvePromise)) };
  }

  test('a share link asks before it replaces the admin\'s sign-in; staying keeps it, opening makes the browser the viewer', async () => {
    const instance = await stack.createInstance();
    const share = await shareLink(instance.id);
    const admin = await newDesktopPage(chromium.browser);
    await admin.goto(`${stack.origin}/instances/${instance.id}?token=${stack.token}`);
    await waitForConnectionState(admin, 'Connected');

    // Pasted into the address bar of another tab of the same browser.
    const tab = await admin.context().newPage();
    await tab.goto(share.url);
    await tab.getByRole('heading', { name: 'Open this share link?' }).waitFor();
    assert.match(await tab.locator('.signin-message').textContent(), /You are signed in as api-token-0 \(admin\)/);
    assert.equal(new URL(tab.url()).search, '', 'the share token is gone from the address');
    assert.equal(new URL(tab.url()).hash, '', 'and from its fragment');
    assert.ok(await tab.getByRole('button', { name: 'Stay signed in' }).evaluate((button) => button === document.activeElement), 'staying is the default');
    assert.equal((await whoIsSignedIn(admin)).admin, true, 'nothing was replaced while asking');

    await tab.getByRole('button', { name: 'Stay signed in' }).click();
    await waitForConnectionState(tab, 'Connected');
    assert.equal(await tab.getByRole('button', { name: 'Share read-only' }).count(), 1, 'the admin\'s page, not a viewer\'s');
    await admin.reload();
    await waitForConnectionState(admin, 'Connected');
    assert.equal((await whoIsSignedIn(admin)).subject, 'api-token-0');

    // Followed from a page of another site, whose navigation carries none of the cookies.
    const elsewhere = await pageOfAnotherSite(share.url);
    try {
      await tab.goto(elsewhere.url);
      await tab.locator('#link').click();
      await tab.getByRole('heading', { name: 'Open this share link?' }).waitFor();
      assert.equal((await whoIsSignedIn(admin)).admin, true, 'following the link replaced nothing');

      await tab.getByRole('button', { name: 'Open as viewer' }).click();
      await waitForConnectionState(tab, 'Connected, read-only');
      assert.equal(await tab.getByRole('button', { name: 'Share read-only' }).count(), 0);
      const viewer = await whoIsSignedIn(tab);
      assert.equal(viewer.viewer_only, true, JSON.stringify(viewer));
      assert.equal(new URL(tab.url()).hash, '');
    } finally {
      await elsewhere.close();
    }
    await tab.close();
    await closePage(admin);
  });

  test('a sign-in link asks before it replaces another sign-in, as a share link does', async () => {
    const instance = await stack.createInstance();
    const { status: created } = await stack.rest('POST', `/api/v1/instances/${instance.id}/terminal/sessions`, {});
    assert.equal(created, 201);
    const share = await shareLink(instance.id);
    const page = await newDesktopPage(chromium.browser);
    await page.goto(share.url);
    await waitForConnectionState(page, 'Connected, read-only');

    // The admin's sign-in link, followed from a page of another site: no cookie goes along, and
    // the viewer's sign-in stays until the user says otherwise.
    const signInLink = `${stack.origin}/instances/${instance.id}?token=${stack.token}`;
    const elsewhere = await pageOfAnotherSite(signInLink);
    try {
      await page.goto(elsewhere.url);
      await page.locator('#link').click();
      await page.getByRole('heading', { name: 'Sign in as someone else?' }).waitFor();
      assert.equal(new URL(page.url()).search, '', 'the token is gone from the address');
      assert.equal(new URL(page.url()).hash, '', 'and from its fragment');
      assert.equal((await whoIsSignedIn(page)).viewer_only, true, 'nothing was replaced while asking');
      await page.getByRole('button', { name: 'Stay signed in' }).click();
      await waitForConnectionState(page, 'Connected, read-only');
      assert.equal((await whoIsSignedIn(page)).viewer_only, true);
    } finally {
      await elsewhere.close();
    }

    // Opened again and accepted: the browser is the token's.
    await page.goto(signInLink);
    await page.getByRole('button', { name: 'Sign in as api-token-0' }).click();
    await waitForConnectionState(page, 'Connected');
    assert.equal((await whoIsSignedIn(page)).admin, true);
    await closePage(page);
  });

  test('a share link in a browser signed in as nobody opens read-only at once; a revoked one says so', async () => {
    const instance = await stack.createInstance();
    const { status: created } = await stack.rest('POST', `/api/v1/instances/${instance.id}/terminal/sessions`, {});
    assert.equal(created, 201);
    const share = await shareLink(instance.id);
    const guest = await newDesktopPage(chromium.browser);
    await guest.goto(share.url);
    await waitForConnectionState(guest, 'Connected, read-only');
    assert.equal(new URL(guest.url()).search, '');
    assert.equal(new URL(guest.url()).hash, '', 'no share token left in the address');
    const stored = await guest.evaluate(() => JSON.stringify({ ...sessionStorage }) + JSON.stringify({ ...localStorage }));
    assert.ok(!stored.includes(share.token), 'the page keeps no token');
    await closePage(guest);

    const { status } = await stack.rest('DELETE', `/api/v1/instances/${instance.id}/shares/${share.id}`);
    assert.equal(status, 200);
    const late = await newDesktopPage(chromium.browser);
    await late.goto(share.url);
    await late.getByRole('heading', { name: 'Share link refused' }).waitFor();
    assert.equal(new URL(late.url()).hash, '');
    await closePage(late);
  });
});
