// The web page in Debian's Chromium against a real stack (`ptyhub up`): signing in, the
// instances, the session tabs (typing, the cap, renaming, closing, the shortcuts), reloads and
// reconnects that show output once, a take-over, an expired session, an exit, fullscreen, the
// read-only view and the phone, each observed the way a person would see them (tabs, terminal
// text, banners); the connection state the way assistive technology reads it (the status
// region); the screen snapshots, window titles and bell marks (the screenshots for the docs are
// taken by design.test.mjs).

import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import {
  closePage, connectedSockets, connectionState, count, exactly, isInputFrame,
  launchBrowser, missingRequirement, newDesktopPage, newMobilePage, openNewSession, PATIENCE_MS,
  screenText, startRelay, startStack, tabNamed, tabNames, tabState, typeLine, visibleBufferLines,
  waitFor, waitForActiveConnected, waitForConnectionState, waitForScreen,
} from './support.mjs';
import { BLINK_MS } from '../src/cursor-blink.js';

/** More than the server's output ring (1 MiB by default) holds, several times over. */
const FLOOD_BYTES = 5 * 1024 * 1024;

/**
 * A full-screen program: the alternate screen, a header drawn once, a counter repainted in place
 * (each repaint padded with attribute changes that draw nothing) until well over FLOOD_BYTES
 * were written, a bottom line, then it waits. A replay of the ring alone would miss the header.
 */
const FULL_SCREEN_PROGRAM = `
printf '\\033[?1049h\\033[2J\\033[H\\033[1;33mheader: drawn once\\033[0m'
printf '\\033[999;1H\\033[7mbottom line\\033[0m'
pad=''
i=0; while [ $i -lt 110 ]; do pad="$pad\\033[7m\\033[27m"; i=$((i+1)); done
i=0; while [ $i -le 5600 ]; do printf "\\033[3;1Hcounter: %d$pad" $i; i=$((i+1)); done
printf '\\033[5;1Hflood-done-%s' $((6*7))
exec sleep 600
`;

const skip = missingRequirement();
if (skip) console.log(`# skipping the browser tests: ${skip}`);

