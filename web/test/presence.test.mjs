// Presence and control requests in the page (CONTRACT.md "Presence on the page"): two browsers
// on one session each see both attendees in the header with their roles, "is typing" shows and
// clears, and a read-only viewer's request for control shows on the controller's page, where
// Decline changes nothing and Grant moves control without a reconnect of either page. The real
// `ptyhub attach` beside two pages: a watching CLI is listed on each page (through `cli`) and
// sees both pages in `ptyhub ls --json`; a CLI that types takes the session over and both pages
// say it is typing, then not; each CLI is dropped from the list when it detaches.

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

/** The header's attendees as `role surface` words (the surface read from the tooltip). */
async function attendees(page) {
  return page.locator('[data-testid="presence"] li').evaluateAll((items) => items.map((item) => {
    const surface = /, ([^,()]+)\)$/.exec(item.getAttribute('title') ?? '')?.[1] ?? '?';
    return `${item.getAttribute('data-role')} ${surface}`;
  }));
}

/** Whether the header marks the attendee that came through `surface` as typing. */
async function typingOn(page, surface) {
  const marks = await page.locator('[data-testid="presence"] li').evaluateAll((items, through) => items
    .filter((item) => (item.getAttribute('title') ?? '').endsWith(`, ${through})`))
    .map((item) => item.getAttribute('data-typing')), surface);
  return marks.length === 1 && marks[0] === 'true';
}

/** Waits until every page's header lists exactly `expected` (`role surface` words, in order). */
async function waitForAttendees(pages, expected) {
  for (const page of pages) {
    let listed = [];
    try {
      await waitFor(`the header to list ${JSON.stringify(expected)}`, async () => {
        listed = await attendees(page);
        return JSON.stringify(listed) === JSON.stringify(expected);
      });
    } catch (error) {
      throw new Error(`the header lists ${JSON.stringify(listed)}, not ${JSON.stringify(expected)}`, { cause: error });
    }
  }
}

/** The detach keys `ptyhub attach` leaves on by default: Ctrl-P Ctrl-Q. */
const DETACH_KEYS = '\x10\x11';

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

  test('a CLI beside two pages: each sees the others, its typing shows and clears, it is dropped when it detaches', async (t) => {
    const instance = await stack.createInstance();
    const { status, body: session } = await stack.rest('POST', `/api/v1/instances/${instance.id}/terminal/sessions`, {});
    assert.equal(status, 201);
    const owner = await openInstance(instance.id);
    const watcher = await openInstance(instance.id, 'mode=view');
    const pages = [owner, watcher];
    await waitForAttendees(pages, ['controller web', 'viewer web']);
    const watcherSockets = watcher.sockets.length;

    // A read-only CLI joins: each page lists it third, through the CLI.
    const watchingCli = stack.startCli(['attach', instance.name, session.id, '--view']);
    // Ended however the test ends: a CLI left attached would reconnect for a minute.
    t.after(() => watchingCli.stop());
    const watchingSince = await watchingCli.firstOutput;
    await waitForAttendees(pages, ['controller web', 'viewer web', 'viewer cli']);
    console.log(`both pages listed the watching CLI ${Date.now() - watchingSince} ms after it attached`);
    const tooltip = await watcher.locator('[data-testid="presence"] li').nth(2).getAttribute('title');
    assert.match(tooltip ?? '', /^\S+ \(viewer, cli\)$/);

    // The CLI sees the pages: `ptyhub ls --json` prints the session's presence.
    const listed = await stack.runCli(['ls', instance.name, '--json']);
    assert.equal(listed.code, 0, listed.stderr);
    const presence = JSON.parse(listed.stdout).sessions.find((each) => each.id === session.id)?.presence ?? [];
    assert.deepEqual(presence.map((attendee) => `${attendee.role} ${attendee.surface}`),
      ['controller web', 'viewer web', 'viewer cli']);

    // It detaches with its keys and ends; the pages drop it.
    watchingCli.write(DETACH_KEYS);
    assert.deepEqual(await watchingCli.exited, { code: 0, signal: null }, watchingCli.stderr);
    const watchingLeft = Date.now();
    await waitForAttendees(pages, ['controller web', 'viewer web']);
    console.log(`both pages dropped the watching CLI ${Date.now() - watchingLeft} ms after it ended`);

    // A CLI that may type attaches as the controller, as `ptyhub attach` does by default: it
    // takes the session over from the owner's page, which says so and leaves the list.
    const typingCli = stack.startCli(['attach', instance.name, session.id]);
    t.after(() => typingCli.stop());
    const typingSince = await typingCli.firstOutput;
    await waitForAttendees(pages, ['viewer web', 'controller cli']);
    console.log(`both pages listed the typing CLI ${Date.now() - typingSince} ms after it attached`);
    await owner.getByText('another window took control of it').waitFor();

    // It types a line: both pages say someone is typing and mark the CLI, then, a few quiet
    // seconds later, no more.
    typingCli.write('echo cli-typed-$((6*7))\r');
    await waitForScreen(watcher, 'cli-typed-42');
    for (const page of pages) {
      await waitFor('the CLI marked as typing, and "is typing"', async () =>
        await typingOn(page, 'cli') && / is typing$/.test(await page.getByTestId('typing').textContent() ?? ''));
    }
    for (const page of pages) {
      await waitFor('"is typing" cleared', async () =>
        !(await typingOn(page, 'cli')) && (await page.getByTestId('typing').textContent()) === '');
    }

    // It detaches too: the pages drop it, and the watcher's page never reconnected meanwhile.
    typingCli.write(DETACH_KEYS);
    assert.deepEqual(await typingCli.exited, { code: 0, signal: null }, typingCli.stderr);
    await waitForAttendees(pages, ['viewer web']);
    assert.equal(watcher.sockets.length, watcherSockets, 'the watcher\'s page did not reconnect');

    await closePage(owner);
    await closePage(watcher);
  });
});
