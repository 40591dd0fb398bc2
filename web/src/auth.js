// The credential: taken from `?token=` once, kept in sessionStorage, removed from the address bar.

const TOKEN_KEY = 'ptyhub.token';

/** Moves a `?token=` from the address into sessionStorage and returns the token in use, if any. */
export function adoptTokenFromAddress() {
  const url = new URL(window.location.href);
  const fromAddress = url.searchParams.get('token');
  if (fromAddress !== null) {
    url.searchParams.delete('token');
    // Replace, not push: the token must not stay in the history either.
    window.history.replaceState(window.history.state, '', url.pathname + url.search + url.hash);
    if (fromAddress.trim() !== '') {
      sessionStorage.setItem(TOKEN_KEY, fromAddress.trim());
    }
  }
  return currentToken();
}

export function currentToken() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function storeToken(token) {
  sessionStorage.setItem(TOKEN_KEY, token);
}

export function forgetToken() {
  sessionStorage.removeItem(TOKEN_KEY);
}
