// Signing in and out. The page holds no credential: it exchanges a token for an HttpOnly session
// cookie (`POST /api/v1/auth/session`), which the browser then sends with every request and
// WebSocket of this site, in every tab.
//
// A link's token, a sign-in link's `?token=` or a share link's `?share=`, is redirected by the
// gateway into the fragment, and the page signs in with it (once, then forgets it), because only
// the page's own request carries the cookie the link would replace. The gateway refuses to
// replace a sign-in of someone else without `replace: true`, and the page asks the user first
// (signin.js). The token pasted into the sign-in form goes the same way.

import { el } from './dom.js';

/** The start of the fragment a share link is redirected to; its token follows. */
const SHARE_FRAGMENT = '#share=';

/** The start of the fragment a sign-in link (`?token=`) is redirected to; its token follows. */
const TOKEN_FRAGMENT = '#token=';

/** The storage key where earlier versions of the page kept the token. */
const LEGACY_TOKEN_KEY = 'ptyhub.token';

/**
 * @typedef {{ subject: string, admin: boolean, expires_at?: string | null, viewer_only?: boolean, session_id?: string | null }} SignedIn
 */

/**
 * Who the browser is signed in as, or null when it is not.
 * @returns {Promise<SignedIn | null>}
 */
export async function currentSignIn() {
  sessionStorage.removeItem(LEGACY_TOKEN_KEY);
  const response = await fetch('/api/v1/auth/session', { headers: { Accept: 'application/json' }, cache: 'no-store' });
  if (response.status === 401) return null;
  if (!response.ok) throw new Error(`the gateway answered ${response.status} when asked who is signed in`);
  return response.json();
}

/**
 * A link's token, taken out of the address (the gateway moved a share link's `?share=` into the
 * fragment as `#share=`, a sign-in link's `?token=` as `#token=`), with which kind of link it
 * came in; null when the address carries none.
 * @returns {{ token: string, kind: 'share' | 'token' } | null}
 */
export function takeLinkToken() {
  const { hash } = window.location;
  const kind = hash.startsWith(SHARE_FRAGMENT) ? 'share' : hash.startsWith(TOKEN_FRAGMENT) ? 'token' : null;
  if (kind === null) return null;
  window.history.replaceState(window.history.state, '', window.location.pathname + window.location.search);
  const prefix = kind === 'share' ? SHARE_FRAGMENT : TOKEN_FRAGMENT;
  let token;
  try {
    token = decodeURIComponent(hash.slice(prefix.length)).trim();
  } catch {
    return null;
  }
  return token === '' ? null : { token, kind };
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
