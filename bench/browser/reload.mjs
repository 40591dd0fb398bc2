// The bench's browser measurement (BENCHMARKS.md, scenario 8): a page load of the terminal page
// of a long-running full-screen session, in Debian's Chromium through playwright-core (the copy
// in web/node_modules, from `npm ci` there). The bench starts the stack and registers the
// instance; this script drives the page and the session and prints one JSON object on stdout:
//
// 1. A first page load opens the instance's terminal page, which creates the session at the
//    size it fits to (a person opening the page). Once the session has that size the page is
//    closed and the program is told to go (POST /input): it switches to the alternate screen,
//    draws a header once and repaints a counter in place until it has written the bytes asked
//    for, then prints `done` and waits.
// 2. After the server's screen shows `done` (POST /wait), each measured load reads the screen
//    (`GET .../screen?format=text`) and then loads the page afresh. A script installed before
//    the page's own counts what arrives on the page's WebSocket (payload bytes of every frame,
//    text and binary) and watches xterm's buffer (the pane's `xterm`, else its rendered rows):
//    the load is measured from the WebSocket's `open` event until the buffer's rows are the
//    screen's rows, and the bytes are those the server sent on that socket until then.
//
// Input: one JSON argument {origin, token, instance, chromium, writeBytes, loads, patienceMs}.
// Every wait is bounded; a load that never shows the screen is reported with what it showed.

import { createRequire } from 'node:module';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
// playwright-core is the web page's dev dependency; this script uses that copy.
const require = createRequire(resolve(here, '..', '..', 'web', 'package.json'));
const { chromium } = require('playwright-core');

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
const VIEWPORT = { width: 1280, height: 720 };
/** A screen wait may last at most this long per call (the contract's bound). */
const WAIT_CALL_MS = 300_000;
const POLL_MS = 50;

const options = JSON.parse(process.argv[2] ?? 'null');
if (!options) {
  console.error('usage: node reload.mjs \'{"origin","token","instance","chromium","writeBytes","loads","patienceMs"}\'');
  process.exit(2);
}

