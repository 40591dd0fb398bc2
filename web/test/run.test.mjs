// A program runs a command in the terminal a person is watching: the person has the session open
// in the page (holding control, so the program must say `force`), a program calls REST `run`, and
// the page's terminal shows the command typed at the prompt and its output, as a colleague typing
// it would have, once, while the program gets the exit code and the output.

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import {
  closePage, launchBrowser, missingRequirement, newDesktopPage, screenText, startStack,
  waitForConnectionState, waitForScreen,
} from './support.mjs';

const skip = missingRequirement();
if (skip) console.log(`# skipping the run tests: ${skip}`);

describe('a run watched in the page', { skip: skip ?? false }, () => {
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

  test('the page shows a command a program ran, typed at the prompt, and its output', async () => {
    const instance = await stack.createInstance();
    const sessions = `/api/v1/instances/${instance.id}/terminal/sessions`;
    const created = await stack.rest('POST', sessions, { name: 'watched' });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    const session = created.body;

    const page = await newDesktopPage(chromium.browser);
    await page.goto(`${stack.origin}/instances/${instance.id}?token=${stack.token}`);
    await page.locator('[role="tablist"] [role="tab"]').first().waitFor();
    await waitForConnectionState(page, 'Connected');
    // The program waits for the shell's prompt as an automation would, not for its text.
    const ready = await stack.rest('POST', `${sessions}/${session.id}/wait`, { for: 'prompt', timeout_ms: 30000 });
    assert.equal(ready.status, 200, JSON.stringify(ready.body));
    assert.equal(ready.body.state, 'at_prompt', JSON.stringify(ready.body));

    // The page holds control, as a person typing does: a program types only when it says so.
    const command = 'echo "watched-$((6*7))"; (exit 3)';
    const refused = await stack.rest('POST', `${sessions}/${session.id}/run`, { command });
    assert.equal(refused.status, 409, JSON.stringify(refused.body));
    const ran = await stack.rest('POST', `${sessions}/${session.id}/run`, { command, force: true, timeout_ms: 30000 });
    assert.equal(ran.status, 200, JSON.stringify(ran.body));
    assert.equal(ran.body.exit_code, 3, JSON.stringify(ran.body));
    assert.equal(ran.body.output, 'watched-42\n', JSON.stringify(ran.body));

    // The command line as it was typed, and its output on the line after it.
    const shown = await waitForScreen(page, 'watched-42\n');
    assert.match(shown, /echo "watched-\$\(\(6\*7\)\)"; \(exit 3\)\nwatched-42\n/, shown);
    assert.equal((await screenText(page)).split('\n').filter((line) => line === 'watched-42').length, 1);
    await closePage(page);
  });
});