describe('web page', { skip: skip ?? false }, () => {
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

  /** Opens an instance's terminal page signed in with the stack's token. */
  async function openInstance(instanceId, { page, origin = stack.origin, query = '' } = {}) {
    const target = page ?? await newDesktopPage(chromium.browser);
    const separator = query ? '&' : '';
    await target.goto(`${origin}/instances/${instanceId}?${query}${separator}token=${stack.token}`);
    await target.locator('[role="tablist"] [role="tab"]').first().waitFor();
    const viewer = new URLSearchParams(query).get('mode') === 'view';
    await waitForConnectionState(target, viewer ? 'Connected, read-only' : 'Connected');
    return target;
  }

  test('the instances page lists instances with their live session counts', async () => {
    const instance = await stack.createInstance();
    for (let index = 0; index < 2; index += 1) {
      const { status } = await stack.rest('POST', `/api/v1/instances/${instance.id}/terminal/sessions`, {});
      assert.equal(status, 201);
    }
    const page = await newDesktopPage(chromium.browser);
    await page.goto(`${stack.origin}/?token=${stack.token}`);
    const entry = page.locator(`[data-instance-id="${instance.id}"]`);
    await entry.waitFor();
    assert.match(await entry.textContent(), new RegExp(`${instance.name}.*2 live sessions`));
    await entry.locator('a').click();
    await page.waitForURL(`${stack.origin}/instances/${instance.id}`);
    await waitFor('two tabs', async () => (await page.locator('[role="tab"]').count()) === 2);
    await closePage(page);
  });

  test('sign-in exchanges the token for an HttpOnly cookie once: no token in the address, storage or any WebSocket URL; a new tab needs none; sign-out ends it', async () => {
    const instance = await stack.createInstance();
    const page = await newDesktopPage(chromium.browser);
    const policyViolations = [];
    page.on('console', (message) => {
      if (/Content Security Policy/i.test(message.text())) policyViolations.push(message.text());
    });
    await page.goto(`${stack.origin}/instances/${instance.id}?token=${stack.token}`);
    await page.locator('[role="tablist"] [role="tab"]').first().waitFor();
    await waitForConnectionState(page, 'Connected');
    assert.equal(new URL(page.url()).search, '', 'the token is gone from the address bar');
    const stored = await page.evaluate(() => JSON.stringify({ ...sessionStorage }) + JSON.stringify({ ...localStorage }));
    assert.ok(!stored.includes(stack.token), 'the page keeps no token');
    const cookie = (await page.context().cookies()).find((candidate) => candidate.name.startsWith('ptyhub_session'));
    assert.ok(cookie, 'a session cookie');
    assert.equal(cookie.httpOnly, true);
    assert.equal(cookie.sameSite, 'Strict');
    assert.ok(!cookie.value.includes(stack.token), 'the cookie holds no token');
    assert.ok(!(await page.evaluate(() => document.cookie)).includes('ptyhub_session'), 'scripts cannot read it');

    // A reconnect (the page reloaded) opens its socket without a token too.
    await typeLine(page, 'echo cookie-$((6*7))');
    await waitForScreen(page, 'cookie-42');
    await page.reload();
    await waitForConnectionState(page, 'Connected');
    await waitForScreen(page, 'cookie-42');
    assert.ok(page.sockets.length >= 2, 'two sockets opened');
    for (const socket of page.sockets) assert.ok(!socket.url.search.includes('token'), `no token in ${socket.url}`);

    // The same address in a new tab of the same browser works without the token.
    const second = await page.context().newPage();
    await second.goto(`${stack.origin}/`);
    await second.locator(`[data-instance-id="${instance.id}"]`).waitFor();

    // Signing out ends the cookie for every tab.
    await second.getByRole('button', { name: 'Sign out' }).click();
    await second.getByRole('heading', { name: 'Sign in required' }).waitFor();
    assert.equal((await page.context().cookies()).filter((candidate) => candidate.name.startsWith('ptyhub_session')).length, 0);
    await page.reload();
    await page.getByRole('heading', { name: 'Sign in required' }).waitFor();
    assert.deepEqual(policyViolations, [], 'the page runs under its Content-Security-Policy');
    await closePage(page);
  });

  test('sign-in refuses a missing or bad token, and the form signs in with a pasted one', async () => {
    const stranger = await newDesktopPage(chromium.browser);
    await stranger.goto(`${stack.origin}/`);
    await stranger.getByRole('heading', { name: 'Sign in required' }).waitFor();
    await stranger.goto(`${stack.origin}/?token=not-the-token`);
    await stranger.getByRole('heading', { name: 'Access token refused' }).waitFor();
    assert.equal(new URL(stranger.url()).search, '');
    assert.equal(new URL(stranger.url()).hash, '');
    await stranger.getByLabel('Access token').fill(stack.token);
    await stranger.getByRole('button', { name: 'Sign in' }).click();
    await stranger.locator('.instance-list').waitFor();
    await stranger.reload();
    await stranger.locator('.instance-list').waitFor();
    await closePage(stranger);
  });

  test('Share read-only copies a viewer link: its page shows the session, types nothing and offers no control', async () => {
    const instance = await stack.createInstance();
    const owner = await newDesktopPage(chromium.browser, { permissions: ['clipboard-read', 'clipboard-write'] });
    await openInstance(instance.id, { page: owner });
    await typeLine(owner, 'echo shared-$((6*7))');
    await waitForScreen(owner, 'shared-42');
    await owner.getByRole('button', { name: 'Share read-only' }).click();
    await owner.locator('.toast[data-kind="info"]').waitFor();
    const link = await owner.evaluate(() => navigator.clipboard.readText());
    assert.match(link, new RegExp(`^${stack.origin}/instances/${instance.id}\\?share=ptyhub-share-`));

    // Another browser (no cookie of the owner's) opens the link.
    const guest = await newDesktopPage(chromium.browser);
    await guest.goto(link);
    await guest.locator('[role="tablist"] [role="tab"]').first().waitFor();
    await waitForConnectionState(guest, 'Connected, read-only');
    assert.equal(new URL(guest.url()).search, '', 'the share token is gone from the address');
    await waitForScreen(guest, 'shared-42');
    assert.equal(await guest.getByRole('link', { name: 'Take control' }).count(), 0, 'no way to take control');
    assert.equal(await guest.getByRole('button', { name: 'Share read-only' }).count(), 0);
    assert.equal(await guest.getByRole('link', { name: 'History' }).count(), 0, 'a share plays no recordings');
    assert.equal(await owner.getByRole('link', { name: 'History' }).count(), 1);
    assert.ok(await guest.getByRole('button', { name: 'New session' }).isDisabled());
    // Typing reaches nothing: the session's screen does not change.
    await guest.locator('.xterm').first().click();
    await guest.keyboard.type('echo viewer-typed\n');
    for (const socket of guest.sockets) {
      assert.equal(socket.connected?.role, 'viewer', 'every socket of the guest is a viewer');
      assert.ok(!socket.url.search.includes('share'), `no share token in ${socket.url}`);
    }
    await typeLine(owner, 'echo after-$((7*7))');
    await waitForScreen(guest, 'after-49');
    const [session] = await stack.listSessions(instance.id);
    const { text } = await stack.screen(instance.id, session.id);
    assert.ok(!text.includes('viewer-typed'), text);

    // Revoked, the link's cookie ends: a reload asks to sign in.
    const { body: listed } = await stack.rest('GET', `/api/v1/instances/${instance.id}/shares`);
    assert.equal(listed.shares.length, 1);
    const { status } = await stack.rest('DELETE', `/api/v1/instances/${instance.id}/shares/${listed.shares[0].id}`);
    assert.equal(status, 200);
    await guest.reload();
    await guest.getByRole('heading', { name: 'Sign in required' }).waitFor();
    await closePage(owner);
    await closePage(guest);
  });

  test('typing shows output, tabs keep their scrollback, and + stops at the cap with a 409 shown', async () => {
    const instance = await stack.createInstance({ maxSessions: 3 });
    const page = await openInstance(instance.id);
    assert.deepEqual(await tabNames(page), ['Session 1']);
    await typeLine(page, 'echo first-$((6*7))');
    await waitForScreen(page, 'first-42');

    const newButton = page.getByRole('button', { name: 'New session' });
    await newButton.click();
    await waitFor('a second, selected tab', async () => (await tabNames(page)).length === 2
      && (await page.locator('[role="tab"][aria-selected="true"]').textContent()) === 'Session 2');
    await waitForActiveConnected(page);
    assert.equal(await page.locator('.xterm').count(), 2, 'every tab keeps its terminal mounted');
    await typeLine(page, 'echo second-$((7*7))');
    await waitForScreen(page, 'second-49');
    assert.ok(!(await screenText(page)).includes('first-42'));
    // The tab in the background still tells its state, through its accessible description,
    // with what its terminal is doing.
    for (const name of ['Session 1', 'Session 2']) {
      await waitFor(`${name}'s state`, async () => (await tabState(page, name)) === 'Connected At the prompt');
    }

    await page.getByRole('tab', { name: 'Session 1' }).click();
    const first = await waitForScreen(page, 'first-42');
    assert.equal(count(first, 'first-42'), 1);
    await page.getByRole('tab', { name: 'Session 2' }).click();
    await waitForScreen(page, 'second-49');

    // The shown terminal is fitted to the window and the PTY told its size.
    await page.setViewportSize({ width: 900, height: 520 });
    await page.getByRole('tab', { name: 'Session 1' }).click();
    await waitFor('the terminal to fit the smaller window', async () => (await visibleRows(page)) < 30);
    const rows = await visibleRows(page);
    await typeLine(page, 'stty size');
    await waitFor(`stty to report ${rows} rows`, async () => new RegExp(`^${rows} \\d+$`, 'm').test(await screenText(page)));
    await page.getByRole('tab', { name: 'Session 2' }).click();
    await typeLine(page, 'stty size');
    await waitFor(`the other tab's PTY to have ${rows} rows too`, async () => new RegExp(`^${rows} \\d+$`, 'm').test(await screenText(page)));

    // A session made elsewhere fills the cap: it appears as a tab at once, + is disabled, and the
    // shortcut is answered with the cap in words.
    const { status } = await stack.rest('POST', `/api/v1/instances/${instance.id}/terminal/sessions`, {});
    assert.equal(status, 201);
    await waitFor('the third session to appear as a tab', async () => (await tabNames(page)).length === 3);
    assert.match(await tabState(page, 'Session 3'), /^Not connected yet: attaches when shown\b/, 'the page does not take it from its maker');
    await waitFor('+ to be disabled at the cap', () => newButton.isDisabled());
    await page.keyboard.press('Alt+Shift+N');
    const toast = page.getByRole('alert').filter({ hasText: 'Maximum of 3 terminal sessions reached for this instance' });
    await toast.waitFor();
    const tooltip = await page.locator('.new-wrap').getAttribute('title');
    assert.match(tooltip, /Maximum of 3 sessions/);
    assert.equal((await stack.listSessions(instance.id)).length, 3);
    await closePage(page);
  });

  /** xterm's blink animations running on the page: the DOM renderer's is endless. */
  function blinkAnimations(page) {
    return page.evaluate(() => document.getAnimations()
      .filter((animation) => String(/** @type {any} */ (animation).animationName).startsWith('blink_')).length);
  }

  /** Whether the page's blink of `pane`'s cursor runs (a timer pending or due after typing). */
  function pageBlinkRuns(pane) {
    return pane.evaluate((element) => /** @type {any} */ (element).cursorBlink.running);
  }

  /**
   * The changes of the class on `pane`'s terminal while a timer in the page waits out two blink
   * intervals and a bit: a blink that ran would have toggled it at least once before.
   */
  function blinkClassChanges(pane) {
    return pane.evaluate((element, waitMs) => new Promise((resolve) => {
      let changes = 0;
      const observer = new MutationObserver((records) => { changes += records.length; });
      observer.observe(element.querySelector('.term-host'), { attributes: true, attributeFilter: ['class'] });
      setTimeout(() => {
        observer.disconnect();
        resolve(changes);
      }, waitMs);
    }), 2 * BLINK_MS + 100);
  }

  test('the DOM renderer\'s cursor blinks by the page\'s class, not by xterm\'s endless animation', async () => {
    const instance = await stack.createInstance();
    const page = await openInstance(instance.id);
    try {
      const pane = page.locator('.pane:not([hidden])');
      assert.equal(await pane.getAttribute('data-renderer'), 'dom');
      await pane.locator('.xterm-helper-textarea').focus();
      await pane.locator('.xterm-cursor.xterm-cursor-block').waitFor();
      // xterm's blink animates the cursor's colours, which only the main thread can: a frame every
      // 16.7 ms, and Chromium makes the echo of every key wait for the frame it has pending.
      assert.equal(await blinkAnimations(page), 0);
      assert.equal(await pane.locator('.xterm-cursor-blink').count(), 0);
      const cursorBackground = () => pane.locator('.xterm-cursor').evaluate((cursor) => getComputedStyle(cursor).backgroundColor);
      await waitFor('the hidden phase', async () => await pane.locator('.cursor-blink-off').count() === 1);
      assert.equal(await cursorBackground(), 'rgba(0, 0, 0, 0)', 'the hidden phase draws the cell plainly');
      await waitFor('the shown phase', async () => await pane.locator('.cursor-blink-off').count() === 0);
      assert.notEqual(await cursorBackground(), 'rgba(0, 0, 0, 0)');
    } finally {
      await closePage(page);
    }
  });

  test('a program\'s cursor: a blinking one is blinked by the page in its shape without xterm\'s animation, a steady one stands still, a reset brings the default back', async () => {
    const instance = await stack.createInstance();
    const page = await openInstance(instance.id);
    try {
      const pane = page.locator('.pane:not([hidden])');
      assert.equal(await pane.getAttribute('data-renderer'), 'dom');
      const cursor = pane.locator('.xterm-cursor');

      // DECSCUSR 5, a blinking bar (zsh and fish vi-mode prompts): xterm marks the cursor to
      // blink, the page's blink hides and shows the bar, and xterm's animation does not run.
      await typeLine(page, 'printf "\\033[5 q"; echo bar-$((6*7))');
      await waitForScreen(page, 'bar-42');
      await pane.locator('.xterm-cursor.xterm-cursor-bar.xterm-cursor-blink').waitFor();
      assert.equal(await blinkAnimations(page), 0, 'no CSS animation on the cursor');
      const barShadow = () => cursor.evaluate((element) => getComputedStyle(element).boxShadow);
      await waitFor('the bar\'s hidden phase', async () => await pane.locator('.cursor-blink-off').count() === 1 && await barShadow() === 'none');
      await waitFor('the bar\'s shown phase', async () => await pane.locator('.cursor-blink-off').count() === 0 && await barShadow() !== 'none');

      // DECSCUSR 2, a steady block (neovim's default): the page stops blinking, cursor shown.
      await typeLine(page, 'printf "\\033[2 q"; echo steady-$((6*7))');
      await waitForScreen(page, 'steady-42');
      await pane.locator('.xterm-cursor.xterm-cursor-block:not(.xterm-cursor-blink)').waitFor();
      await waitFor('the page to stop blinking', async () => !(await pageBlinkRuns(pane)));
      assert.equal(await pane.locator('.cursor-blink-off').count(), 0, 'the cursor stays shown');
      assert.notEqual(await cursor.evaluate((element) => getComputedStyle(element).backgroundColor), 'rgba(0, 0, 0, 0)');

      // Mode 12 set (DECSCUSR 0 first hands the choice back to it): xterm's own blink option is
      // turned on, which must not start its animation either.
      await typeLine(page, 'printf "\\033[0 q\\033[?12h"; echo mode-$((6*7))');
      await waitForScreen(page, 'mode-42');
      await pane.locator('.xterm-cursor.xterm-cursor-block.xterm-cursor-blink').waitFor();
      assert.equal(await blinkAnimations(page), 0, 'no CSS animation on the cursor');
      await waitFor('the page to blink', () => pageBlinkRuns(pane));
      await waitFor('the hidden phase', async () => await pane.locator('.cursor-blink-off').count() === 1);

      // Mode 12 reset stops it; a reset (RIS) goes back to the page's default, xterm's option too.
      await typeLine(page, 'printf "\\033[?12l"; echo still-$((6*7))');
      await waitForScreen(page, 'still-42');
      await waitFor('the page to stop blinking', async () => !(await pageBlinkRuns(pane)));
      await typeLine(page, 'printf "\\033c"; echo reset-$((6*7))');
      await waitForScreen(page, 'reset-42');
      await waitFor('the page to blink again', () => pageBlinkRuns(pane));
      assert.equal(await pane.evaluate((element) => /** @type {any} */ (element).xterm.options.cursorBlink), false,
        'xterm\'s own blink stays off with the DOM renderer');
      await waitFor('the hidden phase', async () => await pane.locator('.cursor-blink-off').count() === 1);
    } finally {
      await closePage(page);
    }
  });

  test('the page blinks the cursor only in the shown pane while its terminal has focus', async () => {
    const instance = await stack.createInstance();
    const page = await openInstance(instance.id);
    try {
      const first = page.locator('.pane').first();
      assert.equal(await first.getAttribute('data-renderer'), 'dom');
      const textarea = first.locator('.xterm-helper-textarea');
      await textarea.focus();
      await waitFor('the hidden phase with focus', async () => await first.locator('.cursor-blink-off').count() === 1);
      // Without focus xterm draws the cursor as an outline that does not blink: no timer, which
      // would cost a style recalculation and a frame each 600 ms for nothing.
      await textarea.evaluate((element) => /** @type {HTMLElement} */ (element).blur());
      assert.equal(await first.locator('.cursor-blink-off').count(), 0, 'the cursor is left shown');
      assert.equal(await blinkClassChanges(first), 0, 'no blink without focus');
      assert.equal(await pageBlinkRuns(first), false);
      await textarea.focus();
      assert.equal(await pageBlinkRuns(first), true, 'the blink again with focus');

      // Another tab shown: the first pane is hidden, and its blink stops.
      await openNewSession(page);
      const second = page.locator('.pane:not([hidden])');
      await waitFor('the first pane to be hidden', async () => await first.getAttribute('hidden') !== null);
      assert.equal(await blinkClassChanges(first), 0, 'no blink in a hidden pane');
      assert.equal(await pageBlinkRuns(first), false);
      await waitFor('the shown pane\'s blink', () => pageBlinkRuns(second));
    } finally {
      await closePage(page);
    }
  });

  test('with WebGL xterm blinks the cursor, and a reset undoes a program\'s mode 12 there too', async () => {
    const instance = await stack.createInstance();
    const page = await newDesktopPage(chromium.browser);
    try {
      await page.addInitScript(() => localStorage.setItem('ptyhub.gpuAcceleration', 'on'));
      await openInstance(instance.id, { page });
      const pane = page.locator('.pane:not([hidden])');
      assert.equal(await pane.getAttribute('data-renderer'), 'webgl');
      const xtermBlinks = () => pane.evaluate((element) => /** @type {any} */ (element).xterm.options.cursorBlink);
      assert.equal(await xtermBlinks(), true);
      assert.equal(await pane.evaluate((element) => /** @type {any} */ (element).cursorBlink ?? null), null, 'no blink of the page\'s');
      // xterm keeps mode 12 in its option, which its own reset leaves as the program set it.
      await typeLine(page, 'printf "\\033[?12l"; echo still-$((6*7))');
      await waitForScreen(page, 'still-42');
      assert.equal(await xtermBlinks(), false, 'the program\'s steady cursor');
      await typeLine(page, 'printf "\\033c"; echo reset-$((6*7))');
      await waitForScreen(page, 'reset-42');
      assert.equal(await xtermBlinks(), true, 'the page\'s blinking cursor again');
    } finally {
      await closePage(page);
    }
  });

  test('rename by double-click: Enter confirms, Escape cancels, a bad name shows the server message', async () => {
    const instance = await stack.createInstance();
    const page = await openInstance(instance.id);
    const tab = page.locator('[role="tab"]').first();
    await tab.dblclick();
    const input = page.getByRole('textbox', { name: 'Session name' });
    await input.fill('build logs');
    await input.press('Enter');
    await waitFor('the tab to be renamed', async () => (await tabNames(page))[0] === 'build logs');
    await waitFor('the server to know the new name', async () => (await stack.listSessions(instance.id))[0].name === 'build logs');

    await tab.dblclick();
    await input.fill('never saved');
    await input.press('Escape');
    assert.equal((await tabNames(page))[0], 'build logs');

    await tab.dblclick();
    await input.fill('   ');
    await input.press('Enter');
    await page.getByRole('alert').filter({ hasText: 'name must be 1 to 255 characters after trimming' }).waitFor();
    assert.equal((await tabNames(page))[0], 'build logs');
    assert.equal((await stack.listSessions(instance.id))[0].name, 'build logs');
    await closePage(page);
  });

  test('closing asks inline first, and closing the last tab starts a fresh session', async () => {
    const instance = await stack.createInstance();
    const page = await openInstance(instance.id);
    await openNewSession(page);

    await page.getByRole('button', { name: 'Close Session 2' }).click();
    const confirm = page.locator('.close-confirm:not([hidden])');
    await confirm.waitFor();
    assert.equal(await page.locator('[role="dialog"]:not([hidden])').count(), 0, 'no modal');
    await confirm.getByRole('button', { name: 'Keep' }).click();
    assert.equal((await tabNames(page)).length, 2);

    await page.getByRole('button', { name: 'Close Session 2' }).click();
    await confirm.getByRole('button', { name: 'Close' }).click();
    await waitFor('one tab left', async () => (await tabNames(page)).length === 1);
    await waitFor('the server to close it', async () => (await stack.listSessions(instance.id)).length === 1);

    const [only] = await stack.listSessions(instance.id);
    await page.getByRole('button', { name: 'Close Session 1' }).click();
    await confirm.getByRole('button', { name: 'Close' }).click();
    await waitFor('a fresh session in a new tab', async () => {
      const sessions = await stack.listSessions(instance.id);
      return sessions.length === 1 && sessions[0].id !== only.id && (await tabNames(page)).length === 1;
    });
    await waitForActiveConnected(page);
    await typeLine(page, 'echo fresh-$((2*21))');
    await waitForScreen(page, 'fresh-42');
    await closePage(page);
  });

  test('a reload reattaches every tab and shows its output once', async () => {
    const instance = await stack.createInstance();
    const page = await openInstance(instance.id);
    await typeLine(page, 'echo one-$((5*5))');
    await waitForScreen(page, 'one-25');
    await openNewSession(page);
    await typeLine(page, 'echo two-$((6*6))');
    await waitForScreen(page, 'two-36');
    const namesBefore = await tabNames(page);

    await page.reload();
    await waitFor('the same tabs after the reload', async () => JSON.stringify(await tabNames(page)) === JSON.stringify(namesBefore));
    await waitForActiveConnected(page);
    assert.equal(await page.locator('[role="tab"][aria-selected="true"]').textContent(), 'Session 2');
    let screen = await waitForScreen(page, 'two-36');
    assert.equal(count(screen, 'two-36'), 1);
    await typeLine(page, 'echo three-$((7*7))');
    screen = await waitForScreen(page, 'three-49');
    assert.equal(count(screen, 'two-36'), 1);
    assert.equal(count(screen, 'three-49'), 1);

    await page.getByRole('tab', { name: 'Session 1' }).click();
    await waitForActiveConnected(page);
    screen = await waitForScreen(page, 'one-25');
    assert.equal(count(screen, 'one-25'), 1);
    // Reloading again, the output of both loads is still there once each.
    await page.reload();
    await waitFor('two tabs again', async () => (await tabNames(page)).length === 2);
    await waitForActiveConnected(page);
    screen = await waitForScreen(page, 'one-25');
    assert.equal(count(screen, 'one-25'), 1);
    assert.equal(count(screen, 'echo one-$((5*5))'), 1);
    assert.equal(new Set(await stack.listSessions(instance.id).then((sessions) => sessions.map((s) => s.id))).size, 2);
    await closePage(page);
  });

  /**
   * Runs FULL_SCREEN_PROGRAM in the page's only tab, reloads, and requires the visible rows of
   * the fresh terminal to be the server's screen, drawn from one snapshot.
   */
  async function reloadRedrawsTheServerScreen(page, instance) {
    const scriptDir = await mkdtemp(join(tmpdir(), 'ptyhub-web-program-'));
    try {
      const script = join(scriptDir, 'full-screen.sh');
      await writeFile(script, FULL_SCREEN_PROGRAM);
      const [session] = await stack.listSessions(instance.id);
      await typeLine(page, `sh ${script}`);
      const drawn = await waitFor('the program to finish drawing on the server', async () => {
        const screen = await stack.screen(instance.id, session.id);
        return screen.text.includes('flood-done-42') ? screen : false;
      }, 120_000);
      assert.equal(drawn.alternate_screen, true);
      assert.ok(drawn.offset > FLOOD_BYTES, `more than 5 MiB of output (${drawn.offset} bytes)`);
      assert.equal(drawn.lines[0], 'header: drawn once');
      assert.equal(drawn.lines.at(-1), 'bottom line');

      const socketsBefore = page.sockets.length;
      await page.reload();
      await waitForActiveConnected(page);
      // Both sides are read each time: the reloaded page may fit its terminal (and so the PTY)
      // again once its layout settles.
      let server;
      let shown;
      await waitFor('the terminal to show the server\'s screen', async () => {
        server = await stack.screen(instance.id, session.id);
        shown = await visibleBufferLines(page);
        return JSON.stringify(shown) === JSON.stringify(server.lines);
      }).catch((error) => {
        throw new Error(`${error.message}\nthe terminal: ${JSON.stringify(shown)}\nthe server: ${JSON.stringify(server?.lines)}`);
      });
      assert.equal(server.lines[0], 'header: drawn once');
      assert.equal(server.lines[2], 'counter: 5600');
      // The fresh terminal asked for a snapshot, not a replay from an offset, and got one.
      const [reloaded] = connectedSockets(page).slice(socketsBefore);
      assert.equal(reloaded.url.searchParams.get('snapshot'), '1', String(reloaded.url));
      assert.equal(reloaded.url.searchParams.get('since'), null, String(reloaded.url));
      assert.equal(reloaded.snapshots.length, 1, 'one snapshot');
      assert.equal(reloaded.snapshots[0].offset, reloaded.connected.offset);
    } finally {
      await rm(scriptDir, { recursive: true, force: true });
    }
  }

  test('a reload under a full-screen program that wrote 5 MiB shows exactly the server\'s screen', async () => {
    const instance = await stack.createInstance();
    const page = await openInstance(instance.id);
    await reloadRedrawsTheServerScreen(page, instance);
    await closePage(page);
  });

  test('phone: a reload under a full-screen program shows exactly the server\'s screen', async () => {
    const instance = await stack.createInstance();
    const page = await newMobilePage(chromium.browser, stack.origin);
    await page.goto(`${stack.origin}/instances/${instance.id}?token=${stack.token}`);
    await waitForActiveConnected(page);
    await reloadRedrawsTheServerScreen(page, instance);
    await closePage(page);
  });

  test('a background tab that rings the bell or exits is marked until it is selected', async () => {
    const instance = await stack.createInstance();
    const flagDir = await mkdtemp(join(tmpdir(), 'ptyhub-web-flag-'));
    const bellFlag = join(flagDir, 'bell');
    const exitFlag = join(flagDir, 'exit');
    try {
      const page = await openInstance(instance.id);
      // Session 1 rings once told to, Session 2 exits once told to; Session 3 is the one shown.
      await typeLine(page, `echo armed-$((2*4)); while [ ! -e ${bellFlag} ]; do sleep 0.1; done; printf 'rang-%s\\a\\n' $((3*4))`);
      await waitForScreen(page, 'armed-8');
      for (const line of [`echo armed-$((3*4)); while [ ! -e ${exitFlag} ]; do sleep 0.1; done; exit 4`, `printf '\\ahere-%s\\n' $((5*5))`]) {
        await openNewSession(page);
        await typeLine(page, line);
      }
      await waitForScreen(page, 'here-25');
      await page.getByRole('tab', { name: 'Session 2', exact: true }).click();
      await waitForScreen(page, 'armed-12');
      await page.getByRole('tab', { name: 'Session 3', exact: true }).click();
      await waitForScreen(page, 'here-25');
      // The shown tab rang too (its BEL came before "here-25"): that marks nothing.
      assert.equal(await tabNamed(page, 'Session 3').getAttribute('data-attention'), null);

      await writeFile(bellFlag, '');
      await writeFile(exitFlag, '');
      await page.getByRole('tab', { name: 'Session 1 (bell rang)', exact: true }).waitFor();
      await page.getByRole('tab', { name: 'Session 2 (process exited)', exact: true }).waitFor();
      assert.equal(await tabNamed(page, 'Session 1').getAttribute('data-attention'), 'bell');
      assert.equal(await tabNamed(page, 'Session 2').getAttribute('data-attention'), 'exited');
      assert.ok(await tabNamed(page, 'Session 1').locator('.attention-mark').isVisible(), 'a visible mark');
      assert.equal(await tabNamed(page, 'Session 3').getAttribute('data-attention'), null);

      await tabNamed(page, 'Session 1').click();
      await waitForScreen(page, 'rang-12');
      await page.getByRole('tab', { name: 'Session 1', exact: true }).waitFor();
      assert.equal(await tabNamed(page, 'Session 1').getAttribute('data-attention'), null);
      assert.equal(await tabNamed(page, 'Session 1').locator('.attention-mark').isVisible(), false);
      await tabNamed(page, 'Session 2').click();
      await page.getByRole('tab', { name: 'Session 2', exact: true }).waitFor();
      assert.equal(await tabNamed(page, 'Session 2').getAttribute('data-attention'), null);
      await waitForConnectionState(page, 'Session ended (exit code 4)');
      await closePage(page);
    } finally {
      await rm(flagDir, { recursive: true, force: true });
    }
  });

  test('a tab\'s tooltip shows the window title its program set, live and after a reload', async () => {
    const instance = await stack.createInstance();
    const page = await openInstance(instance.id);
    const tooltip = () => tabNamed(page, 'Session 1').getAttribute('title');
    assert.doesNotMatch(await tooltip(), /title-42/);
    await typeLine(page, `printf '\\033]2;title-%s\\007' $((6*7))`);
    await waitFor('the tooltip to show the title', async () => (await tooltip()).includes('title-42'));
    // The window title, then the name, the connection and what the terminal is doing (running
    // until the shell's prompt is back).
    await waitFor('the tooltip at the prompt', async () => (await tooltip()) === 'title-42\nSession 1: Connected; At the prompt');
    await waitFor('the session record to carry the title', async () => (await stack.listSessions(instance.id))[0].title === 'title-42');
    await page.reload();
    await waitForActiveConnected(page);
    await waitFor('the tooltip to show the title after the reload', async () => (await tooltip()).includes('title-42'));
    await closePage(page);
  });

  test('a network drop reconnects with since, shows reconnecting, and prints nothing twice', async () => {
    const instance = await stack.createInstance();
    const relay = await startRelay(stack.origin);
    const flagDir = await mkdtemp(join(tmpdir(), 'ptyhub-web-flag-'));
    const flag = join(flagDir, 'go');
    try {
      const page = await openInstance(instance.id, { origin: relay.origin });
      await typeLine(page, 'echo before-$((8*8))');
      await waitForScreen(page, 'before-64');
      // Output the session produces while the browser is cut off must arrive once, afterwards.
      // The cut comes only once the shell runs the line (it printed "armed"): a cut while the
      // keystrokes are still on their way would lose them, and nothing would print later.
      await typeLine(page, `echo armed-$((4*4)); while [ ! -e ${flag} ]; do sleep 0.2; done; echo during-$((9*9))`);
      await waitForScreen(page, 'armed-16');
      const connectedBefore = connectedSockets(page).length;
      await relay.cut();
      await waitForConnectionState(page, 'Reconnecting…');
      await page.getByRole('status').filter({ hasText: /^Connection lost: reconnecting \(attempt \d+\)…$/ }).waitFor();
      await writeFile(flag, '');
      await relay.restore();
      await waitForActiveConnected(page);
      const screen = await waitForScreen(page, 'during-81');
      assert.equal(count(screen, 'during-81'), 1);
      assert.equal(count(screen, 'before-64'), 1);
      assert.equal(count(screen, 'echo before-$((8*8))'), 1);
      // Exactly one new socket reached the session (refused attempts during the cut do not
      // count), and it asked to resume where the terminal stopped: the server starts there,
      // with nothing lost. Read after the replay, so every frame before it has been seen.
      const reconnected = connectedSockets(page).slice(connectedBefore);
      assert.equal(reconnected.length, 1, 'one reconnected socket');
      const since = reconnected[0].url.searchParams.get('since');
      assert.match(since ?? '', /^[1-9]\d*$/, `the reconnect resumes with since (${reconnected[0].url})`);
      assert.equal(reconnected[0].connected.offset, Number(since));
      assert.deepEqual(reconnected[0].gaps, []);
      await typeLine(page, 'echo after-$((10*10))');
      await waitForScreen(page, 'after-100');
      assert.equal(await page.locator('.pane:not([hidden]) .pane-status:not([hidden])').count(), 0);
      await closePage(page);
    } finally {
      await relay.stop();
      await rm(flagDir, { recursive: true, force: true });
    }
  });

  test('output lost beyond the ring while disconnected is shown as a one-line gap notice', async () => {
    const instance = await stack.createInstance();
    const relay = await startRelay(stack.origin);
    const flagDir = await mkdtemp(join(tmpdir(), 'ptyhub-web-flag-'));
    const flag = join(flagDir, 'go');
    const done = join(flagDir, 'done');
    try {
      const page = await openInstance(instance.id, { origin: relay.origin });
      // Far more than the ring holds (1 MiB by default) is printed while the page is cut off.
      await typeLine(page, `echo armed-$((4*4)); while [ ! -e ${flag} ]; do sleep 0.2; done; head -c 4000000 /dev/zero | tr '\\0' x; echo; echo flood-$((50*2)); touch ${done}`);
      await waitForScreen(page, 'armed-16');
      const connectedBefore = connectedSockets(page).length;
      await relay.cut();
      await waitForConnectionState(page, 'Reconnecting…');
      await writeFile(flag, '');
      await waitFor('the flood to end while the page is away', () => existsSync(done), 120_000);
      await relay.restore();
      await waitForActiveConnected(page);
      const screen = await waitForScreen(page, 'flood-100', 120_000);
      assert.equal(count(screen, 'flood-100'), 1);
      // The notice gives the number the server sent in its one gap frame.
      const [reconnected] = connectedSockets(page).slice(connectedBefore);
      assert.equal(reconnected.gaps.length, 1, 'one gap frame');
      const lost = reconnected.gaps[0].lost;
      assert.ok(Number.isSafeInteger(lost) && lost > 0, `a positive gap (${lost})`);
      // The mounted terminal resumed with since; the server redrew it from a snapshot.
      assert.match(reconnected.url.searchParams.get('since') ?? '', /^[1-9]\d*$/);
      assert.equal(reconnected.url.searchParams.get('snapshot'), null);
      assert.equal(reconnected.snapshots.length, 1, 'a snapshot stands in for the lost bytes');
      const notice = page.getByRole('status').filter({ hasText: `${lost} bytes of output were lost while disconnected` });
      await notice.waitFor();
      await typeLine(page, 'echo next-$((3*7))');
      await waitForScreen(page, 'next-21');
      await notice.waitFor({ state: 'hidden' });
      await closePage(page);
    } finally {
      await relay.stop();
      await rm(flagDir, { recursive: true, force: true });
    }
  });

  test('a second page takes the session over: the first shows the banner and does not reconnect', async () => {
    const instance = await stack.createInstance();
    const first = await openInstance(instance.id);
    await typeLine(first, 'echo shared-$((3*3))');
    await waitForScreen(first, 'shared-9');
    const firstSockets = first.sockets.length;

    const second = await openInstance(instance.id);
    await waitForScreen(second, 'shared-9');
    const banner = first.getByRole('alert').filter({ hasText: 'open elsewhere' });
    await banner.waitFor();
    await banner.getByRole('button', { name: 'Take back' }).waitFor();

    // The second page keeps control while it works: the first does not take it back by itself.
    await typeLine(second, 'echo second-$((4*4))');
    await waitForScreen(second, 'second-16');
    await typeLine(second, 'echo again-$((5*4))');
    await waitForScreen(second, 'again-20');
    assert.equal(await connectionState(second).textContent(), 'Connected');
    assert.equal(await second.locator('.pane-banner:not([hidden])').count(), 0);
    assert.equal(first.sockets.length, firstSockets, 'the first page opened no new socket');
    await waitForConnectionState(first, 'Taken over by another tab');

    await banner.getByRole('button', { name: 'Take back' }).click();
    await waitForActiveConnected(first);
    await second.getByRole('alert').filter({ hasText: 'open elsewhere' }).waitFor();
    await waitForConnectionState(second, 'Taken over by another tab');
    await typeLine(first, 'echo back-$((6*5))');
    await waitForScreen(first, 'back-30');
    await closePage(first);
    await closePage(second);
  });

  test('a session that is gone says "Session expired" and offers a new one', async () => {
    const instance = await stack.createInstance();
    const relay = await startRelay(stack.origin);
    try {
      const page = await openInstance(instance.id, { origin: relay.origin });
      const [session] = await stack.listSessions(instance.id);
      await relay.cut();
      await waitForConnectionState(page, 'Reconnecting…');
      const { status } = await stack.rest('DELETE', `/api/v1/instances/${instance.id}/terminal/sessions/${session.id}`);
      assert.equal(status, 200);
      await relay.restore();
      await waitForConnectionState(page, 'Session expired');
      await page.locator('.pane:not([hidden]) .pane-notice').filter({ hasText: 'Session expired: it is no longer running on the server.' }).waitFor();
      await page.getByRole('button', { name: 'Start a new session' }).click();
      await waitForActiveConnected(page);
      await typeLine(page, 'echo renewed-$((11*11))');
      await waitForScreen(page, 'renewed-121');
      const sessions = await stack.listSessions(instance.id);
      assert.equal(sessions.length, 1);
      assert.notEqual(sessions[0].id, session.id);
      await closePage(page);
    } finally {
      await relay.stop();
    }
  });

  test('an exit shows its code or signal in the terminal, on the tab and in the state, and Restart resets the session', async () => {
    const instance = await stack.createInstance();
    const page = await openInstance(instance.id);
    await typeLine(page, 'exit 3');
    await waitForScreen(page, 'exited with code 3');
    await page.locator('.tab-exit', { hasText: 'exit 3' }).waitFor();
    await waitForConnectionState(page, 'Session ended (exit code 3)');
    await page.locator('.pane:not([hidden]) .pane-notice').getByRole('button', { name: 'Restart' }).click();
    await waitForActiveConnected(page);
    assert.equal(await page.locator('.tab-exit:not([hidden])').count(), 0);
    await typeLine(page, 'echo restarted-$((12*12))');
    await waitForScreen(page, 'restarted-144');
    // A process ended by a signal is said to have ended by that signal.
    await typeLine(page, 'kill -KILL $$');
    await waitForConnectionState(page, 'Session ended (signal 9)');
    await waitForScreen(page, 'exited with signal 9');
    await closePage(page);
  });

  test('fullscreen by button and Alt+Shift+F: the tab strip overlay hides after 3 s', async () => {
    const instance = await stack.createInstance();
    const page = await openInstance(instance.id);
    const root = page.locator('.terminal-page');
    const tablist = page.getByRole('tablist');
    await page.getByRole('button', { name: 'Fullscreen', exact: true }).click();
    await waitFor('fullscreen', async () => (await root.getAttribute('class')).includes('fullscreen'));
    assert.equal(await page.locator('.topbar').isVisible(), false);
    assert.equal(await tablist.isVisible(), true);
    await tablist.waitFor({ state: 'hidden', timeout: PATIENCE_MS });
    await page.mouse.move(300, 300);
    await page.mouse.move(320, 310);
    await tablist.waitFor({ state: 'visible' });
    await page.getByRole('button', { name: 'Exit fullscreen', exact: true }).click();
    await waitFor('fullscreen to end', async () => !(await root.getAttribute('class')).includes('fullscreen'));
    assert.equal(await page.locator('.topbar').isVisible(), true);

    await page.locator('.pane:not([hidden]) .xterm').click();
    await page.keyboard.press('Alt+Shift+F');
    await waitFor('fullscreen by shortcut', async () => (await root.getAttribute('class')).includes('fullscreen'));
    await page.keyboard.press('Alt+Shift+F');
    await waitFor('fullscreen to end by shortcut', async () => !(await root.getAttribute('class')).includes('fullscreen'));
    await closePage(page);
  });

  test('Alt+Shift shortcuts: N new, Left/Right switch, R restart, W close', async () => {
    const instance = await stack.createInstance();
    const page = await openInstance(instance.id);
    const selected = () => page.locator('[role="tab"][aria-selected="true"]').textContent();
    await page.locator('.pane:not([hidden]) .xterm').click();
    await page.keyboard.press('Alt+Shift+N');
    await waitFor('a new tab by shortcut', async () => (await tabNames(page)).length === 2 && (await selected()) === 'Session 2');
    await waitForActiveConnected(page);
    await page.keyboard.press('Alt+Shift+ArrowLeft');
    await waitFor('the previous tab', async () => (await selected()) === 'Session 1');
    await page.keyboard.press('Alt+Shift+ArrowRight');
    await waitFor('the next tab', async () => (await selected()) === 'Session 2');
    await page.keyboard.press('Alt+Shift+ArrowRight');
    await waitFor('wrapping to the first tab', async () => (await selected()) === 'Session 1');

    await typeLine(page, 'MARK=kept-before-reset; echo "$MARK"');
    await waitForScreen(page, 'kept-before-reset\n');
    await page.keyboard.press('Alt+Shift+R');
    await page.getByRole('status').filter({ hasText: exactly('Session restarted') }).waitFor();
    await waitForActiveConnected(page);
    await typeLine(page, 'echo "mark=[$MARK]"');
    await waitForScreen(page, 'mark=[]');

    await page.keyboard.press('Alt+Shift+W');
    const confirm = page.locator('.close-confirm:not([hidden])');
    await confirm.getByRole('button', { name: 'Close' }).click();
    await waitFor('one tab left', async () => (await tabNames(page)).length === 1);
    assert.equal(await selected(), 'Session 2');
    // Every shortcut also has a button.
    for (const name of ['New session', 'Previous session', 'Next session', 'Restart session', 'Fullscreen', 'Close Session 2']) {
      assert.equal(await page.getByRole('button', { name, exact: true }).count(), 1, name);
    }
    await closePage(page);
  });

  test('a read-only viewer is marked and cannot type, and does not take control', async () => {
    const instance = await stack.createInstance();
    const controller = await openInstance(instance.id);
    await typeLine(controller, 'echo watched-$((13*3))');
    await waitForScreen(controller, 'watched-39');
    const viewer = await openInstance(instance.id, { query: 'mode=view' });
    await viewer.locator('.viewer-badge', { hasText: 'Read-only' }).waitFor();
    await viewer.getByRole('note').filter({ hasText: 'Read-only view' }).waitFor();
    await waitForScreen(viewer, 'watched-39');
    assert.equal(await viewer.getByRole('button', { name: 'New session' }).isDisabled(), true);
    await typeLine(viewer, 'echo from-viewer');
    await typeLine(controller, 'echo control-$((14*3))');
    await waitForScreen(viewer, 'control-42');
    const screen = await waitForScreen(controller, 'control-42');
    assert.ok(!screen.includes('from-viewer'));
    const viewerInput = viewer.sockets.flatMap((socket) => socket.sent).filter(isInputFrame);
    assert.deepEqual(viewerInput, [], 'the viewer sent no input');
    assert.ok(viewer.sockets.every((socket) => socket.url.searchParams.get('mode') === 'view'));
    assert.equal(await controller.locator('.pane-banner:not([hidden])').count(), 0);
    assert.equal(await connectionState(controller).textContent(), 'Connected');
    assert.equal(await connectionState(viewer).textContent(), 'Connected, read-only');
    await closePage(controller);
    await closePage(viewer);
  });

  test('mobile: header with the session name, compact tabs, special keys, text selection and copy', async () => {
    const instance = await stack.createInstance();
    const page = await newMobilePage(chromium.browser, stack.origin, { colorScheme: 'dark' });
    await page.goto(`${stack.origin}/instances/${instance.id}?token=${stack.token}`);
    await waitForActiveConnected(page);
    await page.getByTestId('active-session-name').filter({ hasText: 'Session 1' }).waitFor();
    const keys = page.getByRole('toolbar', { name: 'Special keys' });
    await keys.waitFor();

    await page.locator('.pane:not([hidden]) .xterm').tap();
    await page.keyboard.type('cat -vt');
    await page.keyboard.press('Enter');
    await waitForScreen(page, 'cat -vt');
    for (const key of ['Escape', 'Up', 'Tab']) await keys.getByRole('button', { name: key, exact: true }).tap();
    await page.keyboard.press('Enter');
    await waitForScreen(page, '^[^[[A^I');
    // Ctrl then a typed "c" is Ctrl+C: cat ends and the shell answers again.
    await keys.getByRole('button', { name: 'Ctrl', exact: true }).tap();
    assert.equal(await keys.getByRole('button', { name: 'Ctrl', exact: true }).getAttribute('aria-pressed'), 'true');
    await page.keyboard.type('c');
    await typeLine(page, 'echo phone-$((15*3))');
    await waitForScreen(page, 'phone-45');

    // Typing hid the header and tab strip; the handle brings them back.
    await page.locator('.topbar').waitFor({ state: 'hidden' });
    await page.getByRole('button', { name: 'Show tabs' }).tap();
    await page.getByRole('tablist').waitFor({ state: 'visible' });
    // More tabs than fit: the strip scrolls sideways and fades on the side with more.
    for (let index = 0; index < 3; index += 1) {
      await openNewSession(page, (button) => button.tap());
    }
    await page.getByTestId('active-session-name').filter({ hasText: 'Session 4' }).waitFor();
    const strip = page.locator('.tabs-wrap');
    await waitFor('a fade on the left', async () => (await strip.getAttribute('class')).includes('fade-left'));
    await page.getByRole('tab', { name: 'Session 1' }).tap();
    await waitFor('a fade on the right only', async () => {
      const classes = await strip.getAttribute('class');
      return classes.includes('fade-right') && !classes.includes('fade-left');
    });
    await page.getByTestId('active-session-name').filter({ hasText: 'Session 1' }).waitFor();
    await waitForScreen(page, 'phone-45');

    await keys.getByRole('button', { name: 'Select text' }).tap();
    const text = page.locator('.copy-text');
    await text.waitFor();
    assert.match(await text.textContent(), /phone-45/);
    await page.evaluate(() => {
      const node = document.querySelector('.copy-text').firstChild;
      const start = node.textContent.lastIndexOf('phone-45');
      const range = document.createRange();
      range.setStart(node, start);
      range.setEnd(node, start + 'phone-45'.length);
      window.getSelection().removeAllRanges();
      window.getSelection().addRange(range);
    });
    await page.getByRole('button', { name: 'Copy' }).tap();
    await page.getByRole('alert').filter({ hasText: 'Copied 8 characters' }).waitFor();
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), 'phone-45');
    await page.getByRole('button', { name: 'Done' }).tap();
    await closePage(page);
  });
});

/** The shown terminal's rows, as xterm sized it (the WebGL renderer draws no row elements). */
async function visibleRows(page) {
  return page.evaluate(() => document.querySelector('.pane:not([hidden])')?.xterm?.rows ?? 0);
}
