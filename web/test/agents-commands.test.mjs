// The commands' marks in the scrollback, in Debian's Chromium against a real stack: colours by
// exit code, the jump keys, and the mark's menu (copy the command or its output, run it again), on
// desktop (1280x720) and a phone (390x844 with touch).

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { agentsHarness, agentsSkip, press } from './agents-support.mjs';
import { closePage, screenText, typeLine, waitFor, waitForActiveConnected } from './support.mjs';

const skip = agentsSkip();

describe('web page for phones and agents: commands in the scrollback', { skip: skip ?? false }, () => {
  const harness = agentsHarness();

  for (const device of ['desktop', 'phone']) {
    test(`${device}: commands get marks by exit code, the jump keys move between them, and the menu copies a command's output`, async () => {
      const instance = await harness.stack.createInstance();
      const page = await harness.open(device, instance.id);
      const marks = () => page.evaluate(() => document.querySelector('.pane:not([hidden])').commandMarks);
      // One command at a time, as a person types them: each after the last one's prompt came back
      // (a POSIX sh's command line is read from the screen when it is entered).
      const lines = ['true', 'false', 'seq 1 60', "printf 'out-1\\nout-2\\n'"];
      let lastSeen = null;
      // Waits until `done` holds for the marks; a timeout names the marks and the screen it saw.
      const waitForMarks = (what, done) => waitFor(what, async () => {
        lastSeen = await marks();
        return done(lastSeen.marks);
      }).catch(async (error) => {
        throw new Error(`${error.message}; the marks: ${JSON.stringify(lastSeen)}; the screen:\n${await screenText(page)}`, { cause: error });
      });
      for (const [index, line] of lines.entries()) {
        await typeLine(page, line);
        await waitForMarks(`the mark of ${line}`, (seen) => seen.filter((mark) => mark.outcome !== 'running').length === index + 1);
      }
      await waitForMarks('four marks, all ended', (seen) => seen.length === 4 && seen.every((mark) => mark.outcome !== 'running'));
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

  // A reloaded page draws the screen from a snapshot, which carries no marks: the command typed
  // at the prompt it shows still gets its mark, on the prompt's line.
  test('desktop: after a reload, the command typed at the prompt the snapshot drew gets its mark there', async () => {
    const instance = await harness.stack.createInstance();
    const page = await harness.open('desktop', instance.id);
    const marks = () => page.evaluate(() => document.querySelector('.pane:not([hidden])').commandMarks);
    await typeLine(page, 'true');
    await waitFor('the prompt after true', async () => /\$ true\n\$/.test(await screenText(page)));
    await page.reload();
    await page.locator('[role="tablist"] [role="tab"]').first().waitFor();
    await waitForActiveConnected(page);
    await waitFor('the prompt after true, drawn by the snapshot', async () => /\$ true\n\$/.test(await screenText(page)));
    assert.deepEqual((await marks()).marks, [], 'the snapshot draws no marks of its own');

    await typeLine(page, 'echo after-$((40+2))');
    let seen = null;
    await waitFor('the mark of the command typed after the reload', async () => {
      seen = await marks();
      return seen.marks.some((mark) => mark.outcome === 'succeeded');
    }).catch(async (error) => {
      throw new Error(`${error.message}; the marks: ${JSON.stringify(seen)}; the screen:\n${await screenText(page)}`, { cause: error });
    });
    const [mark] = seen.marks;
    assert.equal(seen.marks.length, 1, JSON.stringify(seen));
    assert.equal(mark.command, 'echo after-$((40+2))');
    const typedAt = await page.evaluate(() => {
      const buffer = document.querySelector('.pane:not([hidden])').xterm.buffer.active;
      for (let line = 0; line < buffer.length; line += 1) {
        if (buffer.getLine(line)?.translateToString(true).startsWith('$ echo after-')) return line;
      }
      return null;
    });
    assert.equal(mark.line, typedAt, "the mark is on the prompt's line");
    await closePage(page);
  });
});