async function rest(method, path, body) {
  const response = await fetch(`${options.origin}${path}`, {
    method,
    headers: { Authorization: `Bearer ${options.token}`, ...(body ? { 'Content-Type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  const text = await response.text();
  return { status: response.status, body: text ? JSON.parse(text) : null };
}

async function restOk(method, path, body, expected = 200) {
  const answer = await rest(method, path, body);
  if (answer.status !== expected) throw new Error(`${method} ${path}: ${answer.status} ${JSON.stringify(answer.body)}`);
  return answer.body;
}

const sessionPath = (session) => `/api/v1/instances/${options.instance}/terminal/sessions/${session}`;
const screen = (session) => restOk('GET', `${sessionPath(session)}/screen?format=text`);

/** Polls `probe` every POLL_MS until it returns a truthy value, for at most `timeout` ms. */
async function waitFor(what, probe, timeout = options.patienceMs) {
  const deadline = Date.now() + timeout;
  let last;
  for (;;) {
    last = await probe();
    if (last) return last;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeout} ms waiting for ${what}; last seen: ${JSON.stringify(last)}`);
    await new Promise((resolvePromise) => setTimeout(resolvePromise, POLL_MS));
  }
}

/** The size the page last asked the session for: the socket's `cols`/`rows`, then its resizes. */
function watchDeclaredSize(page) {
  const declared = { size: null, changes: 0, socket: null, session: null };
  page.on('websocket', (socket) => {
    const url = new URL(socket.url());
    if (url.searchParams.has('cols')) {
      declared.size = { cols: Number(url.searchParams.get('cols')), rows: Number(url.searchParams.get('rows')) };
      declared.changes += 1;
    }
    declared.socket = url;
    socket.on('framesent', ({ payload }) => {
      if (typeof payload !== 'string') return;
      try {
        const message = JSON.parse(payload);
        if (message.type === 'resize') {
          declared.size = { cols: message.cols, rows: message.rows };
          declared.changes += 1;
        }
      } catch {
        // Not JSON: input as text.
      }
    });
    socket.on('framereceived', ({ payload }) => {
      if (typeof payload !== 'string') return;
      try {
        const message = JSON.parse(payload);
        if (message.type === 'status' && message.status === 'connected') declared.session = message.session?.id ?? null;
      } catch {
        // Not JSON.
      }
    });
  });
  return declared;
}

/**
 * Installed in the page before its own scripts: wraps WebSocket to count what each socket
 * receives, and compares xterm's rows with `expected` after every parse and every frame.
 */
function instrument(expected) {
  const state = { sockets: [], matched: null, checks: 0, lastRows: null };
  window.__ptyhubBench = state;
  const encoder = new TextEncoder();
  const Native = window.WebSocket;
  let subscribed = null;

  const visibleRows = () => {
    const pane = document.querySelector('.pane:not([hidden])');
    const terminal = pane?.xterm;
    if (terminal) {
      if (subscribed !== terminal) {
        subscribed = terminal;
        terminal.onWriteParsed(check);
      }
      const buffer = terminal.buffer.active;
      const rows = [];
      for (let row = 0; row < terminal.rows; row += 1) {
        // xterm keeps spaces a program wrote (with a background, say) where the server's text
        // format trims every trailing space, as `tmux capture-pane -p` does.
        rows.push((buffer.getLine(buffer.viewportY + row)?.translateToString(true) ?? '').replace(/ +$/, ''));
      }
      return { rows, from: 'buffer' };
    }
    // A page without the hook: the rendered rows (drawn on the next animation frame).
    const rendered = pane?.querySelector('.xterm-rows');
    if (!rendered) return null;
    const rows = Array.from(rendered.children, (row) => row.textContent.replace(/\u00a0/g, ' ').replace(/ +$/, ''));
    return { rows, from: 'rendered rows' };
  };

  function check() {
    if (state.matched) return;
    state.checks += 1;
    const seen = visibleRows();
    if (!seen) return;
    state.lastRows = seen;
    const same = seen.rows.length === expected.length && seen.rows.every((row, index) => row === expected[index]);
    if (!same) return;
    const socket = state.sockets[state.sockets.length - 1] ?? null;
    state.matched = {
      at: performance.now(),
      from: seen.from,
      socket: state.sockets.length - 1,
      bytes: socket?.bytes ?? null,
      frames: socket?.frames ?? null,
    };
  }

  class MeasuredWebSocket extends Native {
    constructor(url, protocols) {
      super(url, protocols);
      const record = {
        url: String(url), created: performance.now(), opened: null, bytes: 0, frames: 0,
        textBytes: 0, snapshot: null, snapshotBytes: null,
      };
      state.sockets.push(record);
      let snapshotNext = false;
      // Registered before the page sets `onmessage`, so each frame is counted before the page
      // handles it.
      this.addEventListener('open', () => {
        record.opened = performance.now();
      });
      this.addEventListener('message', (event) => {
        const data = event.data;
        let size;
        if (typeof data === 'string') {
          size = encoder.encode(data).length;
          record.textBytes += size;
          try {
            const message = JSON.parse(data);
            if (message.type === 'snapshot') {
              record.snapshot = message;
              snapshotNext = true;
            }
          } catch {
            // Not JSON.
          }
        } else {
          size = data.byteLength ?? data.size ?? 0;
          if (snapshotNext) {
            record.snapshotBytes = size;
            snapshotNext = false;
          }
        }
        record.bytes += size;
        record.frames += 1;
        // After the page's own handler (a task later), in case xterm parsed it at once.
        setTimeout(check, 0);
      });
    }
  }
  window.WebSocket = MeasuredWebSocket;
  const poll = () => {
    check();
    if (!state.matched) requestAnimationFrame(poll);
  };
  requestAnimationFrame(poll);
}

function pageUrl() {
  return `${options.origin}/instances/${encodeURIComponent(options.instance)}?token=${encodeURIComponent(options.token)}`;
}

/** The first page load: the page creates the session at its size; the session's id and size. */
async function openSession(browser) {
  const context = await browser.newContext({ viewport: VIEWPORT });
  try {
    const page = await context.newPage();
    const declared = watchDeclaredSize(page);
    await page.goto(pageUrl());
    const session = await waitFor('the page to create and connect its session', () => declared.session);
    // The page fits its terminal once laid out; the session has the page's size when the server
    // says so and the page asked for nothing else meanwhile.
    let stable = 0;
    let lastChanges = -1;
    const size = await waitFor('the session to take the page\'s size', async () => {
      const current = await screen(session);
      const wanted = declared.size;
      const same = wanted && current.cols === wanted.cols && current.rows === wanted.rows;
      stable = same && declared.changes === lastChanges ? stable + 1 : 0;
      lastChanges = declared.changes;
      return stable >= 5 ? { cols: current.cols, rows: current.rows } : null;
    });
    return { session, size };
  } finally {
    await context.close();
  }
}

async function tellProgramToGo(session) {
  // Forced: the first page's socket may not have let go of control yet.
  await restOk('POST', `${sessionPath(session)}/input`, { text: '\n', force: true });
  const deadline = Date.now() + options.patienceMs + options.writeBytes / 1024;
  for (;;) {
    const answer = await rest('POST', `${sessionPath(session)}/wait`, { pattern: '^done$', timeout_ms: WAIT_CALL_MS });
    if (answer.status === 200 && answer.body.outcome === 'matched') return answer.body.screen;
    if (answer.status !== 408) throw new Error(`waiting for the program: ${answer.status} ${JSON.stringify(answer.body)}`);
    if (Date.now() > deadline) throw new Error('the program did not finish writing in time');
  }
}

/** One measured page load. */
async function measuredLoad(browser, session, expected) {
  const context = await browser.newContext({ viewport: VIEWPORT });
  try {
    const page = await context.newPage();
    const errors = [];
    page.on('pageerror', (error) => errors.push(String(error)));
    await page.addInitScript(instrument, expected.lines);
    await page.goto(pageUrl());
    let matched = true;
    try {
      await page.waitForFunction(() => window.__ptyhubBench?.matched !== null, null, { timeout: options.patienceMs, polling: 'raf' });
    } catch {
      matched = false;
    }
    const state = await page.evaluate(() => window.__ptyhubBench);
    const after = await screen(session);
    const socket = state.matched ? state.sockets[state.matched.socket] : state.sockets[state.sockets.length - 1];
    return {
      matched,
      from: state.matched?.from ?? state.lastRows?.from ?? null,
      sockets: state.sockets.length,
      createdToOpenMs: socket && socket.opened !== null ? socket.opened - socket.created : null,
      openToMatchMs: state.matched && socket?.opened != null ? state.matched.at - socket.opened : null,
      navigationToMatchMs: state.matched ? state.matched.at : null,
      bytes: state.matched ? state.matched.bytes : socket?.bytes ?? 0,
      frames: state.matched ? state.matched.frames : socket?.frames ?? 0,
      textBytes: socket?.textBytes ?? 0,
      snapshotBytes: socket?.snapshotBytes ?? null,
      snapshotOffset: socket?.snapshot?.offset ?? null,
      screenUnchanged: after.offset === expected.offset,
      seenRows: matched ? null : state.lastRows?.rows ?? null,
      errors,
    };
  } finally {
    await context.close();
  }
}

async function main() {
  const browser = await chromium.launch({ executablePath: options.chromium, headless: true, args: CHROMIUM_ARGS });
  try {
    const { session, size } = await openSession(browser);
    const done = await tellProgramToGo(session);
    const expected = await screen(session);
    if (!expected.alternate_screen) throw new Error('the program\'s screen is not the alternate screen');
    if (expected.offset < options.writeBytes) throw new Error(`the screen is at offset ${expected.offset}, below the ${options.writeBytes} bytes written`);
    const loads = [];
    for (let index = 0; index < options.loads; index += 1) {
      loads.push(await measuredLoad(browser, session, expected));
    }
    process.stdout.write(`${JSON.stringify({
      session,
      size,
      offset: expected.offset,
      doneOffset: done.offset,
      lines: expected.lines,
      loads,
    })}\n`);
  } finally {
    await browser.close();
  }
}

main().catch((error) => {
  console.error(error?.stack ?? String(error));
  process.exit(1);
});
