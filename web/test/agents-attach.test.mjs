// A reload with three sessions whose controllers are elsewhere, in Debian's Chromium against a
// real stack: the page attaches (and takes control of) the shown tab's session only, and each
// other one when its tab is first shown.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { agentsHarness, agentsSkip, sessionsPath } from './agents-support.mjs';
import { closePage, newDesktopPage, tabNamed, tabState, waitFor, waitForActiveConnected } from './support.mjs';

const skip = agentsSkip();

describe('web page for phones and agents: only the shown tab takes control on load', { skip: skip ?? false }, () => {
  const harness = agentsHarness();

  test('reload with three sessions: the other two sessions\' controllers keep control until their tabs are shown', async () => {
    const instance = await harness.stack.createInstance();
    const sessions = [];
    for (let index = 0; index < 3; index += 1) {
      const { status, body } = await harness.stack.rest('POST', sessionsPath(instance.id), {});
      assert.equal(status, 201);
      sessions.push(body);
    }
    // Three controllers elsewhere (a laptop, a script): sockets in another browser context.
    const elsewhere = await newDesktopPage(harness.chromium.browser);
    await elsewhere.goto(`${harness.stack.origin}/healthz`);
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
    }, { instanceId: instance.id, ids: sessions.map((session) => session.id), token: harness.stack.token });
    await waitFor('three controllers', () => elsewhere.evaluate(() => Object.keys(window.connected).length === 3));
    const closes = () => elsewhere.evaluate(() => window.closes);

    const page = await harness.open('desktop', instance.id);
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
});
