// What the browser tests share: a real ptyhub stack (`ptyhub up`), Debian's Chromium driven by
// playwright-core, a loopback TCP relay that can drop every connection (a network outage between
// the browser and the gateway), and small helpers that wait for conditions on the page.

import { spawn } from 'node:child_process';
import { appendFileSync, existsSync } from 'node:fs';
import { copyFile, mkdir, mkdtemp, rm } from 'node:fs/promises';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

export const webRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..');
export const repositoryRoot = resolve(webRoot, '..');

/** Generous: these are liveness limits, not speed expectations. */
export const PATIENCE_MS = 30_000;

const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-quic',
  '--no-first-run',
  '--disable-component-update',
  '--disable-sync',
];

export function inCi() {
  return process.env.CI === 'true' || process.env.CI === '1';
}

/**
 * Why the tests cannot run here (no Chromium, no ptyhub binary, no built page), or null. Under
 * CI=true a missing requirement throws instead, so the run fails rather than skipping; elsewhere
 * the skip is also recorded in the run's list of skips (see `recordSkip`).
 */
export function missingRequirement() {
  const problems = [];
  const chromiumPath = chromiumExecutable();
  if (!existsSync(chromiumPath)) problems.push(`no Chromium at ${chromiumPath} (set PTYHUB_TEST_CHROMIUM or apt-get install chromium)`);
  const binary = process.env.PTYHUB_BINARY;
  if (!binary) problems.push('PTYHUB_BINARY is not set (the ptyhub binary; `cargo xtask test` sets it)');
  else if (!existsSync(binary)) problems.push(`no ptyhub binary at ${binary}`);
  if (!existsSync(join(webDirectory(), 'index.html'))) problems.push(`the page is not built in ${webDirectory()} (npm run build)`);
  if (problems.length === 0) return null;
  const reason = problems.join('; ');
  if (inCi()) throw new Error(`browser tests cannot run under CI=true: ${reason}`);
  recordSkip(`browser tests ${basename(process.argv[1] ?? 'unknown file')}`, reason);
  return reason;
}

/**
 * Prints `SKIP: <what>: <why>` and appends it to the file `cargo xtask test` names in
 * PTYHUB_TEST_SKIP_LOG, which the run prints at its end, so that a skipped file is never counted as
 * passed without a word. One write per line: test files run at once do not interleave.
 */
function recordSkip(what, why) {
  const line = `SKIP: ${what}: ${why}`;
  console.error(line);
  const log = process.env.PTYHUB_TEST_SKIP_LOG;
  if (!log) return;
  try {
    appendFileSync(log, `${line}\n`);
  } catch (error) {
    console.error(`cannot record the skip in ${log}: ${error}`);
  }
}

export function chromiumExecutable() {
  return process.env.PTYHUB_TEST_CHROMIUM || '/usr/bin/chromium';
}

export function webDirectory() {
  return process.env.PTYHUB_WEB_DIR || join(webRoot, 'dist');
}

// ---- the stack ------------------------------------------------------------------------------

/**
 * Starts `ptyhub up` on a free loopback port with a fresh data directory and the built page,
 * and reads the sign-in URL it prints.
 */
