// The page's entry: signs in from `?token=`, then shows the instances page (`/`) or one
// instance's terminal page (`/instances/{iid}`).

import '@xterm/xterm/css/xterm.css';
import './style.css';
import { adoptTokenFromAddress, forgetToken, storeToken } from './auth.js';
import { el } from './dom.js';
import { showHistoryPage } from './history-page.js';
import { showInstancesPage } from './instances-page.js';
import { applyPageTheme } from './settings.js';
import { showTerminalPage } from './terminal-page.js';

applyPageTheme();

const app = document.getElementById('app');

function route() {
  const token = adoptTokenFromAddress();
  if (!token) {
    showSignIn('missing');
    return;
  }
  const handlers = {
    onUnauthorized: () => {
      forgetToken();
      showSignIn('refused');
    },
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
    showTerminalPage(app, decodeURIComponent(match[1]), { viewer, ...handlers });
  } else {
    showProblem({ status: 404, detail: `there is no page at ${path}` });
  }
}

/** The sign-in page: shown when there is no token, or the gateway refused it. */
function showSignIn(reason) {
  const input = el('input', { type: 'password', name: 'token', autocomplete: 'off', required: true, 'aria-label': 'Access token' });
  const form = el('form', { class: 'signin-form' },
    el('label', {}, 'Access token', input),
    el('button', { type: 'submit' }, 'Sign in'));
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    if (input.value.trim() === '') return;
    storeToken(input.value.trim());
    route();
  });
  const message = reason === 'refused'
    ? 'The access token was refused by the gateway. It may have expired or belong to another server.'
    : 'This page needs an access token and none was given.';
  app.replaceChildren(el('main', { class: 'signin', 'data-reason': reason },
    el('h1', {}, reason === 'refused' ? 'Access token refused' : 'Sign in required'),
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
