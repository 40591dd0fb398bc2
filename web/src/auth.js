// Signing in and out. The page holds no credential: the gateway exchanges a `?token=` in the
// address (or the token pasted into the sign-in form) for an HttpOnly session cookie, which the
// browser then sends with every request and WebSocket of this site, in every tab.
//
// A share link is the exception that proves it: the gateway redirects its `?share=` into the
// fragment, and the page signs in with it (once, then forgets it), because only the page's own
// request carries the cookie the share would replace. The gateway refuses to replace a sign-in
// of someone else without `replace: true`, and the page asks the user first (signin.js).

import { el } from './dom.js';

/** What the fragment says when the gateway refused the token of a sign-in link. */
const REFUSED_FRAGMENT = '#token-refused';

/** The start of the fragment a share link is redirected to; its token follows. */
const SHARE_FRAGMENT = '#share=';

/** The storage key where earlier versions of the page kept the token. */
const LEGACY_TOKEN_KEY = 'ptyhub.token';

/**
 * @typedef {{ subject: string, admin: boolean, expires_at?: string | null, viewer_only?: boolean, session_id?: string | null }} SignedIn
 */

/**
 * Who the browser is signed in as, or null when it is not; `refused` says that a sign-in link's
 * token was refused just now (the gateway redirected here with the fragment that says so).
 * @returns {Promise<{ signedIn: SignedIn | null, refused: boolean }>}
 */
export async function currentSignIn() {
  sessionStorage.removeItem(LEGACY_TOKEN_KEY);
  let refused = false;
  if (window.location.hash === REFUSED_FRAGMENT) {
    refused = true;
    window.history.replaceState(window.history.state, '', window.location.pathname + window.location.search);
  }
  const response = await fetch('/api/v1/auth/session', { headers: { Accept: 'application/json' }, cache: 'no-store' });
  if (response.status === 401) return { signedIn: null, refused };
  if (!response.ok) throw new Error(`the gateway answered ${response.status} when asked who is signed in`);
  return { signedIn: await response.json(), refused };
}

/**
 * A share link's token, taken out of the address (the gateway moved it from `?share=` into the
 * fragment); null when the address carries none.
 * @returns {string | null}
 */
export function takeShareToken() {
  const { hash } = window.location;
  if (!hash.startsWith(SHARE_FRAGMENT)) return null;
  window.history.replaceState(window.history.state, '', window.location.pathname + window.location.search);
  let token;
  try {
    token = decodeURIComponent(hash.slice(SHARE_FRAGMENT.length)).trim();
  } catch {
    return null;
  }
  return token === '' ? null : token;
}

/**
 * @typedef {{ outcome: 'signed-in' } | { outcome: 'refused' } | { outcome: 'conflict', signedIn: SignedIn, offered: SignedIn }} SignInResult
 */

/**
 * Exchanges a token for the session cookie: `refused` when the gateway refused the token,
 * `conflict` when the browser is signed in as someone else, whom only `replace` replaces.
 * @param {string} token
 * @param {{ replace?: boolean }} [options]
 * @returns {Promise<SignInResult>}
 */
export async function signIn(token, { replace = false } = {}) {
  const response = await fetch('/api/v1/auth/session', {
    method: 'POST',
    headers: { Accept: 'application/json', 'Content-Type': 'application/json', Authorization: `Bearer ${token}` },
    body: JSON.stringify({ replace }),
    cache: 'no-store',
  });
  if (response.status === 401) return { outcome: 'refused' };
  if (response.status === 409) {
    const conflict = await response.json();
    return { outcome: 'conflict', signedIn: conflict.signed_in, offered: conflict.offered };
  }
  if (!response.ok) throw new Error(`the gateway answered ${response.status} to the sign-in`);
  return { outcome: 'signed-in' };
}

/** Ends the session cookie. */
export async function signOut() {
  await fetch('/api/v1/auth/session', { method: 'DELETE', cache: 'no-store' });
}

/** A header button that signs out and goes to the sign-in page. */
export function signOutButton() {
  return el('button', {
    type: 'button',
    class: 'text-button sign-out',
    onclick: async () => {
      await signOut();
      window.location.assign('/');
    },
  }, 'Sign out');
}
