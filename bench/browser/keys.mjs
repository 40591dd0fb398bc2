// The bench's key-press-to-glyph measurement (BENCHMARKS.md, scenario 13) in Debian's Chromium
// through playwright-core. Each target is a page with a terminal at the other end that echoes
// each key:
//
// - `socket` targets: one small page with xterm.js (the copy in web/node_modules, the version the
//   web page ships) served by Playwright itself at the target's origin (so that the page is
//   same-origin with the WebSocket it opens, as the gateway's own page is). It writes what the
//   socket sends to the terminal and sends what the terminal's keyboard gives, nothing more: the
//   same page on a plain echo server and on ptyhub tells what the server costs.
// - `page` targets: ptyhub's own web page, signed in with a `?token=` link, showing the session
//   `session` (its tab remembered in sessionStorage before the page loads): everything the page
//   does per key and per frame received is in its figure.
//
// A script installed before any of the page's own times each key in phases: from the `keydown`
// (caught before xterm's own handler) to the socket's `send`, to the first binary frame that
// comes back (seen before the page's own handler), to xterm having parsed it, to the animation
// frame after that, which is the frame that draws the glyph. It also counts the frames each way
// per key, so that two paths that put different frames on the wire show it.
//
// The targets are opened together and typed on in turn, `rounds` rounds of an equal share of the
// keys, every other round in reverse order: load from anything else on the machine falls on
// every target alike. Within a round Playwright presses letters one at a time, each after the
// previous one's glyph.
//
// Input: one JSON argument {chromium, keys, rounds, patienceMs,
// targets: [{name, origin, socket} | {name, origin, page, instance, session}]}.
// Output: one JSON object {name: [{glyph, send, roundTrip, page, frame, sent, binary, text}, ...]}
// (times in ms, counts of frames). Every wait is bounded.

import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const web = resolve(here, '..', '..', 'web');
const require = createRequire(resolve(web, 'package.json'));
const { chromium } = require('playwright-core');
const XTERM_JS = readFileSync(resolve(web, 'node_modules/@xterm/xterm/lib/xterm.js'));
const XTERM_CSS = readFileSync(resolve(web, 'node_modules/@xterm/xterm/css/xterm.css'));

const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-quic',
  '--no-first-run',
  '--disable-component-update',
  '--disable-sync',
  // The small page comes from Playwright, not from the network, so Chromium cannot tell that
  // its origin is on loopback and would refuse its WebSocket to 127.0.0.1 as a public page's.
  '--disable-features=LocalNetworkAccessChecks',
];
const VIEWPORT = { width: 1280, height: 720 };
const ALPHABET = 'abcdefghijklmnopqrstuvwxyz';
const PAGE_PATH = '/__bench_keys/page.html';
/** Where ptyhub's page remembers the tab it shows, per instance (web/src/terminal-page.js). */
const ACTIVE_TAB_KEY_PREFIX = 'ptyhub.active.';

const SMALL_PAGE = `<!doctype html>
<html><head><meta charset="utf-8"><link rel="stylesheet" href="xterm.css">
<script src="xterm.js"></script></head>
<body><div id="terminal"></div><script>
  const terminal = new Terminal({ cols: 80, rows: 24 });
  terminal.open(document.getElementById('terminal'));
  window.__benchKeys.watch(terminal);
  const socket = new WebSocket(new URLSearchParams(location.search).get('socket'));
  socket.binaryType = 'arraybuffer';
  const encoder = new TextEncoder();
  socket.onmessage = (event) => {
    // Text frames are the server's JSON (ptyhub's connected frame): not the terminal's.
    if (typeof event.data !== 'string') terminal.write(new Uint8Array(event.data));
  };
  terminal.onData((data) => socket.send(encoder.encode(data)));
</script></body></html>`;

/**
 * Installed before the page's own scripts: times each key in phases and counts the frames each
 * way (see the file's comment). Runs in the page, so it uses nothing from this module.
 */
function instrumentPage() {
  const state = { key: null, samples: [], failed: null, text: '', socket: null, watch: null };
  window.__benchKeys = state;
  const NativeWebSocket = window.WebSocket;
  class TimedWebSocket extends NativeWebSocket {
    constructor(...args) {
      super(...args);
      // Added before the page can set `onmessage`, so it runs first.
      this.addEventListener('message', (event) => {
        const key = state.key;
        if (key === null) return;
        if (typeof event.data === 'string') {
          key.text += 1;
        } else {
          key.binary += 1;
          if (key.received === null) key.received = performance.now();
        }
      });
      state.socket = this;
      // Only the page's live socket: a page may open and drop others while it loads.
      this.addEventListener('close', (event) => {
        if (state.socket === this) state.failed ??= `socket closed: ${event.code} ${event.reason}`;
      });
    }

    send(data) {
      const key = state.key;
      if (key !== null) {
        key.sent += 1;
        key.sentAt ??= performance.now();
      }
      return super.send(data);
    }
  }
  window.WebSocket = TimedWebSocket;
  document.addEventListener('keydown', () => {
    state.key = { pressed: performance.now(), sentAt: null, received: null, sent: 0, binary: 0, text: 0 };
  }, true);
  /** Times the keys whose echo `terminal` draws. */
  state.watch = (terminal) => {
    const readText = () => {
      state.text = terminal.buffer.active.getLine(0)?.translateToString(true) ?? '';
    };
    // What was written before the watch began (a page's snapshot) counts too.
    readText();
    terminal.onWriteParsed(() => {
      readText();
      const key = state.key;
      if (key === null || key.received === null) return;
      state.key = null;
      const parsed = performance.now();
      requestAnimationFrame(() => {
        const drawn = performance.now();
        state.samples.push({
          glyph: drawn - key.pressed,
          send: (key.sentAt ?? key.received) - key.pressed,
          roundTrip: key.received - (key.sentAt ?? key.received),
          page: parsed - key.received,
          frame: drawn - parsed,
          sent: key.sent,
          binary: key.binary,
          text: key.text,
        });
      });
    });
  };
}

