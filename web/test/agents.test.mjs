// The page for phones and for people running agents, in Debian's Chromium against a real stack:
// the touch screen's key bar (Shift+Tab, latching Ctrl, receipts, a failure when the server is
// stalled), a tap that toggles the header on a tablet, a finger's scroll in a full-screen
// program, the tabs' terminal state and the mark of a background session that waits for input,
// the commands' marks in the scrollback (colours, jumps, the menu), only the shown tab taking
// control on load, the browser's own keys, `+` last on a phone's tab strip, and Restart over the
// WebSocket. Desktop is 1280x720, the phone 390x844 with touch, the tablet 1024x768 with touch.

import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import {
  closePage, launchBrowser, missingRequirement, newDesktopPage, newMobilePage, newTabletPage,
  screenText, startStack, tabNamed, tabState, typeLine, waitFor, waitForActiveConnected,
  waitForConnectionState, waitForScreen, webRoot,
} from './support.mjs';

const skip = missingRequirement();
if (skip) console.log(`# skipping the browser tests: ${skip}`);

/** The fixture agent: progress, then a question with a notification (see the script). */
const AGENT = join(webRoot, 'test', 'fixtures', 'agent.sh');

/** The key bar's receipt wait (keyboard.js RECEIPT_TIMEOUT_MS) and some room. */
const RECEIPT_FAILURE_SEEN_MS = 8000;

