// The page's predictive local echo (src/local-echo.js) in Debian's Chromium against a real stack
// (`ptyhub up`) reached through a relay that adds 100 ms each way. While the relay holds the
// gateway's output back, what the page shows cannot be the server's echo: typed keys must be
// drawn (dimmed, over the terminal) at a prompt, and nothing at a password prompt or in a
// full-screen program. Once the output flows, the terminal must equal the server's screen, with
// no prediction left over.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  closePage, connectedSockets, launchBrowser, missingRequirement, newDesktopPage, startRelay, startStack,
  visibleBufferLines, waitFor, waitForConnectionState, waitForScreen,
} from './support.mjs';

const skip = missingRequirement();
if (skip) console.log(`# skipping the browser tests: ${skip}`);

describe('local echo over a slow link', { skip: skip ?? false }, () => {
  let stack;
  let chromium;
  let relay;

  before(async () => {
    stack = await startStack();
    chromium = await launchBrowser();
    relay = await startRelay(stack.origin, { delayMs: 100 });
  });

  after(async () => {
    relay?.release();
    await relay?.stop();
    await chromium?.close();
    await stack?.stop();
  });

  /**
   * Opens a fresh instance's terminal through the slow relay, and types a first command there so
   * the page has seen its echo and measured the round trip (over the 30 ms threshold).
   */
  async function openSlow() {
    const instance = await stack.createInstance();
    const page = await newDesktopPage(chromium.browser);
    await page.goto(`${relay.origin}/instances/${instance.id}?token=${stack.token}`);
    await waitForConnectionState(page, 'Connected');
    await waitForScreen(page, '$');
    await page.locator('.pane:not([hidden]) .xterm').click();
    // The first key after connecting waits for its echo; the keys after it are measured.
    await page.keyboard.type('e');
    await waitForScreen(page, '$ e');
    await page.keyboard.type('cho warm-$((2+3))');
    await waitFor('a round trip over the threshold', () => page.evaluate(() => {
      const rtt = document.querySelector('.pane:not([hidden])').localEcho.rtt;
      return rtt !== null && rtt > 30 ? rtt : false;
    }));
    await page.keyboard.press('Enter');
    await waitForScreen(page, '\nwarm-5');
    const sessionId = connectedSockets(page)[0].connected.session.id;
    return { page, instance, sessionId };
  }

  /**
   * Types `key` and waits until the page has seen it echoed (after a prompt the keys after it are
   * predicted) and, unless `drawing` is false, until it draws predictions (a wrong or late echo
   * keeps them back for a while).
   */
  async function typeUntilEchoed(page, key, { drawing = true } = {}) {
    await page.keyboard.type(key);
    await waitFor(`the echo of ${JSON.stringify(key)}`, () => page.evaluate((drawn) => {
      const echo = document.querySelector('.pane:not([hidden])').localEcho;
      return echo.confident && (!drawn || echo.showing);
    }, drawing));
  }

  /**
   * After two animation frames (the terminal draws on those): the prediction drawn over the
   * terminal (its text and whether it is visible), the cursor's line as xterm's buffer holds it,
   * and the local echo's counters.
   */
  function afterTwoFrames(page) {
    return page.evaluate(() => new Promise((resolve) => {
      requestAnimationFrame(() => requestAnimationFrame(() => {
        const pane = document.querySelector('.pane:not([hidden])');
        const buffer = pane.xterm.buffer.active;
        const drawn = [...pane.querySelectorAll('.local-echo')];
        resolve({
          predicted: drawn.map((element) => element.textContent).join(''),
          visible: drawn.some((element) => element.getBoundingClientRect().width > 0 && getComputedStyle(element).display !== 'none'),
          cursorLine: buffer.getLine(buffer.baseY + buffer.cursorY)?.translateToString(true) ?? '',
          buffer: buffer.type,
          mispredictions: pane.localEcho.mispredictions,
        });
      }));
    }));
  }

  /** Waits until the terminal's visible rows equal the server's screen (the REST screen call). */
  async function waitForServerScreen(page, instanceId, sessionId) {
    let shown;
    let server;
    await waitFor('the terminal to equal the server\'s screen', async () => {
      server = await stack.screen(instanceId, sessionId);
      // The server's text has no trailing spaces; xterm's keeps the ones written.
      shown = (await visibleBufferLines(page)).map((line) => line.trimEnd());
      const overlays = await page.locator('.pane:not([hidden]) .local-echo').count();
      return overlays === 0 && JSON.stringify(shown) === JSON.stringify(server.lines);
    }).catch((error) => {
      throw new Error(`${error.message}\nthe terminal: ${JSON.stringify(shown)}\nthe server: ${JSON.stringify(server?.lines)}`);
    });
    return server;
  }

  test('typed keys are drawn before the echo could arrive, and the screen ends as the server\'s', async () => {
    const { page, instance, sessionId } = await openSlow();
    // After Enter the first key waits for its echo (where the new prompt left the cursor).
    await typeUntilEchoed(page, 'e');
    relay.hold();
    await page.keyboard.type('cho predicted');
    const seen = await afterTwoFrames(page);
    relay.release();
    assert.equal(seen.predicted, 'cho predicted', JSON.stringify(seen));
    assert.equal(seen.visible, true);
    assert.equal(seen.cursorLine, '$ e', 'the terminal itself holds only what the server sent');
    await page.keyboard.press('Enter');
    await waitForScreen(page, '\npredicted');
    const server = await waitForServerScreen(page, instance.id, sessionId);
    assert.ok(server.lines.includes('$ echo predicted'), server.text);
    assert.ok(server.lines.includes('predicted'), server.text);
    await closePage(page);
  });

  test('a password prompt (stty -echo) shows nothing of what is typed', async () => {
    const { page, instance, sessionId } = await openSlow();
    await page.keyboard.type('stty -echo; echo ready-$((6*7)); read x; stty echo; echo got-${#x}');
    await page.keyboard.press('Enter');
    await waitForScreen(page, '\nready-42');
    relay.hold();
    await page.keyboard.type('secret');
    const seen = await afterTwoFrames(page);
    relay.release();
    assert.equal(seen.predicted, '', JSON.stringify(seen));
    await page.keyboard.press('Enter');
    await waitForScreen(page, '\ngot-6');
    const server = await waitForServerScreen(page, instance.id, sessionId);
    assert.ok(!server.text.includes('secret'), server.text);
    await closePage(page);
  });

  test('a full-screen program (the alternate screen) gets no predictions', async () => {
    const { page, instance, sessionId } = await openSlow();
    await page.keyboard.type("printf '\\033[?1049h\\033[H'; echo alt-$((6*7)); read y; printf '\\033[?1049l'");
    await page.keyboard.press('Enter');
    await waitForScreen(page, 'alt-42');
    relay.hold();
    await page.keyboard.type('typed');
    const seen = await afterTwoFrames(page);
    relay.release();
    assert.equal(seen.buffer, 'alternate');
    assert.equal(seen.predicted, '', JSON.stringify(seen));
    // The tty echoes it: the server's screen and the page's show it, drawn by the output.
    await waitForScreen(page, 'typed');
    const server = await waitForServerScreen(page, instance.id, sessionId);
    assert.equal(server.alternate_screen, true);
    await page.keyboard.press('Enter');
    await waitFor('the normal screen back', () => page.evaluate(() => document.querySelector('.pane:not([hidden])').xterm.buffer.active.type === 'normal'));
    await closePage(page);
  });

  test('output unlike the prediction (a wide character, attributes) takes it back cleanly', async () => {
    const { page, instance, sessionId } = await openSlow();
    // A "shell" that answers each key with a bold wide character before the key itself.
    await page.keyboard.type("stty -echo -icanon; while c=$(head -c 1); do printf '\\033[1m\\346\\274\\242%s\\033[0m' \"$c\"; done");
    await page.keyboard.press('Enter');
    // The first key waits for its echo, which the output shows just left of the cursor.
    await typeUntilEchoed(page, 'a');
    await waitForScreen(page, '漢a');
    relay.hold();
    await page.keyboard.type('b');
    const seen = await afterTwoFrames(page);
    relay.release();
    assert.equal(seen.predicted, 'b', JSON.stringify(seen));
    await waitForScreen(page, '漢a漢b');
    await waitForServerScreen(page, instance.id, sessionId);
    const later = await afterTwoFrames(page);
    assert.equal(later.mispredictions, seen.mispredictions + 1, 'the prediction was taken back as wrong');
    // Right after a wrong guess, nothing is predicted.
    relay.hold();
    await page.keyboard.type('c');
    const paused = await afterTwoFrames(page);
    relay.release();
    assert.equal(paused.predicted, '', JSON.stringify(paused));
    await waitForScreen(page, '漢a漢b漢c');
    await waitForServerScreen(page, instance.id, sessionId);
    await page.keyboard.press('Control+C');
    await closePage(page);
  });

  test('the setting: Off predicts nothing, a threshold over the round trip neither, back to 30 ms it predicts', async () => {
    const { page, instance, sessionId } = await openSlow();
    const panel = page.getByRole('dialog', { name: 'Typing prediction' });
    /** Types `keys` (the first waits for its echo) with the output held back; what was drawn. */
    const predictedWhileHeld = async (keys, { off = false, drawing = true } = {}) => {
      if (off) await page.keyboard.type(keys[0]);
      else await typeUntilEchoed(page, keys[0], { drawing });
      await waitForScreen(page, `$ ${keys[0]}`);
      relay.hold();
      await page.keyboard.type(keys.slice(1));
      const seen = await afterTwoFrames(page);
      relay.release();
      await waitForScreen(page, `$ ${keys}`);
      // The tty's line kill erases the line with spaces, which do not stop the next prediction.
      await page.keyboard.press('Control+U');
      await waitFor('the line erased', async () => (await visibleBufferLines(page)).some((line) => line.trimEnd() === '$'));
      return seen.predicted;
    };

    await page.getByRole('button', { name: 'Typing prediction' }).click();
    await panel.waitFor();
    assert.match(await panel.textContent(), /Round trip: \d+ ms/);
    await panel.getByLabel('Prediction').selectOption('off');
    await panel.getByRole('button', { name: 'Done' }).click();
    assert.equal(await page.evaluate(() => localStorage.getItem('ptyhub.localEcho')), 'off');
    assert.equal(await predictedWhileHeld('off-typed', { off: true }), '');

    await page.getByRole('button', { name: 'Typing prediction' }).click();
    await panel.getByLabel('Prediction').selectOption('auto');
    await panel.getByLabel('Threshold in milliseconds').fill('5000');
    await panel.getByLabel('Threshold in milliseconds').press('Tab');
    await panel.getByRole('button', { name: 'Done' }).click();
    assert.equal(await page.evaluate(() => localStorage.getItem('ptyhub.localEchoThresholdMs')), '5000');
    assert.equal(await predictedWhileHeld('slow-enough', { drawing: false }), '', 'a 200 ms round trip is under 5000 ms');

    await page.getByRole('button', { name: 'Typing prediction' }).click();
    await panel.getByLabel('Threshold in milliseconds').fill('30');
    await panel.getByLabel('Threshold in milliseconds').press('Tab');
    await panel.getByRole('button', { name: 'Done' }).click();
    assert.equal(await predictedWhileHeld('drawn'), 'rawn');
    await waitForServerScreen(page, instance.id, sessionId);
    await closePage(page);
  });
});
