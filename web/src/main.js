// The page's entry: signs in with a link's token when the address carries one (a sign-in link's
// or a share link's, which the gateway moved into the fragment; asking first when that would
// replace another sign-in), asks who the session cookie signs in, then shows the instances page
// (`/`) or one instance's terminal page (`/instances/{iid}`), or the sign-in form.

import '@xterm/xterm/css/xterm.css';
import './style.css';
import { currentSignIn, signIn, takeLinkToken } from './auth.js';
import { el } from './dom.js';
import { showHistoryPage } from './history-page.js';
import { showInstancesPage } from './instances-page.js';
import { askToReplaceSignIn } from './signin.js';
import { applyPageTheme } from './settings.js';
import { showTerminalPage } from './terminal-page.js';

applyPageTheme();

const app = document.getElementById('app');

async function route() {
  const link = takeLinkToken();
  if (link !== null) {
    let outcome;
    try {
      outcome = await signInAsking(link.token, link.kind);
    } catch (error) {
      showProblem({ status: 0, detail: error instanceof Error ? error.message : String(error) });
      return;
    }
    if (outcome === 'refused') {
      showSignIn(link.kind === 'share' ? 'share-refused' : 'refused');
      return;
    }
  }
  let signedIn;
  try {
    signedIn = await currentSignIn();
  } catch (error) {
    showProblem({ status: 0, detail: error instanceof Error ? error.message : String(error) });
    return;
  }
  if (!signedIn) {
    showSignIn('missing');
    return;
  }
  const handlers = {
    onUnauthorized: () => showSignIn('expired'),
    onRefused: (error) => showProblem(error),
  };
  const path = window.location.pathname;
  const match = /^\/instances\/([^/]+)\/?$/.exec(path);
  if (path === '/' || path === '/index.html') {
    showInstancesPage(app, handlers);
  } else if (match && new URLSearchParams(window.location.search).get('view') === 'history') {
    showHistoryPage(app, decodeURIComponent(match[1]), handlers);
  } else if (match) {
    const viewer = new URLSearchParams(window.location.search).get('mode') === 'view';
    showTerminalPage(app, decodeURIComponent(match[1]), { viewer, viewerOnly: signedIn.viewer_only === true, ...handlers });
  } else {
    showProblem({ status: 404, detail: `there is no page at ${path}` });
  }
}

/**
 * Signs in with `token`; when the browser is signed in as someone else, asks whether to replace
 * that sign-in. `stayed` when the user chose to keep it.
 * @param {string} token
 * @param {'share' | 'token'} kind
 * @returns {Promise<'signed-in' | 'stayed' | 'refused'>}
 */
async function signInAsking(token, kind) {
  const result = await signIn(token);
  if (result.outcome !== 'conflict') return result.outcome;
  const replace = await askToReplaceSignIn(app, { signedIn: result.signedIn, offered: result.offered, kind });
  if (!replace) return 'stayed';
  return (await signIn(token, { replace: true })).outcome === 'signed-in' ? 'signed-in' : 'refused';
}

/**
 * The sign-in page: shown when the browser is not signed in, the gateway refused a token or a
 * share link, or the sign-in ended.
 * @param {'missing' | 'refused' | 'share-refused' | 'expired'} reason
 */
function showSignIn(reason) {
  const input = el('input', { type: 'password', name: 'token', autocomplete: 'off', required: true, 'aria-label': 'Access token' });
  const form = el('form', { class: 'signin-form' },
    el('label', {}, 'Access token', input),
    el('button', { type: 'submit' }, 'Sign in'));
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    if (input.value.trim() === '') return;
    let outcome;
    try {
      outcome = await signInAsking(input.value.trim(), 'token');
    } catch (error) {
      showProblem({ status: 0, detail: error instanceof Error ? error.message : String(error) });
      return;
    }
    if (outcome === 'refused') showSignIn('refused');
    else route();
  });
  const message = {
    refused: 'The access token was refused by the gateway. It may have expired or belong to another server.',
    'share-refused': 'The share link was refused by the gateway: it may have expired or been revoked. Ask for a new one, or sign in.',
    expired: 'The sign-in has ended (it expired, was signed out, or the gateway restarted). Sign in again.',
    missing: 'This page needs an access token and none was given.',
  }[reason];
  const heading = { refused: 'Access token refused', 'share-refused': 'Share link refused', expired: 'Signed out', missing: 'Sign in required' }[reason];
  app.replaceChildren(el('main', { class: 'signin', 'data-reason': reason },
    el('h1', {}, heading),
    el('p', { class: 'signin-message' }, message),
    el('p', {}, 'Open the link that ', el('code', {}, 'ptyhub up'), ' printed (it ends in ', el('code', {}, '?token=…'), '), or paste the token here.'),
    form));
  document.title = 'Sign in · ptyhub';
}

function showProblem(error) {
  const status = error?.status ?? 0;
  const title = status === 403 ? 'Not allowed' : status === 404 ? 'Not found' : status === 0 ? 'Gateway unreachable' : 'Something went wrong';
  app.replaceChildren(el('main', { class: 'problem', 'data-status': String(status) },
    el('h1', {}, title),
    el('p', {}, error?.detail ?? String(error)),
    el('p', {}, el('a', { href: '/' }, 'Back to the instances'))));
  document.title = `${title} · ptyhub`;
}

route();