describe('web page: phones and agents', { skip: skip ?? false }, () => {
  let stack;
  let chromium;
  let scratch;

  before(async () => {
    stack = await startStack();
    chromium = await launchBrowser();
    scratch = await mkdtemp(join(tmpdir(), 'ptyhub-agents-test-'));
  });

  after(async () => {
    await chromium?.close();
    await stack?.stop();
    if (scratch) await rm(scratch, { recursive: true, force: true });
  });

  /** A fresh page of the given kind, not yet at any address. */
  async function newPage(device, options = {}) {
    if (device === 'phone') return newMobilePage(chromium.browser, stack.origin, options);
    if (device === 'tablet') return newTabletPage(chromium.browser, stack.origin, options);
    const page = await newDesktopPage(chromium.browser, options);
    await page.context().grantPermissions(['clipboard-read', 'clipboard-write'], { origin: stack.origin });
    return page;
  }

  /** Opens an instance's terminal page on `page` and waits for the shown tab to connect. */
  async function openOn(page, instanceId) {
    await page.goto(`${stack.origin}/instances/${instanceId}?token=${stack.token}`);
    await page.locator('[role="tablist"] [role="tab"]').first().waitFor();
    await waitForActiveConnected(page);
    return page;
  }

  async function open(device, instanceId, options = {}) {
    return openOn(await newPage(device, options), instanceId);
  }

  /** Taps (touch screens) or clicks (desktop). */
  async function press(device, locator) {
    if (device === 'desktop') await locator.click();
    else await locator.tap();
  }

  /** On a phone whose typing hid the tab strip, brings it back with the handle. */
  async function showTabs(page) {
    const handle = page.locator('.chrome-handle:not([hidden])');
    if (await handle.isVisible()) await handle.tap();
  }

  /** Presses one of the tab's actions: a button on wide screens, an item of the menu on a phone. */
  async function tabAction(device, page, name) {
    if (device === 'phone') {
      await showTabs(page);
      await page.getByRole('button', { name: 'Session actions' }).tap();
    }
    await press(device, page.getByRole('button', { name, exact: true }));
  }

  const sessionsPath = (instanceId) => `/api/v1/instances/${instanceId}/terminal/sessions`;

  /** The input frames the page sent, decoded: binary frames as text, `input` frames' data. */
  function sentInput(page) {
    return page.sockets.flatMap((socket) => socket.sent).map((payload) => {
      if (typeof payload !== 'string') return Buffer.from(payload).toString('latin1');
      const message = JSON.parse(payload);
      return message.type === 'input' ? message.data : '';
    }).join('');
  }

  // ---- the key bar -------------------------------------------------------------------------------

  for (const device of ['phone', 'tablet']) {
    test(`${device}: Shift+Tab reaches the program as ESC [ Z, a latched Ctrl with c sends 0x03, and each key shows its receipt`, async () => {
      const instance = await stack.createInstance();
      const page = await open(device, instance.id);
      const keys = page.getByRole('toolbar', { name: 'Special keys' });
      await keys.waitFor();
      const key = (name) => keys.getByRole('button', { name, exact: true });

      await typeLine(page, 'cat -v');
      await waitForScreen(page, 'cat -v');
      await key('Shift+Tab').tap();
      await waitFor('the Shift+Tab receipt', async () => (await key('Shift+Tab').getAttribute('data-receipt')) === 'delivered');
      await page.keyboard.press('Enter');
      await waitForScreen(page, '^[[Z');
      assert.ok(sentInput(page).includes('\x1b[Z'), 'ESC [ Z was sent');

      // Ctrl latches for one key typed on the keyboard: c becomes 0x03, which ends cat.
      await key('Ctrl').tap();
      assert.equal(await key('Ctrl').getAttribute('aria-pressed'), 'true');
      await page.keyboard.type('c');
      await waitFor('the Ctrl+C receipt', async () => (await key('Ctrl').getAttribute('data-receipt')) === 'delivered');
      assert.equal(await key('Ctrl').getAttribute('aria-pressed'), 'false', 'Ctrl let go after one key');
      assert.ok(sentInput(page).includes('\x03'), '0x03 was sent');
      await typeLine(page, 'echo after-ctrl-c-$((6*7))');
      // The prompt is back: the signal ended cat.
      await waitForScreen(page, 'after-ctrl-c-42');
      await page.getByRole('status', { name: 'Key receipts' }).filter({ hasText: 'Ctrl+c delivered' }).waitFor({ state: 'attached' });

      // A double tap locks Ctrl for every key until the next tap.
      await key('Ctrl').tap();
      await key('Ctrl').tap();
      assert.equal(await key('Ctrl').getAttribute('data-latch'), 'locked');
      await key('Up').tap();
      assert.equal(await key('Ctrl').getAttribute('data-latch'), 'locked', 'a locked Ctrl stays');
      await key('Ctrl').tap();
      assert.equal(await key('Ctrl').getAttribute('aria-pressed'), 'false');
      assert.ok(sentInput(page).includes('\x1b[1;5A'), 'Ctrl+Up was sent as CSI 1;5 A');

      // Alt latches too: Esc before the next key typed.
      await key('Alt').tap();
      await page.keyboard.type('b');
      await waitFor('the Alt+b receipt', async () => (await key('Alt').getAttribute('data-receipt')) === 'delivered');
      assert.ok(sentInput(page).includes('\x1bb'), 'Alt+b was sent as ESC b');
      // Paste types the clipboard's text, with its own receipt.
      await page.keyboard.press('Control+U');
      await page.evaluate(() => navigator.clipboard.writeText('echo pasted-$((3*3))'));
      await key('Paste').tap();
      await waitFor('the Paste receipt', async () => (await key('Paste').getAttribute('data-receipt')) === 'delivered');
      await page.keyboard.press('Enter');
      await waitForScreen(page, 'pasted-9');
      await closePage(page);
    });
  }

  test('phone: with the server stalled a key shows a failure, and its receipt when it comes after all', async () => {
    const instance = await stack.createInstance();
    const page = await open('phone', instance.id);
    const esc = page.getByRole('toolbar', { name: 'Special keys' }).getByRole('button', { name: 'Escape', exact: true });
    stack.pause();
    try {
      await esc.tap();
      assert.equal(await esc.getAttribute('data-receipt'), 'sent');
      await page.locator('[aria-label="Escape"][data-receipt="failed"]').waitFor({ timeout: RECEIPT_FAILURE_SEEN_MS });
      await page.getByRole('status', { name: 'Key receipts' }).filter({ hasText: 'Escape: no receipt from the server' }).waitFor({ state: 'attached' });
    } finally {
      stack.resume();
    }
    await page.locator('[aria-label="Escape"][data-receipt="delivered"]').waitFor();
    await closePage(page);
  });

  test('tablet: a tap on the terminal hides and shows the header and tabs on a 1024x768 touch screen', async () => {
    const instance = await stack.createInstance();
    const page = await open('tablet', instance.id);
    const terminal = page.locator('.pane:not([hidden]) .xterm');
    await terminal.tap();
    await page.locator('.topbar').waitFor({ state: 'hidden' });
    await page.getByRole('tablist').waitFor({ state: 'hidden' });
    await terminal.tap();
    await page.locator('.topbar').waitFor({ state: 'visible' });
    await page.getByRole('tablist').waitFor({ state: 'visible' });
    // The key bar is there too, at this width.
    assert.equal(await page.getByRole('toolbar', { name: 'Special keys' }).isVisible(), true);
    await closePage(page);
  });

  test('phone: a finger scrolling in a full-screen program sends what the wheel sends', async () => {
    const instance = await stack.createInstance();
    const page = await open('phone', instance.id);
    await typeLine(page, "printf '\\033[?1049h'; stty -icanon; cat -v");
    await waitFor('the alternate screen', () => page.evaluate(() => document.querySelector('.pane:not([hidden])').xterm.buffer.active.type === 'alternate'));
    const cdp = await page.context().newCDPSession(page);
    const at = (y) => [{ x: 195, y, id: 1 }];
    await cdp.send('Input.dispatchTouchEvent', { type: 'touchStart', touchPoints: at(500) });
    for (let y = 480; y >= 300; y -= 20) await cdp.send('Input.dispatchTouchEvent', { type: 'touchMove', touchPoints: at(y) });
    await cdp.send('Input.dispatchTouchEvent', { type: 'touchEnd', touchPoints: [] });
    // A finger moving up scrolls down: xterm sends Down for the wheel outside mouse mode.
    await waitForScreen(page, '^[[B');
    assert.ok(!(await screenText(page)).includes('^[[A'), 'nothing scrolled up');
    await closePage(page);
  });

  // ---- attention -------------------------------------------------------------------------------

  for (const device of ['desktop', 'phone']) {
    test(`${device}: a background session whose agent asks for input marks its tab within 1 s, with the count in the title`, async (context) => {
      const instance = await stack.createInstance();
      const page = await open(device, instance.id);
      const { status, body: second } = await stack.rest('POST', sessionsPath(instance.id), {});
      assert.equal(status, 201);
      const backgroundTab = page.locator(`[role="tab"][data-session-id="${second.id}"]`);
      await backgroundTab.waitFor({ state: 'attached' });
      const stamp = join(scratch, `stamp-${second.id}`);
      await stack.rest('POST', `${sessionsPath(instance.id)}/${second.id}/input`, { text: `sh ${AGENT} ${stamp}\n` });

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
      await stack.rest('POST', `${sessionsPath(instance.id)}/${second.id}/input`, { text: 'go\n' });
      await page.getByRole('tab', { name: 'Session 2 (waiting for input)', exact: true }).waitFor({ state: 'attached' });
      const asked = Number((await readFile(stamp, 'utf8')).trim());
      const marked = await page.evaluate(() => window.markedAt);
      context.diagnostic(`the tab was marked ${marked - asked} ms after the agent asked`);
      assert.ok(marked - asked <= 1000, `the tab was marked ${marked - asked} ms after the agent asked`);
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
    const instance = await stack.createInstance();
    const page = await newPage('desktop');
    await page.context().grantPermissions(['notifications'], { origin: stack.origin });
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
    await openOn(page, instance.id);
    const bell = page.getByRole('button', { name: 'Notify when a session waits for input' });
    assert.equal(await bell.getAttribute('aria-pressed'), 'false', 'off until asked for');
    const { body: second } = await stack.rest('POST', sessionsPath(instance.id), {});
    await page.locator(`[role="tab"][data-session-id="${second.id}"]`).waitFor({ state: 'attached' });
    const stamp = join(scratch, `stamp-notify-${second.id}`);
    await stack.rest('POST', `${sessionsPath(instance.id)}/${second.id}/input`, { text: `sh ${AGENT} ${stamp}\n` });
    await waitFor('the agent at work', async () => (await tabState(page, 'Session 2')).includes('Running'));

    await bell.click();
    await waitFor('notifications on', async () => (await bell.getAttribute('aria-pressed')) === 'true');
    await stack.rest('POST', `${sessionsPath(instance.id)}/${second.id}/input`, { text: 'go\n' });
    await waitFor('a notification', () => page.evaluate(() => window.raised.length === 1));
    const raised = await page.evaluate(() => window.raised.map(({ title, body }) => ({ title, body })));
    assert.deepEqual(raised, [{ title: 'Session 2 is waiting for input', body: 'Allow the edit to main.rs?' }]);
    await page.evaluate(() => window.raised[0].notification.onclick());
    await waitFor('its tab shown', async () => (await tabNamed(page, 'Session 2').getAttribute('aria-selected')) === 'true');
    await waitForScreen(page, 'allow the edit to main.rs?');
    await closePage(page);
  });

  // ---- commands in the scrollback ---------------------------------------------------------------

  for (const device of ['desktop', 'phone']) {
    test(`${device}: commands get marks by exit code, the jump keys move between them, and the menu copies a command's output`, async () => {
      const instance = await stack.createInstance();
      const page = await open(device, instance.id);
      const marks = () => page.evaluate(() => document.querySelector('.pane:not([hidden])').commandMarks);
      // One command at a time, as a person types them: each after the last one's prompt came back
      // (a POSIX sh's command line is read from the screen when it is entered).
      const lines = ['true', 'false', 'seq 1 60', "printf 'out-1\\nout-2\\n'"];
      for (const [index, line] of lines.entries()) {
        await typeLine(page, line);
        await waitFor(`the mark of ${line}`, async () => (await marks()).marks.filter((mark) => mark.outcome !== 'running').length === index + 1);
      }
      let lastSeen = null;
      await waitFor('four marks, all ended', async () => {
        lastSeen = await marks();
        return lastSeen.marks.length === 4 && lastSeen.marks.every((mark) => mark.outcome !== 'running');
      }).catch(async (error) => {
        throw new Error(`${error.message}; the marks: ${JSON.stringify(lastSeen)}; the screen:\n${await screenText(page)}`, { cause: error });
      });
      const { marks: drawn } = await marks();
      assert.deepEqual(drawn.map((mark) => [mark.command, mark.outcome]), [
        ['true', 'succeeded'], ['false', 'failed'], ['seq 1 60', 'succeeded'], ["printf 'out-1\\nout-2\\n'", 'succeeded'],
      ]);
      const colour = (command) => page.locator(`.pane:not([hidden]) .command-mark[aria-label^="Command: ${command} "]`)
        .evaluate((element) => getComputedStyle(element).backgroundColor);
      const [green, red] = [await colour('true'), await colour('false')];
      assert.notEqual(green, red, 'true and false have marks of different colours');
      const trueMark = page.locator('.pane:not([hidden]) .command-mark[aria-label^="Command: true"]');
      assert.match(await trueMark.getAttribute('title'), /^true · exit 0 · \d+ ms$/);

      // Alt+Shift+Up and Down jump between the commands, the view following.
      const view = () => page.evaluate(() => {
        const terminal = document.querySelector('.pane:not([hidden])').xterm;
        return { top: terminal.buffer.active.viewportY, bottom: terminal.buffer.active.baseY };
      });
      const jump = async (key, command) => {
        await page.keyboard.press(key);
        const { current } = await waitFor(`the jump to ${command}`, async () => {
          const seen = await marks();
          return drawn.find((mark) => mark.id === seen.current)?.command === command ? seen : false;
        });
        const mark = drawn.find((candidate) => candidate.id === current);
        const { top, bottom } = await view();
        assert.equal(top, Math.min(mark.line, bottom), `the view starts at ${command}'s prompt`);
      };
      await page.locator('.pane:not([hidden]) .xterm').click();
      await jump('Alt+Shift+ArrowUp', "printf 'out-1\\nout-2\\n'");
      await jump('Alt+Shift+ArrowUp', 'seq 1 60');
      await jump('Alt+Shift+ArrowUp', 'false');
      await jump('Alt+Shift+ArrowUp', 'true');
      await jump('Alt+Shift+ArrowDown', 'false');

      // The menu on the last mark copies exactly the command's output, and the command itself.
      await page.keyboard.press('Alt+Shift+ArrowDown');
      await page.keyboard.press('Alt+Shift+ArrowDown');
      const printfMark = page.locator('.pane:not([hidden]) .command-mark[aria-label^="Command: printf"]');
      await press(device, printfMark);
      await press(device, page.getByRole('menuitem', { name: 'Copy output' }));
      await waitFor('the output in the clipboard', async () => (await page.evaluate(() => navigator.clipboard.readText())) === 'out-1\nout-2\n');
      await press(device, printfMark);
      await press(device, page.getByRole('menuitem', { name: 'Copy command' }));
      await waitFor('the command in the clipboard', async () => (await page.evaluate(() => navigator.clipboard.readText())) === "printf 'out-1\\nout-2\\n'");
      // Run again types it at the prompt: a fifth mark, the output twice.
      await press(device, printfMark);
      await press(device, page.getByRole('menuitem', { name: 'Run again' }));
      await waitFor('a fifth mark', async () => (await marks()).marks.length === 5);
      await waitFor('the output twice', async () => (await screenText(page)).split('out-2').length - 1 >= 2);
      await closePage(page);
    });
  }

  // ---- only the shown tab takes control on load --------------------------------------------------

  test('reload with three sessions: the other two sessions\' controllers keep control until their tabs are shown', async () => {
    const instance = await stack.createInstance();
    const sessions = [];
    for (let index = 0; index < 3; index += 1) {
      const { status, body } = await stack.rest('POST', sessionsPath(instance.id), {});
      assert.equal(status, 201);
      sessions.push(body);
    }
    // Three controllers elsewhere (a laptop, a script): sockets in another browser context.
    const elsewhere = await newDesktopPage(chromium.browser);
    await elsewhere.goto(`${stack.origin}/healthz`);
    await elsewhere.evaluate(({ instanceId, ids, token }) => {
      window.closes = {};
      window.connected = {};
      for (const id of ids) {
        const socket = new WebSocket(`ws://${location.host}/ws/tool-instances/${instanceId}/terminal/${id}?token=${token}`);
        socket.onmessage = (event) => {
          if (typeof event.data === 'string' && JSON.parse(event.data).status === 'connected') window.connected[id] = true;
        };
        socket.onclose = (event) => { window.closes[id] = event.code; };
      }
    }, { instanceId: instance.id, ids: sessions.map((session) => session.id), token: stack.token });
    await waitFor('three controllers', () => elsewhere.evaluate(() => Object.keys(window.connected).length === 3));
    const closes = () => elsewhere.evaluate(() => window.closes);

    const page = await open('desktop', instance.id);
    await waitFor('the shown session taken over', async () => (await closes())[sessions[0].id] === 4009);
    await page.reload();
    await waitForActiveConnected(page);
    for (const name of ['Session 2', 'Session 3']) {
      assert.match(await tabState(page, name), /^Not connected yet: attaches when shown\b/, `${name} says it attaches when shown`);
    }
    const attached = new Set(page.sockets.map((socket) => socket.url.pathname.split('/').at(-1)));
    assert.deepEqual([...attached], [sessions[0].id], 'the page opened a socket for the shown session only');
    assert.deepEqual(Object.keys(await closes()), [sessions[0].id], 'the other controllers still have their sessions');

    await tabNamed(page, 'Session 2').click();
    await waitForActiveConnected(page);
    await waitFor('the second session taken when shown', async () => (await closes())[sessions[1].id] === 4009);
    assert.equal((await closes())[sessions[2].id], undefined, 'the third controller keeps its session');
    await closePage(page);
    await closePage(elsewhere);
  });

  // ---- the browser's own keys ----------------------------------------------------------------

  test('desktop: Ctrl+= / Ctrl+- / Ctrl+0 stay the browser\'s zoom; Alt+Shift+= / - / 0 set the font size', async () => {
    const instance = await stack.createInstance();
    const page = await open('desktop', instance.id);
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

  // ---- the tab strip on a phone, and Restart ------------------------------------------------------

  test('phone: + is the rightmost item of the tab strip; Restart, Find and Fullscreen are in its menu', async () => {
    const instance = await stack.createInstance();
    const page = await open('phone', instance.id);
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
      const instance = await stack.createInstance();
      const page = await open(device, instance.id);
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
