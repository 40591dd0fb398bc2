// The question a sign-in asks before it replaces the browser's sign-in as someone else: a share
// link opened in a browser signed in as its admin, a sign-in link (`?token=`) of another
// principal, or a token pasted while another tab signed in. The cookie goes with every tab of the browser, so a share link that replaced it silently
// would turn every tab viewer-only; as with a shared document opened while signed in, the user
// stays who they are unless they choose otherwise.

import { el } from './dom.js';

/** @typedef {import('./auth.js').SignedIn} SignedIn */

/**
 * How the page names a principal: its subject, and what it may do.
 * @param {SignedIn} who
 */
function describe(who) {
  const role = who.admin ? 'admin' : who.viewer_only ? 'read-only viewer of a share link' : null;
  return role ? `${who.subject} (${role})` : who.subject;
}

/**
 * Asks whether to replace the browser's sign-in (`signedIn`) with the one offered (`offered`,
 * a share link's when `kind` is `share`). Resolves true for the offered one, false to stay.
 * Staying is the default: it has the focus, and Escape chooses it.
 * @param {HTMLElement} app
 * @param {{ signedIn: SignedIn, offered: SignedIn, kind: 'share' | 'token' }} question
 * @returns {Promise<boolean>}
 */
export function askToReplaceSignIn(app, { signedIn, offered, kind }) {
  return new Promise((resolve) => {
    const share = kind === 'share';
    const replace = el('button', { type: 'button', class: 'replace-sign-in' },
      share ? 'Open as viewer' : `Sign in as ${offered.subject}`);
    const stay = el('button', { type: 'button', class: 'stay-signed-in' }, 'Stay signed in');
    replace.addEventListener('click', () => resolve(true));
    stay.addEventListener('click', () => resolve(false));
    const question = share
      ? 'Open this share link instead? This browser is then signed in as the link\'s read-only viewer, in every tab, until you sign in again.'
      : `Sign in as ${describe(offered)} instead? This browser is then signed in as them, in every tab.`;
    const page = el('main', { class: 'signin', 'data-reason': 'replace', role: 'alertdialog', 'aria-labelledby': 'replace-sign-in-heading' },
      el('h1', { id: 'replace-sign-in-heading' }, share ? 'Open this share link?' : 'Sign in as someone else?'),
      el('p', { class: 'signin-message' }, `You are signed in as ${describe(signedIn)}. ${question}`),
      el('div', { class: 'signin-form' }, replace, stay));
    page.addEventListener('keydown', (event) => {
      if (event.key === 'Escape') resolve(false);
    });
    app.replaceChildren(page);
    document.title = (share ? 'Open this share link?' : 'Sign in') + ' · ptyhub';
    stay.focus();
  });
}