export async function startStack() {
  const dataDir = await mkdtemp(join(tmpdir(), 'ptyhub-web-test-'));
  const child = spawn(process.env.PTYHUB_BINARY, [
    'up', '--listen', '127.0.0.1:0', '--data-dir', dataDir, '--web-dir', webDirectory(),
  ], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env } });
  let output = '';
  const found = new Promise((resolvePromise, reject) => {
    const pattern = /(http:\/\/127\.0\.0\.1:\d+)\/\?token=([A-Za-z0-9._~+/=-]+)/;
    const look = (chunk) => {
      output += chunk.toString();
      if (process.env.TEST_LOG === '1') process.stderr.write(chunk);
      const match = pattern.exec(output);
      if (match) resolvePromise({ origin: match[1], token: match[2] });
    };
    child.stdout.on('data', look);
    child.stderr.on('data', look);
    child.on('exit', (code, signal) => reject(new Error(`ptyhub up ended (${code ?? signal}) before printing its URL:\n${output}`)));
    setTimeout(() => reject(new Error(`ptyhub up printed no URL within 120 s:\n${output}`)), 120_000).unref();
  });
  let address;
  try {
    address = await found;
  } catch (error) {
    child.kill('SIGKILL');
    await rm(dataDir, { recursive: true, force: true });
    throw error;
  }
  const stack = {
    ...address,
    dataDir,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((resolvePromise) => child.once('exit', resolvePromise));
        child.kill('SIGTERM');
        const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
        await exited;
        clearTimeout(timer);
      }
      await rm(dataDir, { recursive: true, force: true });
    },
    /**
     * Stops the whole `ptyhub up` process (SIGSTOP): its broker writes nothing to a PTY and
     * answers nothing, while every connection to it stays open; `resume()` goes on (SIGCONT).
     */
    pause() {
      child.kill('SIGSTOP');
    },
    resume() {
      child.kill('SIGCONT');
    },
    /** A REST call as a program makes it, with the bearer token. */
    async rest(method, path, body) {
      const response = await fetch(`${address.origin}${path}`, {
        method,
        headers: { Authorization: `Bearer ${address.token}`, ...(body ? { 'Content-Type': 'application/json' } : {}) },
        body: body ? JSON.stringify(body) : undefined,
      });
      const text = await response.text();
      return { status: response.status, body: text ? JSON.parse(text) : null };
    },
    /**
     * Starts the real `ptyhub` CLI against this stack, as a person or a script runs it: the
     * server and token in its environment, stdin and stdout pipes (`attach` needs no terminal:
     * what comes on stdin is typed, detach keys included). See `CliProcess`.
     */
    startCli(args) {
      return startCliProcess(address, dataDir, args);
    },
    /** Runs a `ptyhub` command to its end: `{code, stdout, stderr}`. */
    async runCli(args) {
      const cli = startCliProcess(address, dataDir, args);
      cli.endInput();
      const { code } = await cli.exited;
      return { code, stdout: cli.stdout, stderr: cli.stderr };
    },
    /** Registers a fresh instance running `sh` on the broker's own host. */
    async createInstance({ maxSessions = 5, name } = {}) {
      const { status, body } = await stack.rest('POST', '/api/v1/instances', {
        name: name ?? `web-test-${Math.random().toString(36).slice(2, 8)}`,
        target: { local: {} },
        command: ['/bin/sh'],
        env: { PS1: '$ ', HOME: dataDir, ENV: '' },
        cwd: dataDir,
        max_sessions: maxSessions,
      });
      if (status !== 201) throw new Error(`registering an instance failed: ${status} ${JSON.stringify(body)}`);
      return body;
    },
    /** The session's screen as the server's terminal emulator holds it (`format=text`). */
    async screen(instanceId, sessionId) {
      const { status, body } = await stack.rest('GET', `/api/v1/instances/${instanceId}/terminal/sessions/${sessionId}/screen?format=text`);
      if (status !== 200) throw new Error(`reading the screen failed: ${status} ${JSON.stringify(body)}`);
      return body;
    },
    async listSessions(instanceId) {
      const { status, body } = await stack.rest('GET', `/api/v1/instances/${instanceId}/terminal/sessions`);
      if (status !== 200) throw new Error(`listing sessions failed: ${status} ${JSON.stringify(body)}`);
      return body.sessions;
    },
  };
  return stack;
}

/**
 * @typedef {object} CliProcess A running `ptyhub` command.
 * @property {import('node:child_process').ChildProcess} child
 * @property {string} stdout what it wrote to stdout so far
 * @property {string} stderr what it wrote to stderr so far
 * @property {Promise<number>} firstOutput when (`Date.now()`) its first stdout bytes came: for an
 *   `attach`, that it is attached (it opens with the screen's snapshot)
 * @property {Promise<{code: number | null, signal: string | null}>} exited
 * @property {(text: string) => void} write types `text` on its stdin
 * @property {() => void} endInput closes its stdin
 * @property {() => Promise<void>} stop ends it (SIGTERM) unless it ended already, and waits
 */

