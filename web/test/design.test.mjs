// The page's design in Debian's Chromium against a real stack: its details (live pages, `default`
// as a session id, restart, loading, the phone's chrome, fullscreen Esc), what people expect of a
// terminal in the browser (WebGL, Unicode 11, links, search, OSC 52, font size, theme), the marks
// a reload brings back, and the README's screenshots, light and dark. Each behaviour runs on the
// desktop (1280x720) and on a phone (390x844, touch).

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  closePage, connectedSockets, launchBrowser, missingRequirement, newDesktopPage, newMobilePage,
  openNewSession, saveScreenshot, screenText, startStack, tabNamed, tabNames, typeLine, waitFor,
  waitForActiveConnected, waitForConnectionState, waitForScreen,
} from './support.mjs';

const skip = missingRequirement();
if (skip) console.log(`# skipping the browser tests: ${skip}`);

/** The two kinds of screen every behaviour is tried on. */
const DEVICES = ['desktop', 'phone'];

describe('web page: the design and the terminal\'s features, on desktop and phone', { skip: skip ?? false }, () => {
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

  /** A fresh page of the given kind, not yet at any address. */
  async function newPage(device, options = {}) {
    return device === 'phone'
      ? newMobilePage(chromium.browser, stack.origin, options)
      : newDesktopPage(chromium.browser, options);
  }

  /** Opens an instance's terminal page on `page` and waits for the shown tab to connect. */
  async function openOn(page, instanceId, query = '') {
    await page.goto(`${stack.origin}/instances/${instanceId}?${query}${query ? '&' : ''}token=${stack.token}`);
    await page.locator('[role="tablist"] [role="tab"]').first().waitFor();
    await waitForConnectionState(page, query.includes('mode=view') ? 'Connected, read-only' : 'Connected');
    return page;
  }

  async function open(device, instanceId, options = {}) {
    return openOn(await newPage(device, options), instanceId);
  }

  /** On a phone whose typing hid the tab strip, brings it back with the handle. */
  async function showTabs(device, page) {
    const handle = page.locator('.chrome-handle:not([hidden])');
    if (device === 'phone' && await handle.isVisible()) await handle.tap();
  }

  /** Taps (phone) or clicks (desktop). */
  async function press(device, locator) {
    if (device === 'phone') await locator.tap();
    else await locator.click();
  }

  /** One of the tab's actions: a button after the tabs on the desktop, in the strip's menu on a phone. */
  async function tabAction(device, page, name) {
    if (device === 'phone') await page.getByRole('button', { name: 'Session actions' }).tap();
    await press(device, page.getByRole('button', { name, exact: true }));
  }

  const sessionsPath = (instanceId) => `/api/v1/instances/${instanceId}/terminal/sessions`;

  // ---- 1: every open page follows the instance live ----------------------------------------

  for (const device of DEVICES) {
    test(`${device}: renames, creates, closes and status changes reach every open page, and a restart keeps the name`, async () => {
      const instance = await stack.createInstance();
      const page = await open(device, instance.id);
      const other = await open(device === 'phone' ? 'desktop' : 'phone', instance.id);
      const [first] = await stack.listSessions(instance.id);

      // A rename on the other page reaches this one without a reload.
      await other.locator('[role="tab"]').first().dblclick();
      const input = other.getByRole('textbox', { name: 'Session name' });
      await input.fill('renamed over there');
      await input.press('Enter');
      await tabNamed(page, 'renamed over there').waitFor();
      if (device === 'phone') await page.getByTestId('active-session-name').filter({ hasText: 'renamed over there' }).waitFor();

      // A session created by a program appears as a tab on both.
      const { status, body: created } = await stack.rest('POST', sessionsPath(instance.id), { name: 'made by a script' });
      assert.equal(status, 201);
      await tabNamed(page, 'made by a script').waitFor();
      await tabNamed(other, 'made by a script').waitFor();
      const createdTab = page.locator(`[role="tab"][data-session-id="${created.id}"]`);
      // Neither page takes the session from the script (or from each other) until it is shown.
      assert.equal(await createdTab.getAttribute('data-status'), 'idle');
      assert.equal(await createdTab.getAttribute('aria-selected'), 'false');

      // Its process exits: the status reaches this page's tab.
      await stack.rest('POST', `${sessionsPath(instance.id)}/${created.id}/input`, { text: 'exit 5\n' });
      await waitFor('the exit to show on the tab', async () => (await createdTab.getAttribute('data-status')) === 'exited');
      await page.locator('.tab-exit', { hasText: 'exit 5' }).waitFor();

      // Closed on the other page: gone from this one.
      await tabNamed(other, 'made by a script').click();
      await other.getByRole('button', { name: 'Close made by a script' }).click();
      await waitFor('the tab to go on this page', async () => !(await tabNames(page)).includes('made by a script'));
      assert.deepEqual(await tabNames(page), ['renamed over there']);

      // A restart brings back the current name, not the one the socket opened with. (The other
      // page took the first session over when it opened; this one takes it back first.)
      await press(device, page.getByRole('button', { name: 'Take back' }));
      await waitForActiveConnected(page);
      await stack.rest('POST', `${sessionsPath(instance.id)}/${first.id}/rename`, { name: 'third name' });
      await tabNamed(page, 'third name').waitFor();
      await tabAction(device, page, 'Restart session');
      await page.getByRole('status').filter({ hasText: /^Session restarted$/ }).waitFor();
      await waitForActiveConnected(page);
      const restarted = connectedSockets(page).at(-1);
      assert.equal(restarted.connected.session.name, 'renamed over there', 'the socket opened with the older name');
      assert.deepEqual(await tabNames(page), ['third name']);
      assert.deepEqual(await tabNames(other), ['third name']);
      await closePage(page);
      await closePage(other);
    });
  }

  // ---- 2: `default` as a session id -----------------------------------------------------------

  for (const device of DEVICES) {
    test(`${device}: "default" is a session id for REST and the WebSocket, and its tab appears`, async () => {
      const instance = await stack.createInstance();
      const page = await open(device, instance.id);
      const answers = await page.evaluate(async ({ instanceId, token }) => {
        const headers = { Authorization: `Bearer ${token}` };
        const path = `/api/v1/instances/${instanceId}/terminal/sessions/default`;
        const missing = (await fetch(path, { headers })).status;
        const reset = await fetch(`${path}/reset`, { method: 'POST', headers });
        const created = await reset.json();
        const got = await (await fetch(path, { headers })).json();
        const connected = await new Promise((resolve, reject) => {
          const socket = new WebSocket(`ws://${location.host}/ws/tool-instances/${instanceId}/terminal/default?mode=view&token=${token}`);
          socket.onmessage = (event) => {
            if (typeof event.data !== 'string') return;
            const message = JSON.parse(event.data);
            if (message.type === 'status' && message.status === 'connected') {
              socket.close();
              resolve(message);
            }
          };
          socket.onclose = (event) => reject(new Error(`closed ${event.code} ${event.reason}`));
        });
        return { missing, resetStatus: reset.status, created, got, connected };
      }, { instanceId: instance.id, token: stack.token });
      assert.equal(answers.missing, 404);
      assert.equal(answers.resetStatus, 200);
      assert.equal(answers.got.id, answers.created.id);
      assert.deepEqual(answers.got.aliases, ['default']);
      assert.equal(answers.connected.session.id, answers.created.id);
      // The page follows: the default session is a tab now.
      await page.locator(`[role="tab"][data-session-id="${answers.created.id}"]`).waitFor();
      await closePage(page);
    });
  }

  // ---- 3: restart clears the terminal -----------------------------------------------------

  for (const device of DEVICES) {
    test(`${device}: Restart clears the screen and the scrollback before the new process draws`, async () => {
      const instance = await stack.createInstance();
      const page = await open(device, instance.id);
      // The old process is still printing when the restart comes: its output that the terminal
      // has queued but not drawn must not land on the new process's screen.
      await typeLine(page, 'echo before-restart-$((6*7)); i=0; while :; do echo old-line-$i; i=$((i+1)); done');
      await waitForScreen(page, 'old-line-');
      await showTabs(device, page);
      await tabAction(device, page, 'Restart session');
      await page.getByRole('status').filter({ hasText: /^Session restarted$/ }).waitFor();
      await waitForActiveConnected(page);
      await typeLine(page, 'echo after-restart-$((7*7))');
      await waitForScreen(page, 'after-restart-49');
      const everything = await page.evaluate(() => {
        const terminal = document.querySelector('.pane:not([hidden])').xterm;
        const buffer = terminal.buffer.active;
        const lines = [];
        for (let index = 0; index < buffer.length; index += 1) lines.push(buffer.getLine(index).translateToString(true));
        return lines.join('\n');
      });
      assert.ok(!everything.includes('before-restart-42'), `the old output is gone:\n${everything}`);
      assert.ok(!everything.includes('old-line-'), 'the scrollback is gone too');
      assert.ok(!everything.includes('[ptyhub]'), 'no notice in the terminal');
      await closePage(page);
    });
  }

  // ---- 4: a loading state ----------------------------------------------------------------

  for (const device of DEVICES) {
    test(`${device}: the pages say they are loading until the instance and its sessions are there`, async () => {
      const instance = await stack.createInstance();
      const page = await newPage(device);
      // Hold the instance's REST answers until the loading state has been seen.
      let release;
      const held = new Promise((resolve) => { release = resolve; });
      await page.route(`**/api/v1/instances/${instance.id}**`, async (route) => {
        await held;
        await route.continue();
      });
      await page.route('**/api/v1/instances', async (route) => {
        await held;
        await route.continue();
      });
      await page.goto(`${stack.origin}/instances/${instance.id}?token=${stack.token}`);
      const loading = page.getByRole('status').filter({ hasText: 'Loading the instance and its sessions…' });
      await loading.waitFor();
      assert.equal(await loading.getAttribute('aria-busy'), 'true');
      assert.equal(await page.getByRole('tab').count(), 0);
      release();
      await waitForActiveConnected(page);
      assert.equal(await loading.count(), 0);

      await page.goto(`${stack.origin}/`);
      await page.locator('.instance-list').waitFor();
      await closePage(page);

      const second = await newPage(device);
      let releaseList;
      const listHeld = new Promise((resolve) => { releaseList = resolve; });
      await second.route('**/api/v1/instances', async (route) => {
        await listHeld;
        await route.continue();
      });
      await second.goto(`${stack.origin}/?token=${stack.token}`);
      await second.getByRole('status').filter({ hasText: 'Loading the instances…' }).waitFor();
      releaseList();
      await second.locator(`[data-instance-id="${instance.id}"]`).waitFor();
      await closePage(second);
    });
  }

  // ---- 5: the phone's header and tabs --------------------------------------------------------

  test('phone: a tap on the terminal shows or hides the header and tabs', async () => {
    const instance = await stack.createInstance();
    const page = await open('phone', instance.id);
    const terminal = page.locator('.pane:not([hidden]) .xterm');
    const header = page.locator('.topbar');
    const tablist = page.getByRole('tablist');
    await terminal.tap();
    await header.waitFor({ state: 'hidden' });
    await tablist.waitFor({ state: 'hidden' });
    await terminal.tap();
    await header.waitFor({ state: 'visible' });
    await tablist.waitFor({ state: 'visible' });
    await closePage(page);
  });

  test('desktop: a click on the terminal leaves the header and tabs where they are', async () => {
    const instance = await stack.createInstance();
    const page = await open('desktop', instance.id);
    for (let index = 0; index < 2; index += 1) await page.locator('.pane:not([hidden]) .xterm').click();
    await typeLine(page, 'echo clicked-$((3*3))');
    await waitForScreen(page, 'clicked-9');
    assert.equal(await page.locator('.topbar').isVisible(), true);
    assert.equal(await page.getByRole('tablist').isVisible(), true);
    await closePage(page);
  });

  test('phone fullscreen: keys and tabs hide; the bottom handle, a corner tap and a swipe from the top bring them back', async () => {
    const instance = await stack.createInstance();
    const page = await open('phone', instance.id);
    const tablist = page.getByRole('tablist');
    const keys = page.getByRole('toolbar', { name: 'Special keys' });
    const handle = page.getByRole('button', { name: 'Show tabs' });
    const terminal = page.locator('.pane:not([hidden]) .xterm');
    await tabAction('phone', page, 'Fullscreen');
    await tablist.waitFor({ state: 'hidden' });
    await keys.waitFor({ state: 'hidden' });
    await handle.waitFor();
    const box = await handle.boundingBox();
    assert.ok(Math.abs(box.x + box.width / 2 - 195) <= 2, `the handle is centred (${JSON.stringify(box)})`);
    assert.ok(box.y + box.height >= 844 - 1, `the handle is at the bottom (${JSON.stringify(box)})`);

    await handle.tap();
    await tablist.waitFor({ state: 'visible' });
    await keys.waitFor({ state: 'visible' });
    await terminal.tap();
    await tablist.waitFor({ state: 'hidden' });
    // A tap in the middle is the program's; one in a corner brings the tabs back.
    await page.touchscreen.tap(195, 400);
    assert.equal(await tablist.isVisible(), false);
    await page.touchscreen.tap(380, 834);
    await tablist.waitFor({ state: 'visible' });
    await terminal.tap();
    await tablist.waitFor({ state: 'hidden' });

    // A swipe down from the top edge, as a finger does it.
    const cdp = await page.context().newCDPSession(page);
    const point = (y) => [{ x: 195, y, id: 1 }];
    await cdp.send('Input.dispatchTouchEvent', { type: 'touchStart', touchPoints: point(4) });
    for (const y of [20, 40, 60, 80]) await cdp.send('Input.dispatchTouchEvent', { type: 'touchMove', touchPoints: point(y) });
    await cdp.send('Input.dispatchTouchEvent', { type: 'touchEnd', touchPoints: [] });
    await tablist.waitFor({ state: 'visible' });
    await tabAction('phone', page, 'Exit fullscreen');
    await keys.waitFor({ state: 'visible' });
    await closePage(page);
  });

  // ---- 6: Esc in fullscreen goes to the program ------------------------------------------------

  for (const device of DEVICES) {
    test(`${device}: in fullscreen Esc goes to the program; the shortcut or the button leaves`, async () => {
      const instance = await stack.createInstance();
      const page = await open(device, instance.id);
      const root = page.locator('.terminal-page');
      const isFullscreen = async () => (await root.getAttribute('class')).includes('fullscreen');
      await typeLine(page, 'cat -v');
      await waitForScreen(page, 'cat -v');
      await page.keyboard.press('Alt+Shift+F');
      await waitFor('fullscreen by shortcut', isFullscreen);
      await page.keyboard.press('Escape');
      await page.keyboard.press('Escape');
      await page.keyboard.press('Enter');
      await waitForScreen(page, '^[^[');
      assert.equal(await isFullscreen(), true, 'Esc did not leave fullscreen');
      await page.keyboard.press('Alt+Shift+F');
      await waitFor('fullscreen left by shortcut', async () => !(await isFullscreen()));
      await showTabs(device, page);
      await tabAction(device, page, 'Fullscreen');
      await waitFor('fullscreen by button', isFullscreen);
      if (device === 'phone') await page.getByRole('button', { name: 'Show tabs' }).tap();
      await tabAction(device, page, 'Exit fullscreen');
      await waitFor('fullscreen left by button', async () => !(await isFullscreen()));
      await closePage(page);
    });
  }

  // ---- 7: what people expect of a terminal in the browser ----------------------------------

  for (const device of DEVICES) {
    test(`${device}: WebGL draws when the browser has it, Unicode 11 widths, and clickable links`, async () => {
      const instance = await stack.createInstance();
      const page = await newPage(device);
      // Headless Chromium has no GPU: its WebGL is SwiftShader's, which the default (`auto`)
      // leaves for the DOM renderer and `on` takes.
      await page.addInitScript(() => localStorage.setItem('ptyhub.gpuAcceleration', 'on'));
      await openOn(page, instance.id);
      assert.equal(await page.locator('.pane:not([hidden])').getAttribute('data-renderer'), 'webgl');
      assert.equal(await page.locator('.pane:not([hidden]) canvas').count() > 0, true, 'a canvas draws');

      // U+231A WATCH is one column wide in Unicode 6 and two in Unicode 9 and later.
      await typeLine(page, "printf 'w\\342\\214\\232|en%s\\n' d");
      await waitForScreen(page, 'w⌚|end');
      const widths = await page.evaluate(() => {
        const terminal = document.querySelector('.pane:not([hidden])').xterm;
        const buffer = terminal.buffer.active;
        for (let row = buffer.length - 1; row >= 0; row -= 1) {
          const line = buffer.getLine(row);
          if (line.translateToString(true).startsWith('w⌚')) {
            return { watch: line.getCell(1).getWidth(), bar: line.getCell(3).getChars() };
          }
        }
        return null;
      });
      assert.deepEqual(widths, { watch: 2, bar: '|' });

      // A link in the output opens in a new tab when clicked.
      const target = `${stack.origin}/link-target-${device}`;
      await typeLine(page, `clear; echo ${target}`);
      await waitFor('the link on the first row', async () => (await screenText(page)).split('\n')[0] === target);
      const cell = await page.evaluate(() => {
        const terminal = document.querySelector('.pane:not([hidden])').xterm;
        const screen = terminal.element.querySelector('.xterm-screen').getBoundingClientRect();
        return { x: screen.left, y: screen.top, width: screen.width / terminal.cols, height: screen.height / terminal.rows };
      });
      const popup = page.context().waitForEvent('page');
      await page.mouse.move(cell.x + cell.width * 8.5, cell.y + cell.height * 0.5);
      await page.mouse.move(cell.x + cell.width * 9.5, cell.y + cell.height * 0.5);
      await page.mouse.click(cell.x + cell.width * 9.5, cell.y + cell.height * 0.5);
      const opened = await popup;
      await waitFor('the link to open', () => opened.url() === target);
      await opened.close();
      await closePage(page);
    });
  }

  test('a software rasterizer draws with the DOM renderer unless asked for WebGL, and off is never WebGL', async () => {
    const instance = await stack.createInstance();
    for (const [setting, renderer] of [[null, 'dom'], ['auto', 'dom'], ['off', 'dom'], ['on', 'webgl'], ['nonsense', 'dom']]) {
      const page = await newPage('desktop');
      if (setting !== null) await page.addInitScript((value) => localStorage.setItem('ptyhub.gpuAcceleration', value), setting);
      await openOn(page, instance.id);
      assert.equal(await page.locator('.pane:not([hidden])').getAttribute('data-renderer'), renderer, `gpuAcceleration ${setting}`);
      await typeLine(page, `echo drawn-${setting}-$((8*8))`);
      await waitForScreen(page, `drawn-${setting}-64`);
      await closePage(page);
    }
  });

  test('without WebGL the DOM renderer draws', async () => {
    const instance = await stack.createInstance();
    const noWebgl = await launchBrowser({ extraArgs: ['--disable-webgl', '--disable-webgl2'] });
    try {
      for (const device of DEVICES) {
        const page = device === 'phone'
          ? await newMobilePage(noWebgl.browser, stack.origin)
          : await newDesktopPage(noWebgl.browser);
        // Even when asked for: there is none.
        await page.addInitScript(() => localStorage.setItem('ptyhub.gpuAcceleration', 'on'));
        await openOn(page, instance.id);
        assert.equal(await page.locator('.pane:not([hidden])').getAttribute('data-renderer'), 'dom');
        await typeLine(page, `echo dom-${device}-$((8*8))`);
        await page.locator('.pane:not([hidden]) .xterm-rows').filter({ hasText: `dom-${device}-64` }).waitFor();
        await closePage(page);
      }
    } finally {
      await noWebgl.close();
    }
  });

  for (const device of DEVICES) {
    test(`${device}: search in the scrollback with Ctrl+Shift+F, next and previous`, async () => {
      const instance = await stack.createInstance();
      const page = await open(device, instance.id);
      await typeLine(page, 'i=1; while [ $i -le 80 ]; do if [ $((i % 20)) -eq 0 ]; then echo "needle-$i"; else echo "hay-$i"; fi; i=$((i+1)); done; echo done-$((5*5))');
      await waitForScreen(page, 'done-25');
      await showTabs(device, page);
      if (device === 'phone') await tabAction(device, page, 'Find in the terminal');
      else await page.keyboard.press('Control+Shift+F');
      const input = page.getByRole('searchbox', { name: 'Find in the terminal' });
      await input.waitFor();
      await input.fill('needle-');
      const count = page.locator('.search-count');
      const selection = () => page.evaluate(() => {
        const terminal = document.querySelector('.pane:not([hidden])').xterm;
        const position = terminal.getSelectionPosition();
        return { text: terminal.getSelection(), row: position?.start.y ?? null };
      });
      // Four in the output, one in the command line that printed them.
      await waitFor('the matches counted', async () => /^\d of 5$/.test(await count.textContent()));
      const first = await selection();
      assert.equal(first.text, 'needle-');
      await input.press('Enter');
      await waitFor('the next match', async () => (await selection()).row !== first.row);
      const second = await selection();
      await input.press('Shift+Enter');
      await waitFor('back to the first match', async () => (await selection()).row === first.row);
      await page.getByRole('button', { name: 'Next match' }).click();
      await waitFor('the next match by button', async () => (await selection()).row === second.row);
      await input.fill('no-such-text');
      await waitFor('no matches', async () => (await count.textContent()) === 'No matches');
      await input.press('Escape');
      await input.waitFor({ state: 'hidden' });
      // Typing goes to the terminal again.
      await typeLine(page, 'echo after-search-$((4*4))');
      await waitForScreen(page, 'after-search-16');
      await closePage(page);
    });
  }

  for (const device of DEVICES) {
    test(`${device}: a program sets the clipboard with OSC 52 once the user allows it, and cannot read it`, async () => {
      const instance = await stack.createInstance();
      const page = await newPage(device);
      await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: stack.origin });
      await openOn(page, instance.id);
      await page.evaluate(() => navigator.clipboard.writeText('the user copied this'));
      // A read request: the terminal must not answer with the user's clipboard.
      await typeLine(page, "printf '\\033]52;c;?\\007'; echo asked-$((2*2))");
      await waitForScreen(page, 'asked-4');
      await typeLine(page, "printf '\\033]52;c;%s\\007' $(printf 'osc52-%s' $((6*7)) | base64); echo sent-$((3*3))");
      await waitForScreen(page, 'sent-9');
      await press(device, page.getByRole('button', { name: 'Allow', exact: true }));
      await waitFor('the clipboard to hold what the program sent', async () => (await page.evaluate(() => navigator.clipboard.readText())) === 'osc52-42');
      const sent = connectedSockets(page).flatMap((socket) => socket.sent).filter((payload) => typeof payload !== 'string');
      const typed = sent.map((payload) => Buffer.from(payload).toString('latin1')).join('');
      assert.ok(!typed.includes('\x1b]52'), 'the read request got no answer');
      assert.ok(!typed.includes(Buffer.from('the user copied this').toString('base64')), 'the clipboard never went to the session');
      await closePage(page);
    });
  }

  for (const device of DEVICES) {
    test(`${device}: Alt+Shift+= and Alt+Shift+- change the font size, which is remembered`, async () => {
      const instance = await stack.createInstance();
      const page = await open(device, instance.id);
      const size = () => page.evaluate(() => document.querySelector('.pane:not([hidden])').xterm.options.fontSize);
      const rows = () => page.evaluate(() => document.querySelector('.pane:not([hidden])').xterm.rows);
      assert.equal(await size(), 14);
      const rowsBefore = await rows();
      await page.locator('.pane:not([hidden]) .xterm').click();
      await page.keyboard.press('Alt+Shift+Equal');
      await page.keyboard.press('Alt+Shift+Equal');
      await waitFor('a larger font', async () => (await size()) === 16);
      await waitFor('fewer rows fit', async () => (await rows()) < rowsBefore);
      await page.keyboard.press('Alt+Shift+Minus');
      await page.keyboard.press('Alt+Shift+Minus');
      await page.keyboard.press('Alt+Shift+Minus');
      await waitFor('a smaller font', async () => (await size()) === 13);
      // The keys were the page's: nothing reached the shell.
      await typeLine(page, 'echo font-$((2*8))');
      await waitForScreen(page, 'font-16');
      assert.ok(!(await screenText(page)).includes('='), 'no = was typed');
      await page.reload();
      await waitForActiveConnected(page);
      assert.equal(await size(), 13, 'remembered');
      await page.keyboard.press('Alt+Shift+Digit0');
      await waitFor('the default size', async () => (await size()) === 14);
      await closePage(page);
    });
  }

  for (const device of DEVICES) {
    test(`${device}: the theme follows the system, and a chosen one is remembered`, async () => {
      const instance = await stack.createInstance();
      const light = await open(device, instance.id, { colorScheme: 'light' });
      const theme = (page) => page.evaluate(() => ({
        page: document.documentElement.dataset.theme,
        terminal: document.querySelector('.pane:not([hidden])').xterm.options.theme.background,
      }));
      assert.deepEqual(await theme(light), { page: 'light', terminal: '#fbfbfd' });
      const dark = await open(device, instance.id, { colorScheme: 'dark' });
      assert.deepEqual(await theme(dark), { page: 'dark', terminal: '#11141a' });
      await closePage(dark);

      // The system says light; the user chooses dark, and a reload keeps it.
      const button = light.getByRole('button', { name: /^Theme: / });
      assert.equal(await button.getAttribute('aria-label'), 'Theme: follows the system');
      await press(device, button);
      await waitFor('the light theme chosen', async () => (await button.getAttribute('aria-label')) === 'Theme: light');
      await press(device, button);
      await waitFor('the dark theme chosen', async () => (await theme(light)).page === 'dark');
      assert.equal((await theme(light)).terminal, '#11141a');
      await light.reload();
      await waitForActiveConnected(light);
      assert.deepEqual(await theme(light), { page: 'dark', terminal: '#11141a' });
      await press(device, light.getByRole('button', { name: 'Theme: dark' }));
      await waitFor('back to the system\'s', async () => (await theme(light)).page === 'light');
      await closePage(light);
    });
  }

  // ---- 8: what a reload shows: the snapshot, and the marks of what happened meanwhile ---------

  for (const device of DEVICES) {
    test(`${device}: a bell that rang while the page was closed marks its tab, with the title in the tooltip`, async () => {
      const instance = await stack.createInstance();
      for (let index = 0; index < 2; index += 1) {
        const { status } = await stack.rest('POST', sessionsPath(instance.id), {});
        assert.equal(status, 201);
      }
      const [, second] = await stack.listSessions(instance.id);
      await stack.rest('POST', `${sessionsPath(instance.id)}/${second.id}/input`, {
        text: "printf '\\033]2;build-%s\\007' $((6*7)); printf 'rang\\a\\n'\n",
      });
      await waitFor('the server to record the bell', async () => (await stack.listSessions(instance.id))[1].last_bell_at !== null);
      const page = await open(device, instance.id);
      // The page opened with snapshots.
      const opened = connectedSockets(page);
      assert.ok(opened.length >= 1 && opened.every((socket) => socket.url.searchParams.get('snapshot') === '1'));
      const marked = page.getByRole('tab', { name: 'Session 2 (bell rang)', exact: true });
      await marked.waitFor();
      assert.equal(await tabNamed(page, 'Session 2').getAttribute('data-attention'), 'bell');
      await waitFor('the title in the tooltip', async () => (await tabNamed(page, 'Session 2').getAttribute('title')).startsWith('build-42\n'));
      if (device === 'phone') {
        // With the tabs hidden, the handle carries the mark.
        await page.locator('.pane:not([hidden]) .xterm').tap();
        await page.getByRole('button', { name: 'Show tabs (bell rang in another session)' }).tap();
      }
      await press(device, marked);
      await page.getByRole('tab', { name: 'Session 2', exact: true }).waitFor();
      await waitForScreen(page, 'rang');
      // Seen: a reload does not mark it again.
      await page.reload();
      await waitForActiveConnected(page);
      await page.getByRole('tab', { name: 'Session 2', exact: true }).waitFor();
      assert.equal(await tabNamed(page, 'Session 2').getAttribute('data-attention'), null);
      await closePage(page);
    });
  }

  // ---- 9: sign-in by cookie, and a read-only share link ---------------------------------------

  for (const device of DEVICES) {
    test(`${device}: the token becomes a cookie that no URL carries, and Share read-only hands out a viewer link`, async () => {
      const instance = await stack.createInstance();
      const owner = await open(device, instance.id, { permissions: ['clipboard-read', 'clipboard-write'] });
      assert.equal(new URL(owner.url()).search, '', 'the token is gone from the address bar');
      for (const socket of owner.sockets) assert.ok(!socket.url.search.includes('token'), `no token in ${socket.url}`);
      await typeLine(owner, 'echo shared-$((6*7))');
      await waitForScreen(owner, 'shared-42');
      await showTabs(device, owner);
      await press(device, owner.getByRole('button', { name: 'Share read-only' }));
      await owner.locator('.toast[data-kind="info"]').waitFor();
      const link = await owner.evaluate(() => navigator.clipboard.readText());
      assert.match(link, new RegExp(`^${stack.origin}/instances/${instance.id}\\?share=ptyhub-share-`));

      // A guest on the same kind of screen, with no cookie of the owner's.
      const guest = await newPage(device);
      await guest.goto(link);
      await guest.locator('[role="tablist"] [role="tab"]').first().waitFor();
      await waitForConnectionState(guest, 'Connected, read-only');
      assert.equal(new URL(guest.url()).search, '', 'the share token is gone from the address');
      await waitForScreen(guest, 'shared-42');
      await showTabs(device, guest);
      assert.equal(await guest.getByRole('button', { name: 'Share read-only' }).count(), 0);
      assert.ok(await guest.getByRole('button', { name: 'New session' }).isDisabled());
      for (const socket of guest.sockets) {
        assert.equal(socket.connected?.role, 'viewer', 'every socket of the guest is a viewer');
        assert.ok(!socket.url.search.includes('share'), `no share token in ${socket.url}`);
      }
      await closePage(owner);
      await closePage(guest);
    });
  }

  // ---- the README's screenshots --------------------------------------------------------------

  for (const device of DEVICES) {
    for (const scheme of ['dark', 'light']) {
      test(`screenshot: ${device}, ${scheme}`, async () => {
        const instance = await stack.createInstance({ name: 'demo-container' });
        let browser = null;
        let finished = false;
        try {
          // Headless Chromium's software WebGL (SwiftShader) draws nothing at a device pixel ratio
          // of 2, so the phone's picture is taken with the DOM renderer, which looks the same.
          browser = device === 'phone' ? await launchBrowser({ extraArgs: ['--disable-webgl', '--disable-webgl2'] }) : null;
          const page = browser
            ? await openOn(await newMobilePage(browser.browser, stack.origin, { colorScheme: scheme }), instance.id)
            : await open(device, instance.id, { colorScheme: scheme });
          const ended = () => page.evaluate(() => document.querySelector('.pane:not([hidden])').commandMarks.marks.filter((mark) => mark.outcome !== 'running').length);
          // Each line is typed at a prompt, as a person would: a POSIX sh's command line is read
          // from the screen when it is entered, so a line typed ahead of its prompt is no command.
          await waitForScreen(page, '$');
          await typeLine(page, "printf '\\033[1;32mptyhub\\033[0m: terminals that outlive the tab\\n'; ls -l /usr | head -5");
          await waitForScreen(page, 'outlive the tab');
          await waitFor('the first command marked', async () => await ended() === 1);
          // A command that fails: the picture shows both colours of the commands' marks.
          await typeLine(page, 'ls /no-such-directory');
          await waitFor('two commands marked', async () => await ended() === 2);
          await showTabs(device, page);
          for (let index = 0; index < 2; index += 1) {
            await openNewSession(page, (button) => press(device, button));
          }
          await press(device, page.getByRole('tab', { name: 'Session 1' }));
          await waitForScreen(page, 'outlive the tab');
          await saveScreenshot(page, `web-${device === 'phone' ? 'mobile' : 'desktop'}-${scheme}.png`);
          await closePage(page);
          finished = true;
        } finally {
          await browser?.close();
          // The next screenshot's instance has the same name, whether or not this one passed;
          // a failed deletion fails a test that passed (one that failed keeps its own error).
          const deleted = await stack.rest('DELETE', `/api/v1/instances/${instance.id}`);
          if (finished) assert.equal(deleted.status, 200, `deleting ${instance.id}`);
        }
      });
    }
  }
});
