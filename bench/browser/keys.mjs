// The bench's key-press-to-glyph measurement (BENCHMARKS.md, scenario 13): one small page with
// xterm.js (the copy in web/node_modules, the version the web page ships) in Debian's Chromium
// through playwright-core, served by Playwright itself at each target's origin (so that the page
// is same-origin with the WebSocket it opens, as the gateway's own page is). The page writes
// what the socket sends to the terminal and sends what the terminal's keyboard gives; the
// terminal at the other end echoes each key.
//
// For each target, in turn: the page opens, waits for the echo program's `R`, then Playwright
// presses `keys` letters one at a time, each after the previous one's glyph. The page times each
// from its `keydown` (caught before xterm's own handler) until the animation frame after xterm
// parsed the echo, which is the frame that draws the glyph.
//
// Input: one JSON argument {chromium, keys, patienceMs, targets: [{name, origin, socket}]}.
// Output: one JSON object {name: [ms, ...], ...}. Every wait is bounded.

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
  // The page comes from Playwright, not from the network, so Chromium cannot tell that its
  // origin is on loopback and would refuse its WebSocket to 127.0.0.1 as a public page's.
  '--disable-features=LocalNetworkAccessChecks',
];
const ALPHABET = 'abcdefghijklmnopqrstuvwxyz';
const PAGE_PATH = '/__bench_keys/page.html';

const PAGE = `<!doctype html>
<html><head><meta charset="utf-8"><link rel="stylesheet" href="xterm.css">
<script src="xterm.js"></script></head>
<body><div id="terminal"></div><script>
  const terminal = new Terminal({ cols: 80, rows: 24 });
  terminal.open(document.getElementById('terminal'));
  const socket = new WebSocket(new URLSearchParams(location.search).get('socket'));
  socket.binaryType = 'arraybuffer';
  const encoder = new TextEncoder();
  window.bench = { text: '', pressed: null, samples: [], failed: null };
  socket.onmessage = (event) => {
    // Text frames are the server's JSON (ptyhub's connected frame): not the terminal's.
    if (typeof event.data !== 'string') terminal.write(new Uint8Array(event.data));
  };
  socket.onclose = (event) => { window.bench.failed = 'socket closed: ' + event.code; };
  terminal.onData((data) => socket.send(encoder.encode(data)));
  // Before xterm's own listener: the moment the key reaches the page.
  document.addEventListener('keydown', () => { window.bench.pressed = performance.now(); }, true);
  terminal.onWriteParsed(() => {
    window.bench.text = terminal.buffer.active.getLine(0).translateToString(true);
    const pressed = window.bench.pressed;
    if (pressed === null) return;
    window.bench.pressed = null;
    requestAnimationFrame(() => window.bench.samples.push(performance.now() - pressed));
  });
</script></body></html>`;

const options = JSON.parse(process.argv[2] ?? 'null');
if (!options) {
  console.error('usage: node keys.mjs \'{"chromium","keys","patienceMs","targets":[{"name","origin","socket"}]}\'');
  process.exit(2);
}

/** Serves the page and xterm.js at `origin`, from this script rather than from the server. */
async function servePage(page, origin) {
  await page.route(`${origin}/__bench_keys/**`, (route) => {
    const path = new URL(route.request().url()).pathname;
    const files = {
      [PAGE_PATH]: ['text/html', PAGE],
      '/__bench_keys/xterm.js': ['text/javascript', XTERM_JS],
      '/__bench_keys/xterm.css': ['text/css', XTERM_CSS],
    };
    const file = files[path];
    if (!file) return route.fulfill({ status: 404, body: 'not found' });
    return route.fulfill({ status: 200, contentType: file[0], body: file[1] });
  });
}

async function measure(browser, target) {
  const page = await browser.newPage();
  try {
    await servePage(page, target.origin);
    await page.goto(`${target.origin}${PAGE_PATH}?socket=${encodeURIComponent(target.socket)}`);
    const timeout = options.patienceMs;
    await page.waitForFunction(() => window.bench.text.includes('R') || window.bench.failed, null, { timeout });
    const ready = await page.evaluate(() => window.bench);
    if (ready.failed) throw new Error(`${target.name}: ${ready.failed}`);
    await page.click('#terminal');
    for (let index = 0; index < options.keys; index += 1) {
      await page.keyboard.press(ALPHABET[index % ALPHABET.length]);
      await page.waitForFunction(
        (count) => window.bench.samples.length >= count || window.bench.failed,
        index + 1,
        { timeout, polling: 'raf' },
      );
    }
    const done = await page.evaluate(() => window.bench);
    if (done.failed) throw new Error(`${target.name}: ${done.failed}`);
    return done.samples;
  } finally {
    await page.close();
  }
}

const browser = await chromium.launch({ executablePath: options.chromium, args: CHROMIUM_ARGS });
try {
  const report = {};
  for (const target of options.targets) {
    report[target.name] = await measure(browser, target);
  }
  console.log(JSON.stringify(report));
} catch (error) {
  console.error(String(error?.stack ?? error));
  process.exitCode = 1;
} finally {
  await browser.close();
}