/** Spawns `PTYHUB_BINARY args` on the stack at `address`, in `cwd`; returns a `CliProcess`. */
function startCliProcess(address, cwd, args) {
  const env = { ...process.env, PTYHUB_SERVER: address.origin, PTYHUB_TOKEN: address.token };
  // The caller's own settings of these would change whom the CLI asks, or its detach keys.
  for (const name of ['PTYHUB_TOKEN_FILE', 'PTYHUB_CA_CERT', 'PTYHUB_DETACH_KEYS']) delete env[name];
  const child = spawn(process.env.PTYHUB_BINARY, args, { cwd, env, stdio: ['pipe', 'pipe', 'pipe'] });
  const cli = {
    child,
    stdout: '',
    stderr: '',
    firstOutput: new Promise((resolvePromise, reject) => {
      child.stdout.once('data', () => resolvePromise(Date.now()));
      child.once('close', (code, signal) => reject(new Error(
        `ptyhub ${args.join(' ')} ended (${code ?? signal}) before any output: ${cli.stderr}`)));
    }),
    // `close`, not `exit`: by then stdout and stderr are read to their ends.
    exited: new Promise((resolvePromise) => child.once('close', (code, signal) => resolvePromise({ code, signal }))),
    write(text) {
      child.stdin.write(text);
    },
    endInput() {
      child.stdin.end();
    },
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await cli.exited;
    },
  };
  child.stdout.on('data', (chunk) => {
    cli.stdout += chunk.toString();
  });
  child.stderr.on('data', (chunk) => {
    cli.stderr += chunk.toString();
    if (process.env.TEST_LOG === '1') process.stderr.write(`[ptyhub ${args[0]}] ${chunk}`);
  });
  // A CLI that ended before reading what was typed must not end the test with EPIPE; a
  // command whose output nobody waits for must not end it with an unhandled rejection.
  child.stdin.on('error', () => {});
  cli.firstOutput.catch(() => {});
  return cli;
}

// ---- a relay that can cut the network, or slow it down ------------------------------------------

/**
 * A TCP relay on 127.0.0.1 in front of the gateway. `cut()` closes the listener and destroys
 * every connection (the browser sees its WebSockets drop and its reconnects refused); `restore()`
 * listens again on the same port.
 *
 * With `delayMs`, every chunk (and the end of a stream) is passed on that long after it came, in
 * each direction and in order: a link with a round trip of twice `delayMs`. Then `hold()` keeps
 * what the gateway sends from reaching the browser until `release()`, which passes it all on at
 * once: what the page shows meanwhile cannot be the server's echo.
 */
export async function startRelay(targetOrigin, { delayMs = null } = {}) {
  const target = new URL(targetOrigin);
  const sockets = new Set();
  let server = null;
  let port = 0;
  const listen = () => new Promise((resolvePromise, reject) => {
    server = net.createServer((client) => {
      const upstream = net.connect(Number(target.port), target.hostname);
      sockets.add(client);
      sockets.add(upstream);
      if (delayMs === null) {
        client.pipe(upstream);
        upstream.pipe(client);
      } else {
        forwardLater(client, upstream, false);
        forwardLater(upstream, client, true);
      }
      const drop = () => {
        client.destroy();
        upstream.destroy();
        sockets.delete(client);
        sockets.delete(upstream);
      };
      client.on('error', drop);
      upstream.on('error', drop);
      // A slowed link closes after what it still carries.
      const closed = delayMs === null ? drop : () => setTimeout(drop, delayMs);
      client.on('close', closed);
      upstream.on('close', closed);
    });
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      port = server.address().port;
      resolvePromise();
    });
  });
  let held = null;
  /** Passes `from`'s chunks (null: its end) on to `to` after `delayMs`, or into `held`. */
  const forwardLater = (from, to, towardBrowser) => {
    const pass = (chunk) => {
      if (to.destroyed) return;
      if (chunk === null) to.end();
      else to.write(chunk);
    };
    const later = (chunk) => setTimeout(() => {
      if (towardBrowser && held !== null) held.push(() => pass(chunk));
      else pass(chunk);
    }, delayMs);
    from.on('data', (chunk) => later(chunk));
    from.on('end', () => later(null));
  };
  await listen();
  return {
    get origin() {
      return `http://127.0.0.1:${port}`;
    },
    hold() {
      held ??= [];
    },
    release() {
      const queued = held ?? [];
      held = null;
      for (const pass of queued) pass();
    },
    async cut() {
      const closed = new Promise((resolvePromise) => server.close(resolvePromise));
      for (const socket of sockets) socket.destroy();
      sockets.clear();
      await closed;
    },
    async restore() {
      await listen();
    },
    async stop() {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolvePromise) => server.close(() => resolvePromise()));
    },
  };
}

// ---- the browser ------------------------------------------------------------------------------

export async function launchBrowser({ extraArgs = [] } = {}) {
  // playwright-core gives every launch a fresh temporary profile (user data dir) and removes it
  // on close; each test page gets its own context (its own sessionStorage, like a separate
  // browser tab).
  const browser = await chromium.launch({
    executablePath: chromiumExecutable(),
    headless: true,
    args: [...CHROMIUM_ARGS, ...extraArgs],
  });
  return {
    browser,
    async close() {
      await browser.close();
    },
  };
}

