// Signing in and out. The page holds no credential: the gateway exchanges a `?token=` in the
// address (or the token pasted into the sign-in form) for an HttpOnly session cookie, which the
// browser then sends with every request and WebSocket of this site, in every tab.

import { el } from './dom.js';

/** What the fragment says when the gateway refused the token of a sign-in link. */
const REFUSED_FRAGMENT = '#token-refused';

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
 * Exchanges a token for the session cookie; false when the gateway refused it.
 * @param {string} token
 */
export async function signIn(token) {
  const response = await fetch('/api/v1/auth/session', {
    method: 'POST',
    headers: { Accept: 'application/json', Authorization: `Bearer ${token}` },
    cache: 'no-store',
  });
  if (response.status === 401) return false;
  if (!response.ok) throw new Error(`the gateway answered ${response.status} to the sign-in`);
  return true;
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
