// What a program in a session may do to the clipboard (OSC 52), in Debian's Chromium against a
// real stack: by default nothing until the user allows it in the page's notice; Deny drops a
// request; Always copies from then on and is remembered; Never ignores programs without a
// notice; a share link's page ignores them whatever its browser remembers. Each program prints
// a marker after its OSC 52, so the marker on the screen says the page has handled the sequence.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  closePage, launchBrowser, missingRequirement, newDesktopPage, startStack, typeLine, waitFor,
  waitForConnectionState, waitForScreen,
} from './support.mjs';

const skip = missingRequirement();
if (skip) console.log(`# skipping the browser tests: ${skip}`);

/** What the user copied before a program asked: it must stay until the user allows a copy. */
const USERS_OWN = 'the user copied this';
const SETTING_KEY = 'ptyhub.clipboardWrites';

/**
 * A shell line that sets the clipboard to what printf makes of `format` (`\\n` a newline) with
 * OSC 52 and then prints `marker`, computed by the shell so that the line's echo does not show it.
 */
function osc52Line(format, marker) {
  return `printf '\\033]52;c;%s\\007' $(printf '${format}' | base64); echo ${marker}-$((6*7))`;
}

describe('web page: programs copy to the clipboard only with the user\'s consent', { skip: skip ?? false }, () => {
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

  /** A signed-in page of a fresh instance that may read the clipboard, with the user's own text in it. */
  async function openWithClipboard(options = {}) {
    const instance = await stack.createInstance();
    const page = await newDesktopPage(chromium.browser, options);
    await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: stack.origin });
    await page.goto(`${stack.origin}/instances/${instance.id}?token=${stack.token}`);
    await page.locator('[role="tablist"] [role="tab"]').first().waitFor();
    await waitForConnectionState(page, 'Connected');
    await page.evaluate((text) => navigator.clipboard.writeText(text), USERS_OWN);
    return { instance, page };
  }

  const clipboard = (page) => page.evaluate(() => navigator.clipboard.readText());
  const notice = (page) => page.getByRole('alert', { name: 'Clipboard' });

  test('by default a program\'s copy waits for Allow; Deny drops it; Always copies from then on and is remembered', async () => {
    const { page } = await openWithClipboard();
    const name = (await page.locator('[role="tab"][aria-selected="true"] .tab-name').textContent()) ?? '';

    await typeLine(page, osc52Line('osc52-ask', 'asked'));
    await waitForScreen(page, 'asked-42');
    await notice(page).filter({ hasText: `${name} wants to copy 9 characters to your clipboard` }).waitFor();
    assert.equal(await notice(page).locator('.clipboard-preview').textContent(), 'osc52-ask', 'the request shows what it copies');
    assert.equal(await clipboard(page), USERS_OWN, 'nothing is copied before the user answers');
    await page.getByRole('button', { name: 'Allow', exact: true }).click();
    await waitFor('the allowed text in the clipboard', async () => (await clipboard(page)) === 'osc52-ask');
    await notice(page).filter({ hasText: `9 characters copied by ${name}` }).waitFor();
    assert.equal(await page.evaluate((key) => localStorage.getItem(key), SETTING_KEY), null, 'Allow is for this request only');

    // Deny: the request goes, the clipboard keeps what the user had.
    await page.evaluate((text) => navigator.clipboard.writeText(text), USERS_OWN);
    await typeLine(page, osc52Line('osc52\\ndeny', 'denied'));
    await waitForScreen(page, 'denied-42');
    await notice(page).filter({ hasText: 'wants to copy 10 characters' }).waitFor();
    assert.equal(await notice(page).locator('.clipboard-preview').textContent(), 'osc52\\ndeny', 'a newline is shown, not acted on');
    await page.getByRole('button', { name: 'Deny', exact: true }).click();
    await notice(page).waitFor({ state: 'hidden' });
    assert.equal(await clipboard(page), USERS_OWN);

    // Always: this request is copied, and the next ones without asking.
    await typeLine(page, osc52Line('osc52-always', 'always'));
    await waitForScreen(page, 'always-42');
    await page.getByRole('button', { name: 'Always', exact: true }).click();
    await waitFor('the first text copied by Always', async () => (await clipboard(page)) === 'osc52-always');
    assert.equal(await page.evaluate((key) => localStorage.getItem(key), SETTING_KEY), 'always');
    await typeLine(page, osc52Line('osc52-again', 'again'));
    await waitForScreen(page, 'again-42');
    await waitFor('the next text copied without asking', async () => (await clipboard(page)) === 'osc52-again');
    await notice(page).filter({ hasText: `11 characters copied by ${name}` }).waitFor();
    assert.equal(await page.getByRole('button', { name: 'Allow', exact: true }).count(), 0, 'nothing was asked');

    // Remembered: a reload's setting says so.
    await page.reload();
    await waitForConnectionState(page, 'Connected');
    await page.getByRole('button', { name: 'Clipboard access' }).click();
    assert.equal(await page.getByRole('combobox', { name: 'Programs may copy' }).inputValue(), 'always');
    await closePage(page);
  });

  test('Never ignores a program\'s copy without a notice', async () => {
    const { page } = await openWithClipboard();
    await page.getByRole('button', { name: 'Clipboard access' }).click();
    await page.getByRole('combobox', { name: 'Programs may copy' }).selectOption('never');
    await page.getByRole('dialog', { name: 'Clipboard access' }).getByRole('button', { name: 'Done' }).click();
    assert.equal(await page.evaluate((key) => localStorage.getItem(key), SETTING_KEY), 'never');

    await typeLine(page, osc52Line('osc52-never', 'ignored'));
    await waitForScreen(page, 'ignored-42');
    // The page handles OSC 52 as it parses it, before the marker after it is drawn.
    assert.equal(await notice(page).count(), 0, 'no notice');
    assert.equal(await clipboard(page), USERS_OWN);
    await closePage(page);
  });

  test('a share link\'s page ignores a program\'s copy, whatever its browser remembers', async () => {
    const instance = await stack.createInstance();
    const created = await stack.rest('POST', `/api/v1/instances/${instance.id}/terminal/sessions`, { cols: 80, rows: 24 });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const share = await stack.rest('POST', `/api/v1/instances/${instance.id}/shares`, { session_id: created.body.id });
    assert.equal(share.status, 201, JSON.stringify(share.body));

    const guest = await newDesktopPage(chromium.browser);
    await guest.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: stack.origin });
    // This browser allowed programs before: a share's page must not follow that.
    await guest.context().addInitScript((key) => localStorage.setItem(key, 'always'), SETTING_KEY);
    await guest.goto(share.body.url);
    await guest.locator('[role="tablist"] [role="tab"]').first().waitFor();
    await waitForConnectionState(guest, 'Connected, read-only');
    await guest.evaluate((text) => navigator.clipboard.writeText(text), USERS_OWN);
    assert.equal(await guest.getByRole('button', { name: 'Clipboard access' }).count(), 0, 'no setting to change');

    const typed = await stack.rest('POST', `/api/v1/instances/${instance.id}/terminal/sessions/${created.body.id}/input`,
      { text: `${osc52Line('osc52-guest', 'watched')}\n` });
    assert.equal(typed.status, 200, JSON.stringify(typed.body));
    await waitForScreen(guest, 'watched-42');
    assert.equal(await notice(guest).count(), 0, 'no notice');
    assert.equal(await clipboard(guest), USERS_OWN);
    await closePage(guest);
  });
});