export async function newDesktopPage(browser, options = {}) {
  const context = await browser.newContext({ viewport: { width: 1280, height: 720 }, ...options });
  const page = await context.newPage();
  watchPage(page);
  return page;
}

export async function newMobilePage(browser, origin, options = {}) {
  const context = await browser.newContext({
    ...options,
    viewport: { width: 390, height: 844 },
    deviceScaleFactor: 2,
    isMobile: true,
    hasTouch: true,
    userAgent: 'Mozilla/5.0 (Linux; Android 14; Pixel 8) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/156.0 Mobile Safari/537.36',
  });
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin });
  const page = await context.newPage();
  watchPage(page);
  return page;
}

/** A tablet: a 1024x768 touch screen, wider than a phone, that is not a phone. */
export async function newTabletPage(browser, origin, options = {}) {
  const context = await browser.newContext({ ...options, viewport: { width: 1024, height: 768 }, hasTouch: true });
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin });
  const page = await context.newPage();
  watchPage(page);
  return page;
}

/**
 * Records the page's WebSockets (`page.sockets`: the URL, the `connected` status frame once it
 * came, the `gap` and `snapshot` frames, the frames the page sent) and its script errors (`page.errors`, which
 * `closePage` requires to be empty).
 */
function watchPage(page) {
  page.sockets = [];
  page.errors = [];
  page.on('websocket', (socket) => {
    const record = { url: new URL(socket.url()), connected: null, gaps: [], snapshots: [], sent: [] };
    page.sockets.push(record);
    socket.on('framereceived', ({ payload }) => {
      const message = jsonFrame(payload);
      if (message?.type === 'status' && message.status === 'connected' && !record.connected) record.connected = message;
      if (message?.type === 'gap') record.gaps.push(message);
      if (message?.type === 'snapshot') record.snapshots.push(message);
    });
    socket.on('framesent', ({ payload }) => record.sent.push(payload));
  });
  page.on('pageerror', (error) => page.errors.push(error));
  if (process.env.TEST_LOG === '1') page.on('console', (message) => console.error(`[page] ${message.text()}`));
}

/** A text frame's JSON object, or null for binary frames (terminal bytes). */
function jsonFrame(payload) {
  if (typeof payload !== 'string') return null;
  try {
    return JSON.parse(payload);
  } catch {
    return null;
  }
}

/** The sockets that reached the session: the server answered with a `connected` status. */
export function connectedSockets(page) {
  return page.sockets.filter((socket) => socket.connected !== null);
}

/** Whether a frame the page sent is terminal input (binary bytes or an `input` message). */
export function isInputFrame(payload) {
  return typeof payload !== 'string' || jsonFrame(payload)?.type === 'input';
}

/** Closes a page's browser context, failing the test if a script error happened on it. */
export async function closePage(page) {
  await page.context().close();
  if (page.errors.length > 0) {
    throw new Error(`the page had script errors: ${page.errors.map((error) => error.stack ?? String(error)).join('\n')}`);
  }
}

// ---- conditions -------------------------------------------------------------------------------

