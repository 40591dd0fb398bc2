// One binary that carries its page: the `ptyhub` binary, copied into an empty directory and
// started there with no web directory anywhere near it, serves the page it was built with;
// `ptyhub up` prints only its banner on stdout, keeps its service logs in the data directory, and
// lets only warnings through to stderr. Chromium loads the page on the desktop and on a phone.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { copyFile, mkdir, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import {
  closePage, launchBrowser, missingRequirement, newDesktopPage, newMobilePage, typeLine, waitFor,
  waitForActiveConnected, waitForScreen,
} from './support.mjs';

const skip = missingRequirement();
if (skip) console.log(`# skipping the binary test: ${skip}`);

describe('the ptyhub binary', { skip: skip ?? false }, () => {
  let home;
  let child;
  let stdout = '';
  let stderr = '';
  let address;
  let chromium;

  before(async () => {
    home = await mkdtemp(join(tmpdir(), 'ptyhub-binary-test-'));
    const binary = join(home, 'ptyhub');
    await copyFile(process.env.PTYHUB_BINARY, binary);
    const empty = join(home, 'empty');
    await mkdir(empty);
    // Nothing tells it where a page is: no --web-dir, no PTYHUB_WEB_DIR, no web/ beside it.
    const env = { ...process.env };
    delete env.PTYHUB_WEB_DIR;
    delete env.PTYHUB_LOG;
    child = spawn(binary, ['--data-dir', join(home, 'data'), 'up', '--listen', '127.0.0.1:0', '--backend', 'local'], {
      cwd: empty, env, stdio: ['ignore', 'pipe', 'pipe'],
    });
    child.stdout.on('data', (chunk) => { stdout += chunk; });
    child.stderr.on('data', (chunk) => { stderr += chunk; });
    const exited = new Promise((resolve) => child.once('exit', (code, signal) => resolve(`${code ?? signal}`)));
    address = await Promise.race([
      waitFor('the banner', async () => {
        const match = /web page: {2}(http:\/\/127\.0\.0\.1:\d+)\/\?token=(\S+)/.exec(stdout);
        return match && stdout.includes('Press Ctrl-C to stop') ? { origin: match[1], token: match[2] } : false;
      }, 120_000),
      exited.then((how) => { throw new Error(`ptyhub up ended (${how}):\n${stdout}\n${stderr}`); }),
    ]);
    chromium = await launchBrowser();
  });

  after(async () => {
    await chromium?.close();
    if (child && child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      await exited;
    }
    if (home) await rm(home, { recursive: true, force: true });
  });

  test('up prints its banner alone, with the logs in the data dir', async () => {
    const lines = stdout.split('\n').filter((line) => line.trim() !== '');
    assert.match(lines[0], /^ptyhub is up \(1 backends: local\)$/);
    assert.ok(lines.some((line) => line.startsWith('  token:     ') && line.endsWith(address.token)), stdout);
    assert.ok(lines.some((line) => /^ {2}shell: {5}ptyhub --data-dir \S+ attach local$/.test(line)), stdout);
    const logFile = join(home, 'data', 'ptyhub.log');
    assert.ok(lines.some((line) => line === `  logs:      ${logFile}`), stdout);
    assert.doesNotMatch(stdout, /INFO|WARN/, 'no log lines among the banner');
    assert.doesNotMatch(stderr, / INFO /, `stderr carries warnings at most:\n${stderr}`);
    await waitFor('the log file to record the gateway', async () => (await readFile(logFile, 'utf8')).includes('gateway listening'));
  });

  for (const device of ['desktop', 'phone']) {
    test(`${device}: the page built into the binary loads and its terminal works`, async () => {
      const page = device === 'phone'
        ? await newMobilePage(chromium.browser, address.origin)
        : await newDesktopPage(chromium.browser);
      const index = await page.goto(`${address.origin}/?token=${address.token}`);
      assert.equal(index.status(), 200);
      assert.equal(index.headers()['content-type'], 'text/html; charset=utf-8');
      await page.locator('[data-instance-id]').filter({ hasText: 'local' }).locator('a').click();
      await waitForActiveConnected(page);
      await typeLine(page, 'echo embedded-$((6*7))');
      await waitForScreen(page, 'embedded-42');
      // The assets come with validators: a second load may be answered 304.
      const asset = await page.request.get(`${address.origin}/assets/app.js`);
      assert.equal(asset.status(), 200);
      const etag = asset.headers().etag;
      assert.match(etag ?? '', /^"[0-9a-f]+"$/);
      const again = await page.request.get(`${address.origin}/assets/app.js`, { headers: { 'If-None-Match': etag } });
      assert.equal(again.status(), 304);
      await closePage(page);
    });
  }
});
