// The browser tab's own client id (CONTRACT.md "alias": `client:<client-id>`), kept in
// sessionStorage so a reload reattaches the same PTY.
//
// Browsers copy sessionStorage into a tab opened from this one (window.open, "duplicate tab"),
// which would make two tabs share one PTY. `window.name` survives reloads of the same tab but is
// not copied to a new one, so a stored id whose mark is missing from `window.name` was copied,
// and this tab takes a fresh one.

const CLIENT_ID_KEY = 'ptyhub.clientId';
const NAME_PREFIX = 'ptyhub-client:';

export function tabClientId() {
  const stored = sessionStorage.getItem(CLIENT_ID_KEY);
  if (stored && window.name === `${NAME_PREFIX}${stored}`) return stored;
  const fresh = newClientId();
  sessionStorage.setItem(CLIENT_ID_KEY, fresh);
  window.name = `${NAME_PREFIX}${fresh}`;
  return fresh;
}

function newClientId() {
  if (typeof crypto.randomUUID === 'function') return crypto.randomUUID();
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (byte) => byte.toString(16).padStart(2, '0')).join('');
}