const options = JSON.parse(process.argv[2] ?? 'null');
if (!options) {
  console.error('usage: node keys.mjs \'{"chromium","keys","rounds","patienceMs","targets":[{"name","origin","socket"}|{"name","origin","page","instance","session"}]}\'');
  process.exit(2);
}

/** Serves the small page and xterm.js at `origin`, from this script rather than from the server. */
async function serveSmallPage(page, origin) {
  await page.route(`${origin}/__bench_keys/**`, (route) => {
    const path = new URL(route.request().url()).pathname;
    const files = {
      [PAGE_PATH]: ['text/html', SMALL_PAGE],
      '/__bench_keys/xterm.js': ['text/javascript', XTERM_JS],
      '/__bench_keys/xterm.css': ['text/css', XTERM_CSS],
    };
    const file = files[path];
    if (!file) return route.fulfill({ status: 404, body: 'not found' });
    return route.fulfill({ status: 200, contentType: file[0], body: file[1] });
  });
}

/** The selector of the element that takes the target's keys. */
function keyboardTarget(target) {
  return target.page ? '.pane:not([hidden]) .xterm-helper-textarea' : '#terminal .xterm-helper-textarea';
}

/** Waits for `probe` in the page, failing with what was awaited and what the page shows. */
async function waitInPage(page, target, what, probe, argument) {
  try {
    await page.waitForFunction(probe, argument, { timeout: options.patienceMs, polling: 'raf' });
  } catch (error) {
    const shown = await page.evaluate(() => ({
      text: window.__benchKeys?.text, failed: window.__benchKeys?.failed, body: document.body?.innerText?.slice(0, 300),
    })).catch(() => null);
    throw new Error(`${target.name}: waiting for ${what}: ${error.message}; the page: ${JSON.stringify(shown)}`);
  }
}

/** Opens a target's page and waits until its terminal shows the echo program's `R`. */
async function openTarget(browser, target) {
  const context = await browser.newContext({ viewport: VIEWPORT });
  const page = await context.newPage();
  await page.addInitScript(instrumentPage);
  if (target.page) {
    await page.addInitScript(([key, session]) => sessionStorage.setItem(key, session), [
      `${ACTIVE_TAB_KEY_PREFIX}${target.instance}`, target.session,
    ]);
    await page.goto(`${target.origin}${target.page}`);
    // The shown tab's terminal, once the page made it; the page's tests read it the same way.
    await waitInPage(page, target, 'the shown tab\'s terminal', () => document.querySelector('.pane:not([hidden])')?.xterm);
    await page.evaluate(() => window.__benchKeys.watch(document.querySelector('.pane:not([hidden])').xterm));
  } else {
    await serveSmallPage(page, target.origin);
    await page.goto(`${target.origin}${PAGE_PATH}?socket=${encodeURIComponent(target.socket)}`);
  }
  await waitInPage(page, target, 'the echo program\'s R', () => window.__benchKeys.text.includes('R') || window.__benchKeys.failed);
  const failed = await page.evaluate(() => window.__benchKeys.failed);
  if (failed) throw new Error(`${target.name}: ${failed}`);
  return { target, context, page };
}

/** Presses `count` letters on an open target, each after the previous one's glyph. */
async function typeOn({ target, page }, count) {
  await page.bringToFront();
  await page.focus(keyboardTarget(target));
  const before = await page.evaluate(() => window.__benchKeys.samples.length);
  for (let index = 0; index < count; index += 1) {
    await page.keyboard.press(ALPHABET[(before + index) % ALPHABET.length]);
    await waitInPage(
      page, target, `the glyph of key ${before + index + 1}`,
      (wanted) => window.__benchKeys.samples.length >= wanted || window.__benchKeys.failed,
      before + index + 1,
    );
  }
  const failed = await page.evaluate(() => window.__benchKeys.failed);
  if (failed) throw new Error(`${target.name}: ${failed}`);
}

/** How many keys each round presses: the keys shared out, the first rounds taking the rest. */
function keysPerRound(keys, rounds) {
  return Array.from({ length: rounds }, (_, round) => Math.floor(keys / rounds) + (round < keys % rounds ? 1 : 0));
}

const browser = await chromium.launch({ executablePath: options.chromium, args: CHROMIUM_ARGS });
try {
  const opened = [];
  for (const target of options.targets) opened.push(await openTarget(browser, target));
  const rounds = Math.max(1, Math.min(options.rounds, options.keys));
  for (const [round, count] of keysPerRound(options.keys, rounds).entries()) {
    const order = round % 2 === 0 ? opened : [...opened].reverse();
    for (const target of order) await typeOn(target, count);
  }
  const report = {};
  for (const { target, page } of opened) {
    report[target.name] = await page.evaluate(() => window.__benchKeys.samples);
  }
  for (const { context } of opened) await context.close();
  console.log(JSON.stringify(report));
} catch (error) {
  console.error(String(error?.stack ?? error));
  process.exitCode = 1;
} finally {
  await browser.close();
}
