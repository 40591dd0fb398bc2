// The History view: an instance's closed sessions, each played in the asciinema player from its
// recording. In Chromium, a recorded session played to its end shows its last screen; a new speed
// starts the player again; a recording with input and its typists' markers plays too; a session
// without a recording says so.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  closePage, launchBrowser, missingRequirement, newDesktopPage, startStack, waitFor,
} from './support.mjs';

const skip = missingRequirement();
if (skip) console.log(`# skipping the history tests: ${skip}`);

describe('the History view', { skip: skip ?? false }, () => {
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

  /** Registers an instance that records `record`. */
  async function instanceRecording(record) {
    const { status, body } = await stack.rest('POST', '/api/v1/instances', {
      name: `history-${record.replace('+', '-')}-${Math.random().toString(36).slice(2, 8)}`,
      target: { local: {} },
      command: ['/bin/sh'],
      env: { PS1: '$ ', HOME: stack.dataDir, ENV: '' },
      cwd: stack.dataDir,
      record,
    });
    assert.equal(status, 201, JSON.stringify(body));
    return body;
  }

  /** Runs `line` in a new session of `instance`, waits for `done` on its screen, closes it. */
  async function closedSessionThatRan(instance, name, line, done) {
    const sessions = `/api/v1/instances/${instance.id}/terminal/sessions`;
    const created = await stack.rest('POST', sessions, { name });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const session = created.body;
    const typed = await stack.rest('POST', `${sessions}/${session.id}/input`, { text: `${line}\n` });
    assert.equal(typed.status, 200, JSON.stringify(typed.body));
    const waited = await stack.rest('POST', `${sessions}/${session.id}/wait`, { pattern: done, timeout_ms: 30000 });
    assert.equal(waited.status, 200, JSON.stringify(waited.body));
    const closed = await stack.rest('DELETE', `${sessions}/${session.id}`);
    assert.equal(closed.status, 200, JSON.stringify(closed.body));
    return session;
  }

  /** Waits until the session's recording is published; returns its text. */
  async function publishedRecording(instance, session) {
    let cast = null;
    await waitFor('the recording to be published', async () => {
      const response = await fetch(`${stack.origin}/api/v1/instances/${instance.id}/terminal/sessions/${session.id}/recording`, {
        headers: { Authorization: `Bearer ${stack.token}` },
      });
      if (response.status !== 200) return false;
      cast = await response.text();
      return true;
    });
    return cast;
  }

  /**
   * Opens the History view in a new desktop page and plays the session named `name` at 8x
   * until the player says it ended and its screen matches `last`; returns the page, the
   * player's status and a reader of its screen.
   */
  async function playedToItsEnd(instance, session, name, last) {
    const page = await newDesktopPage(chromium.browser);
    await page.goto(`${stack.origin}/instances/${instance.id}?view=history&token=${stack.token}`);
    const row = page.locator(`[data-session-id="${session.id}"]`);
    await row.getByText(name).waitFor();
    await page.getByLabel('Speed').selectOption('8');
    await row.getByRole('button', { name: 'Play' }).click();
    const status = page.getByRole('status').filter({ hasText: name });
    await waitFor('the player to reach the end', async () => (await status.textContent())?.startsWith(`Ended ${name}`));
    const screen = async () => page.locator('.history-player .ap-term-text').innerText();
    // The status can say the player ended before its terminal shows the last frame: a clean-clone
    // CI run on a loaded machine once read an empty screen right after "Ended".
    await waitFor('the last screen to be drawn', async () => last.test(await screen()));
    return { page, status, screen };
  }

  test('a recording plays to its end and shows its last screen, at any speed', async () => {
    const instance = await instanceRecording('output');
    const session = await closedSessionThatRan(instance, 'taped', "printf 'history-%s\\n' one two three; echo LAST-$((6*7))", 'LAST-42');
    await publishedRecording(instance, session);
    const { page, status, screen } = await playedToItsEnd(instance, session, 'taped', /LAST-42/);
    const last = await screen();
    assert.match(last, /history-three/, last);
    assert.equal(await page.locator('.history-player').getAttribute('data-state'), 'ended');

    // A new speed plays it again from where it was (the end): it ends once more, same screen.
    await page.getByLabel('Speed').selectOption('0.5');
    await waitFor('the player to end again', async () => (await status.textContent())?.startsWith('Ended taped'));
    await waitFor('the last screen to be drawn again', async () => /LAST-42/.test(await screen()));
    // The player seeks: `0` goes to 0% of the recording, where the output is not on the screen
    // yet.
    await page.locator('.history-player .ap-wrapper').focus();
    await page.keyboard.press('0');
    await waitFor('the start of the recording', async () => !(await screen()).includes('LAST-42'));
    await closePage(page);
  });

  // Input is recorded after a marker naming its typist (CONTRACT.md, "Recordings"): the
  // asciinema player still plays such a file to its end, and shows each marker on its timeline.
  test('a recording with input plays to its end and shows its typists\' markers', async () => {
    const instance = await instanceRecording('output+input');
    const session = await closedSessionThatRan(instance, 'typed', 'echo TYPED-$((6*7))', 'TYPED-42');
    const cast = await publishedRecording(instance, session);
    const events = cast.trimEnd().split('\n').slice(1).map((line) => JSON.parse(line));
    const markers = events.filter(([, code]) => code === 'm').map(([, , data]) => data);
    assert.ok(markers.length > 0 && markers.every((data) => data.startsWith('input: ')), JSON.stringify(markers));
    assert.ok(events.some(([, code, data]) => code === 'i' && data.includes('TYPED')), 'the input is recorded');

    const { page } = await playedToItsEnd(instance, session, 'typed', /TYPED-42/);
    assert.equal(await page.locator('.history-player .ap-marker-container').count(), markers.length, 'one mark on the timeline per marker');
    await closePage(page);
  });

  test('a session that was not recorded says so', async () => {
    const instance = await instanceRecording('off');
    const session = await closedSessionThatRan(instance, 'untaped', 'echo NOT-$((6*7))', 'NOT-42');
    const page = await newDesktopPage(chromium.browser);
    await page.goto(`${stack.origin}/instances/${instance.id}?view=history&token=${stack.token}`);
    await page.locator(`[data-session-id="${session.id}"]`).getByRole('button', { name: 'Play' }).click();
    await page.getByRole('status').filter({ hasText: 'untaped has no recording' }).waitFor();
    await closePage(page);
  });
});