/** Polls `probe` until it returns a truthy value; fails with `what` and the last value seen. */
export async function waitFor(what, probe, timeout = PATIENCE_MS) {
  const deadline = Date.now() + timeout;
  let last;
  for (;;) {
    last = await probe();
    if (last) return last;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}; last seen: ${JSON.stringify(last)}`);
    await new Promise((resolvePromise) => setTimeout(resolvePromise, 100));
  }
}

/**
 * The text on the visible terminal's screen, one line per row, trailing spaces trimmed, read from
 * xterm's buffer (the WebGL renderer draws no text into the page).
 */
export async function screenText(page) {
  const lines = await visibleBufferLines(page);
  return lines ? lines.join('\n') : '';
}

/**
 * The visible rows of the shown tab's terminal as xterm's buffer holds them (the pane exposes its
 * terminal as `xterm`), trailing spaces trimmed: what the server's `format=text` screen gives.
 */
export async function visibleBufferLines(page) {
  return page.evaluate(() => {
    const terminal = document.querySelector('.pane:not([hidden])')?.xterm;
    if (!terminal) return null;
    const buffer = terminal.buffer.active;
    const lines = [];
    for (let row = 0; row < terminal.rows; row += 1) {
      lines.push(buffer.getLine(buffer.viewportY + row)?.translateToString(true) ?? '');
    }
    return lines;
  });
}

/** The tab whose session name is `name`, whatever its accessible name adds (a bell, an exit). */
export function tabNamed(page, name) {
  return page.locator('[role="tab"]', { has: page.locator('.tab-name', { hasText: exactly(name) }) });
}

export function count(text, needle) {
  return text.split(needle).length - 1;
}

/** Waits until the visible terminal shows `needle` (at least once) and returns the screen. */
export async function waitForScreen(page, needle, timeout = PATIENCE_MS) {
  return waitFor(`the terminal to show ${JSON.stringify(needle)}`, async () => {
    const text = await screenText(page);
    return text.includes(needle) ? text : false;
  }, timeout);
}

/** Types a line into the visible terminal. */
export async function typeLine(page, line) {
  await page.locator('.pane:not([hidden]) .xterm').click();
  await page.keyboard.type(line);
  await page.keyboard.press('Enter');
}

/**
 * The shown tab's connection state as assistive technology reads it: the pane's status region
 * named "Connection" (a hidden pane's region is out of the accessibility tree, so there is one).
 */
export function connectionState(page) {
  return page.getByRole('status', { name: 'Connection', exact: true });
}

/** Waits, with Playwright's own waiting, until the shown tab's state says exactly `words`. */
export async function waitForConnectionState(page, words, timeout = PATIENCE_MS) {
  const region = connectionState(page);
  try {
    await region.filter({ hasText: exactly(words) }).waitFor({ timeout });
  } catch (error) {
    const seen = await region.allTextContents().catch(() => []);
    throw new Error(`the connection state did not become ${JSON.stringify(words)}; it says ${JSON.stringify(seen)}`, { cause: error });
  }
}

export async function waitForActiveConnected(page) {
  await waitForConnectionState(page, 'Connected');
}

/** A tab's connection state as its accessible description gives it (the tab's aria-describedby). */
export async function tabState(page, name) {
  const tab = page.getByRole('tab', { name, exact: true });
  const described = await tab.getAttribute('aria-describedby');
  if (!described) throw new Error(`the tab ${JSON.stringify(name)} has no accessible description`);
  const words = await Promise.all(described.split(/\s+/).map((id) => page.locator(`[id="${id}"]`).textContent()));
  return words.join(' ').trim();
}

/** A regular expression matching exactly `text` (Playwright's `hasText` string is a substring). */
export function exactly(text) {
  const escaped = text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
  return new RegExp(`^${escaped}$`);
}

export async function tabNames(page) {
  return page.locator('[role="tab"]').allTextContents();
}

/**
 * Presses "New session" (with `press`: a click unless told otherwise) and waits until the page
 * shows the new tab, connected. The tab count alone is not enough: the instance's change event can
 * bring the tab in before the page has selected it, and a line typed then goes to the old tab.
 */
export async function openNewSession(page, press = (button) => button.click()) {
  const tabsNow = () => page.locator('[role="tab"]').evaluateAll((tabs) => tabs.map((tab) => ({
    id: tab.dataset.sessionId ?? null,
    selected: tab.getAttribute('aria-selected') === 'true',
  })));
  const before = (await tabsNow()).map((tab) => tab.id);
  await press(page.getByRole('button', { name: 'New session' }));
  await waitFor('the new tab to be shown', async () => {
    const tabs = await tabsNow();
    const shown = tabs.find((tab) => tab.selected);
    return tabs.length === before.length + 1 && typeof shown?.id === 'string' && !before.includes(shown.id);
  });
  await waitForActiveConnected(page);
}

export async function ensureDirectory(path) {
  await mkdir(path, { recursive: true });
}

/**
 * Saves a screenshot of `page` in web/test-results/ and, with PTYHUB_UPDATE_SCREENSHOTS=1, copies
 * it to docs/screenshots/ (the README's pictures).
 */
export async function saveScreenshot(page, name) {
  const directory = join(webRoot, 'test-results');
  await ensureDirectory(directory);
  const path = join(directory, name);
  await page.screenshot({ path });
  if (process.env.PTYHUB_UPDATE_SCREENSHOTS === '1') {
    const docs = join(repositoryRoot, 'docs', 'screenshots');
    await ensureDirectory(docs);
    await copyFile(path, join(docs, name));
  }
  return path;
}
